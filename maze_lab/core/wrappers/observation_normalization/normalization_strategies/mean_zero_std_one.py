"""Normalization to mean zero and standard deviation one."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from maze_lab.core.wrappers.observation_normalization.normalization_strategies.base import (
    ObservationNormalizationStrategy,
    StatisticsType,
)


class MeanZeroStdOneObservationNormalizationStrategy(ObservationNormalizationStrategy):
    """Computes ``(x - mean) / std``; statistics ``mean`` and ``std`` (a std of 0 is replaced by 1)."""

    statistics_keys = ("mean", "std")

    def estimate_stats(self, observations: Sequence[np.ndarray]) -> StatisticsType:
        """Mean and (population) standard deviation over the configured axes."""
        mean = self._reduce(np.mean, observations)
        std = self._reduce(np.std, observations)
        return {"mean": mean, "std": np.where(std == 0, np.float32(1.0), std).astype(np.float32)}

    def _on_statistics_set(self) -> None:
        std = self._statistics["std"]
        self._mean = self._statistics["mean"]
        self._std = np.where(std == 0, np.float32(1.0), std).astype(np.float32)

    def normalize_value(self, value: np.ndarray) -> np.ndarray:
        """Subtract the mean and divide by the standard deviation."""
        return (value - self._mean) / self._std
