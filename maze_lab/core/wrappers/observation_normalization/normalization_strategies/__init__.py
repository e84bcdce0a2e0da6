"""Built-in observation normalization strategies (registered by class name for configs)."""

from maze_lab.core.wrappers.observation_normalization.normalization_strategies.base import (
    NORMALIZATION_STRATEGY_REGISTRY,
    ObservationNormalizationStrategy,
    StatisticsType,
    StructuredStatisticsType,
)
from maze_lab.core.wrappers.observation_normalization.normalization_strategies.mean_zero_std_one import (
    MeanZeroStdOneObservationNormalizationStrategy,
)
from maze_lab.core.wrappers.observation_normalization.normalization_strategies.range_zero_one import (
    RangeZeroOneObservationNormalizationStrategy,
)

__all__ = [
    "NORMALIZATION_STRATEGY_REGISTRY",
    "MeanZeroStdOneObservationNormalizationStrategy",
    "ObservationNormalizationStrategy",
    "RangeZeroOneObservationNormalizationStrategy",
    "StatisticsType",
    "StructuredStatisticsType",
]
