"""Normalization to the value range [0, 1]."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from maze_lab.core.wrappers.observation_normalization.normalization_strategies.base import (
    ObservationNormalizationStrategy,
    StatisticsType,
)


class RangeZeroOneObservationNormalizationStrategy(ObservationNormalizationStrategy):
    """Computes ``(x - min) / (max - min)``; statistics ``min`` and ``max`` (an empty range divides by 1)."""

    statistics_keys = ("min", "max")

    def estimate_stats(self, observations: Sequence[np.ndarray]) -> StatisticsType:
        """Minimum and maximum over the configured axes."""
        return {"min": self._reduce(np.min, observations), "max": self._reduce(np.max, observations)}

    def _on_statistics_set(self) -> None:
        span = self._statistics["max"] - self._statistics["min"]
        self._min = self._statistics["min"]
        self._span = np.where(span == 0, np.float32(1.0), span).astype(np.float32)

    def normalize_value(self, value: np.ndarray) -> np.ndarray:
        """Shift by the minimum and divide by the range."""
        return (value - self._min) / self._span
