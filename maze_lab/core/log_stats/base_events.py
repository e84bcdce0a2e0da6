"""Built-in event topics every env has: rewards and KPIs, actions, observations."""

from __future__ import annotations

from abc import ABC

import numpy as np

from maze_lab.core.log_stats.event_decorators import (
    define_episode_stats,
    define_epoch_stats,
    define_stats_grouping,
    define_step_stats,
    histogram,
)


def _nan_safe(fn):
    def reduce(values):
        arr = np.asarray(values, dtype=np.float64)
        return float(fn(arr)) if arr.size else float("nan")

    reduce.__name__ = fn.__name__
    return reduce


mean, std, vmin, vmax, median = (_nan_safe(f) for f in (np.mean, np.std, np.min, np.max, np.median))


class BaseEnvEvents(ABC):
    """Rewards, step and episode counts and KPIs; logged for every env.

    Two rewards are logged: ``reward`` is the reward the agent is trained on (after reward wrappers such as
    scaling, clipping or return normalization), ``reward_original`` the reward the env produced (what the
    innermost reward wrapper received); they are equal where no wrapper changes rewards.
    """

    @define_epoch_stats(mean, output_name="mean")
    @define_epoch_stats(std, output_name="std")
    @define_epoch_stats(vmin, output_name="min")
    @define_epoch_stats(vmax, output_name="max")
    @define_epoch_stats(median, input_name="step_count", output_name="median_step_count")
    @define_epoch_stats(mean, input_name="step_count", output_name="mean_step_count")
    @define_epoch_stats(sum, input_name="step_count", output_name="total_step_count", cumulative=True)
    @define_epoch_stats(len, input_name="step_count", output_name="total_episode_count", cumulative=True)
    @define_epoch_stats(len, input_name="step_count", output_name="episode_count")
    @define_episode_stats(sum)
    @define_episode_stats(len, output_name="step_count")
    @define_step_stats(sum)
    def reward(self, value: float):
        """The reward the agent is trained on (after reward wrappers) of one full env step; sub-steps are summed."""

    @define_epoch_stats(mean, output_name="mean")
    @define_epoch_stats(std, output_name="std")
    @define_epoch_stats(vmin, output_name="min")
    @define_epoch_stats(vmax, output_name="max")
    @define_episode_stats(sum)
    @define_step_stats(sum)
    def reward_original(self, value: float):
        """The reward the env produced (before reward wrappers) in one full env step; sub-steps are summed."""

    @define_epoch_stats(mean, output_name="mean")
    @define_epoch_stats(std, output_name="std")
    @define_epoch_stats(vmin, output_name="min")
    @define_epoch_stats(vmax, output_name="max")
    @define_episode_stats(None)
    @define_step_stats(None)
    @define_stats_grouping("name")
    def kpi(self, name: str, value: float):
        """A key performance indicator computed at the end of an episode."""


class DiscreteActionEvents(ABC):
    """Actions of discrete and multi-binary action heads; epoch value is every sampled action."""

    @define_epoch_stats(histogram)
    @define_episode_stats(histogram)
    @define_step_stats(None)
    @define_stats_grouping("step_key", "name")
    def action(self, step_key: str, name: str, value: int):
        """An action taken by the policy of ``step_key`` for head ``name``."""


class ContinuousActionEvents(ABC):
    """Actions of continuous (Box) action heads."""

    @define_epoch_stats(histogram)
    @define_episode_stats(histogram)
    @define_step_stats(None)
    @define_stats_grouping("step_key", "name")
    def action(self, step_key: str, name: str, value: np.ndarray):
        """A continuous action taken by the policy of ``step_key`` for head ``name``."""


class ObservationEvents(ABC):
    """Observations as produced by the env (original) and as seen by the policy (processed)."""

    @define_epoch_stats(histogram)
    @define_episode_stats(histogram)
    @define_step_stats(None)
    @define_stats_grouping("step_key", "name")
    def observation_original(self, step_key: str, name: str, value: np.ndarray):
        """An observation before processing wrappers."""

    @define_epoch_stats(histogram)
    @define_episode_stats(histogram)
    @define_step_stats(None)
    @define_stats_grouping("step_key", "name")
    def observation_processed(self, step_key: str, name: str, value: np.ndarray):
        """An observation after processing wrappers (what the policy sees)."""


class RewardEvents(ABC):
    """Per-sub-step rewards as the agent receives them (after reward wrappers), for reward distributions."""

    @define_epoch_stats(histogram)
    @define_episode_stats(histogram)
    @define_step_stats(None)
    def step_reward(self, value: float):
        """The reward of one sub-step, as the agent receives it."""


class TrainingProgressEvents(ABC):
    """Where a training run stands when an epoch ends: the x-axes of its curves (env steps, wall-clock time).

    Trainers write these values directly with their epoch statistics (they are counters, not aggregated events).
    """

    def env_steps(self, value: int):
        """Env steps taken since the run began (a resumed run continues its count)."""

    def time_training(self, seconds: float):
        """Seconds spent training since the run began (a resumed run continues its count; pauses not counted); named
        like the trainers' other timings (``time_epoch``, ``time_update``)."""
