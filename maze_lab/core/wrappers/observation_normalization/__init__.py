"""Observation normalization: the ObservationNormalizationWrapper, its strategies and helpers."""

from maze_lab.core.wrappers.observation_normalization.normalization_strategies import (
    NORMALIZATION_STRATEGY_REGISTRY,
    MeanZeroStdOneObservationNormalizationStrategy,
    ObservationNormalizationStrategy,
    RangeZeroOneObservationNormalizationStrategy,
    StatisticsType,
    StructuredStatisticsType,
)
from maze_lab.core.wrappers.observation_normalization.observation_normalization_utils import (
    estimate_observation_normalization_statistics,
    find_normalization_wrapper,
    make_normalized_env_factory,
    normalization_env_factory,
    obtain_normalization_statistics,
)
from maze_lab.core.wrappers.observation_normalization.observation_normalization_wrapper import (
    ObservationNormalizationWrapper,
    RandomSamplingPolicy,
    resolve_normalization_strategy,
)
from maze_lab.core.wrappers.observation_normalization.statistics_io import (
    load_normalization_statistics,
    save_normalization_statistics,
)

__all__ = [
    "NORMALIZATION_STRATEGY_REGISTRY",
    "MeanZeroStdOneObservationNormalizationStrategy",
    "ObservationNormalizationStrategy",
    "ObservationNormalizationWrapper",
    "RandomSamplingPolicy",
    "RangeZeroOneObservationNormalizationStrategy",
    "StatisticsType",
    "StructuredStatisticsType",
    "estimate_observation_normalization_statistics",
    "find_normalization_wrapper",
    "load_normalization_statistics",
    "make_normalized_env_factory",
    "normalization_env_factory",
    "obtain_normalization_statistics",
    "resolve_normalization_strategy",
    "save_normalization_statistics",
]
