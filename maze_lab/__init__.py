"""maze-lab: a Jupyter-first workbench for applied reinforcement learning built on the Maze concepts.

Everything a notebook uses has a short import, ``from maze_lab import GymMazeEnv, RunContext, PPO``. The names are
resolved on first use (PEP 562), so ``import maze_lab`` stays light: torch, matplotlib and the trainers are imported
only when a name that needs them is used.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS: dict[str, tuple[str, ...]] = {
    # environments: the layered hierarchy, actors, conversion and reward/KPI interfaces
    "maze_lab.core.env.core_env": ("CoreEnv",),
    "maze_lab.core.env.maze_env": ("MazeEnv", "EnvNotResetError"),
    "maze_lab.core.env.structured_env": ("StructuredEnv", "ActorID"),
    "maze_lab.core.env.environment_context": ("EnvironmentContext",),
    "maze_lab.core.env.interfaces": ("ObservationConversionInterface", "ActionConversionInterface",
                                     "RewardAggregatorInterface", "KpiCalculator", "Renderer"),
    "maze_lab.core.env.space_checks": ("SpaceMismatchError",),
    # Gymnasium, both ways
    "maze_lab.core.wrappers.gym_maze_env": ("GymMazeEnv", "GymnasiumEnvAdapter", "make_gym_maze_env"),
    # events and statistics
    "maze_lab.core.events.pubsub": ("Pubsub", "Subscriber"),
    "maze_lab.core.events.event_record": ("EventRecord",),
    "maze_lab.core.log_stats.event_decorators": ("define_step_stats", "define_episode_stats",
                                                 "define_epoch_stats", "define_stats_grouping", "define_plot",
                                                 "histogram"),
    "maze_lab.core.log_stats.base_events": ("BaseEnvEvents", "RewardEvents", "DiscreteActionEvents",
                                            "ContinuousActionEvents", "ObservationEvents"),
    "maze_lab.core.log_stats.writers": ("StatsStore", "ConsoleWriter", "TensorBoardWriter", "LogStatsWriter"),
    # wrappers
    "maze_lab.core.wrappers.wrapper": ("Wrapper", "ObservationWrapper", "ActionWrapper", "RewardWrapper",
                                       "wrap_env"),
    "maze_lab.core.wrappers.builtin": (
        "DictActionWrapper", "DictObservationWrapper", "DiscretizeActionsWrapper", "LogStatsWrapper",
        "MazeEnvMonitoringWrapper", "NoDictActionWrapper", "NoDictObservationWrapper", "NoDictSpacesWrapper",
        "ObservationNormalizationWrapper", "PreProcessingWrapper", "ObservationStackWrapper", "RandomResetWrapper",
        "ReturnNormalizationRewardWrapper", "RewardClippingWrapper", "RewardScalingWrapper", "SortedSpacesWrapper",
        "SplitActionsWrapper", "TimeLimitWrapper"),
    # policies, critics, models
    "maze_lab.agent": ("Policy", "RandomPolicy", "HeuristicPolicy", "DummyCartPolePolicy", "PendulumSwingUpPolicy",
                            "TorchPolicy",
                            "TorchActorCritic", "TorchSharedStateCritic", "TorchStepStateCritic"),
    "maze_lab.agent.composers": ("TemplateModelComposer", "CustomModelComposer", "ProbabilisticPolicyComposer",
                                      "SharedStateCriticComposer", "StepStateCriticComposer"),
    "maze_lab.distributions": ("DistributionMapper",),
    # rollouts and trajectories
    "maze_lab.core.rollout": ("SequentialRolloutRunner", "RolloutResult"),
    "maze_lab.core.trajectory": ("TrajectoryRecordingWrapper", "load_episode", "list_episodes"),
    # training
    "maze_lab.train.trainers.ppo": ("PPO",),
    "maze_lab.train.trainers.a2c": ("A2C",),
    "maze_lab.train.trainers.common.config": ("ActorCriticAlgorithmConfig", "A2CAlgorithmConfig",
                                              "PPOAlgorithmConfig"),
    "maze_lab.train.trainers.common.schedules": ("LinearSchedule", "ConstantSchedule"),
    "maze_lab.train.trainers.common.evaluator": ("RolloutEvaluator",),
    "maze_lab.train.trainers.common.model_selection": ("BestModelSelection",),
    "maze_lab.train.trainers.bc": ("BC", "BCAlgorithmConfig"),
    "maze_lab.train.trainers.sac": ("SAC", "SACAlgorithmConfig"),
    "maze_lab.train.trainers.es": ("ES", "ESAlgorithmConfig"),
    "maze_lab.train.trainers.impala": ("IMPALA", "ImpalaAlgorithmConfig"),
    "maze_lab.train.vector_env": ("SequentialVectorEnv", "SubprocVectorEnv"),
    # runs and configuration
    "maze_lab.run.run_context": ("RunContext", "RunHandle", "RunFailedError"),
    "maze_lab.run.runs": ("list_runs", "load_run", "compare_runs"),
    "maze_lab.run.papermill_run": ("run_notebook",),
    "maze_lab.run.notebook_batch": ("run_notebook_batch", "compare_batch"),
    "maze_lab.run.optimize": ("optimize",),
    "maze_lab.agent.deployment": ("AgentDeployment",),
    "maze_lab.run.config": ("compose_config",),
    "maze_lab.run.run_dir": ("default_outputs_dir",),
    "maze_lab.core.utils.factory": ("ConfigurationError", "Factory"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    """Import an exported name on first use (and keep it, so that later uses are plain attribute lookups)."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'maze_lab' has no attribute '{name}'; the short imports are: "
                             f"{', '.join(__all__)}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """Module attributes plus the lazily imported names."""
    return sorted({*globals(), *__all__})

