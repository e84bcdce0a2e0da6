"""Imports every built-in wrapper so that the registry can resolve them by class name."""

from maze_lab.core.wrappers.dict_action_wrapper import DictActionWrapper
from maze_lab.core.wrappers.dict_observation_wrapper import DictObservationWrapper
from maze_lab.core.wrappers.discretize_actions_wrapper import DiscretizeActionsWrapper
from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.core.wrappers.monitoring_wrapper import MazeEnvMonitoringWrapper
from maze_lab.core.wrappers.no_dict_spaces_wrapper import (
    NoDictActionWrapper,
    NoDictObservationWrapper,
    NoDictSpacesWrapper,
)
from maze_lab.core.wrappers.observation_normalization.observation_normalization_wrapper import (
    ObservationNormalizationWrapper,
)
from maze_lab.core.wrappers.observation_preprocessing.preprocessing_wrapper import PreProcessingWrapper
from maze_lab.core.wrappers.observation_stack_wrapper import ObservationStackWrapper
from maze_lab.core.wrappers.random_reset_wrapper import RandomResetWrapper
from maze_lab.core.wrappers.return_normalization_reward_wrapper import ReturnNormalizationRewardWrapper
from maze_lab.core.wrappers.reward_clipping_wrapper import RewardClippingWrapper
from maze_lab.core.wrappers.reward_scaling_wrapper import RewardScalingWrapper
from maze_lab.core.wrappers.sorted_spaces_wrapper import SortedSpacesWrapper
from maze_lab.core.wrappers.split_actions_wrapper import SplitActionsWrapper
from maze_lab.core.wrappers.time_limit_wrapper import TimeLimitWrapper

__all__ = [
    "DictActionWrapper",
    "DictObservationWrapper",
    "DiscretizeActionsWrapper",
    "LogStatsWrapper",
    "MazeEnvMonitoringWrapper",
    "NoDictActionWrapper",
    "NoDictObservationWrapper",
    "NoDictSpacesWrapper",
    "ObservationNormalizationWrapper",
    "ObservationStackWrapper",
    "PreProcessingWrapper",
    "RandomResetWrapper",
    "ReturnNormalizationRewardWrapper",
    "RewardClippingWrapper",
    "RewardScalingWrapper",
    "SortedSpacesWrapper",
    "SplitActionsWrapper",
    "TimeLimitWrapper",
]
