"""The ObservationNormalizationStrategy interface and the registry that resolves strategies by class name."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

StatisticsType = dict[str, np.ndarray]
StructuredStatisticsType = dict[str, StatisticsType]

NORMALIZATION_STRATEGY_REGISTRY: dict[str, type[ObservationNormalizationStrategy]] = {}


class ObservationNormalizationStrategy(ABC):
    """Normalizes the values of one Box observation with statistics that are estimated or given.

    Statistics are float32 arrays that broadcast to the observation shape. They are estimated from observations
    stacked along a new leading sample axis 0: ``axis=None`` reduces over everything (scalar statistics),
    ``axis=[0]`` gives one statistic per element, ``axis=[0, 1, 2]`` on (H, W, C) images one per channel.

    :param observation_space: the Box space of the observation.
    :param clip_range: (min, max) applied after normalization; None for no bound.
    :param axis: axes of the stacked samples to reduce over when estimating; must include 0 if given.
    :param name: the observation's name (for error messages).
    """

    statistics_keys: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        NORMALIZATION_STRATEGY_REGISTRY[cls.__name__] = cls

    def __init__(self, observation_space: gym.spaces.Box, clip_range: Sequence[float | None] | None = (None, None),
                 axis: int | Sequence[int] | None = None, name: str = "observation"):
        if not isinstance(observation_space, gym.spaces.Box):
            raise TypeError(f"{type(self).__name__}: observation '{name}' must have a Box space, got "
                            f"{observation_space}")
        self.observation_space = observation_space
        self.name = name
        clip_range = (None, None) if clip_range is None else tuple(clip_range)
        if len(clip_range) != 2:
            raise ValueError(f"{type(self).__name__}: clip_range must be (min, max), got {clip_range}")
        self.clip_min, self.clip_max = clip_range
        if axis is None:
            self.axis: tuple[int, ...] | None = None
        else:
            self.axis = (int(axis),) if np.isscalar(axis) else tuple(int(a) for a in axis)
            if 0 not in self.axis:
                raise ValueError(f"{type(self).__name__}: axis {list(self.axis)} must include 0, the axis along "
                                 f"which the observation samples are stacked")
        self._statistics: StatisticsType | None = None

    # --- interface ---------------------------------------------------------------------------------------
    @abstractmethod
    def estimate_stats(self, observations: Sequence[np.ndarray]) -> StatisticsType:
        """Statistics estimated from a list of observations."""

    @abstractmethod
    def normalize_value(self, value: np.ndarray) -> np.ndarray:
        """The normalized value (float32, before clipping)."""

    # --- shared behaviour ----------------------------------------------------------------------------------
    def _reduce(self, fn: Callable[..., np.ndarray], observations: Sequence[np.ndarray]) -> np.ndarray:
        """Apply ``fn(array, axis=..., keepdims=...)`` to the stacked observations; drop the sample axis."""
        if len(observations) == 0:
            raise ValueError(f"{type(self).__name__}: no observations of '{self.name}' to estimate statistics from")
        array = np.stack([np.asarray(o, dtype=np.float64) for o in observations])
        if self.axis is None:
            return np.asarray(fn(array), dtype=np.float32)
        return np.asarray(fn(array, axis=self.axis, keepdims=True)[0], dtype=np.float32)

    def normalize_and_process_value(self, value: np.ndarray) -> np.ndarray:
        """Normalize and clip one observation."""
        value = self.normalize_value(np.asarray(value, dtype=np.float32))
        if self.clip_min is not None or self.clip_max is not None:
            value = np.clip(value, self.clip_min, self.clip_max)
        return value.astype(np.float32, copy=False)

    def set_statistics(self, stats: Mapping[str, Any]) -> None:
        """Set the statistics; each must broadcast to the observation shape."""
        keys = set(stats)
        if keys != set(self.statistics_keys):
            raise ValueError(f"{type(self).__name__}: statistics of observation '{self.name}' need the keys "
                             f"{list(self.statistics_keys)}, got {sorted(keys)}")
        shape = self.observation_space.shape
        result = {}
        for key in self.statistics_keys:
            value = np.asarray(stats[key], dtype=np.float32)
            try:
                ok = np.broadcast_shapes(value.shape, shape) == shape
            except ValueError:
                ok = False
            if not ok:
                raise ValueError(f"normalization statistic '{key}' of observation '{self.name}' has shape "
                                 f"{value.shape}, which does not broadcast to the observation shape {shape}")
            result[key] = value
        self._statistics = result
        self._on_statistics_set()

    def _on_statistics_set(self) -> None:
        """Hook to precompute values from the statistics."""

    def get_statistics(self) -> StatisticsType | None:
        """The statistics (None until set or estimated)."""
        return None if self._statistics is None else {k: v.copy() for k, v in self._statistics.items()}

    def is_initialized(self) -> bool:
        """Whether statistics are set."""
        return self._statistics is not None

    def normalized_space(self) -> gym.spaces.Box:
        """The float32 Box of normalized observations (bounds normalized like values, so they stay tight)."""
        space = self.observation_space
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            low = self.normalize_and_process_value(np.broadcast_to(space.low, space.shape))
            high = self.normalize_and_process_value(np.broadcast_to(space.high, space.shape))
        return gym.spaces.Box(low=low, high=high, dtype=np.float32)

    def __repr__(self) -> str:
        return f"{type(self).__name__}('{self.name}', clip_range=({self.clip_min}, {self.clip_max}), axis={self.axis})"
