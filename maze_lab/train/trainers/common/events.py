"""The statistics topic of the actor-critic trainers."""

from __future__ import annotations

from abc import ABC

from maze_lab.core.log_stats.base_events import mean
from maze_lab.core.log_stats.event_decorators import (
    define_episode_stats,
    define_epoch_stats,
    define_stats_grouping,
    define_step_stats,
)


def per_epoch_mean(method):
    """A trainer statistic: one value per update (an "episode" of the trainer), written as the mean over the
    updates of an epoch. Every trainer's event topic declares its events with it."""
    return define_epoch_stats(mean)(define_episode_stats(mean)(define_step_stats(None)(method)))


def per_epoch_sum(method):
    """A trainer statistic counted per update and written as the sum over the updates of an epoch."""
    return define_epoch_stats(sum)(define_episode_stats(sum)(define_step_stats(None)(method)))


class ActorCriticEvents(ABC):
    """Timings, learning rate, losses, gradient norms, entropy and values; means over the updates of an epoch."""

    @per_epoch_mean
    def time_epoch(self, value: float):
        """Seconds of the epoch."""

    @per_epoch_mean
    def time_rollout(self, value: float):
        """Seconds of collecting one rollout."""

    @per_epoch_mean
    def time_update(self, value: float):
        """Seconds of one update."""

    @per_epoch_mean
    def learning_rate(self, value: float):
        """The learning rate."""

    @per_epoch_mean
    def clip_range(self, value: float):
        """PPO's clip range."""

    @per_epoch_mean
    def approx_kl(self, value: float):
        """Approximate KL divergence between old and new policy (PPO)."""

    @per_epoch_mean
    def clip_fraction(self, value: float):
        """Share of samples whose probability ratio was clipped (PPO)."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def policy_loss(self, step_key: object, value: float):
        """Policy loss of a policy key."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def policy_grad_norm(self, step_key: object, value: float):
        """Gradient norm of a policy network."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def policy_entropy(self, step_key: object, value: float):
        """Mean entropy of a policy key's action distribution."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def critic_value(self, step_key: object, value: float):
        """Mean predicted value."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def critic_value_loss(self, step_key: object, value: float):
        """Value loss."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def critic_grad_norm(self, step_key: object, value: float):
        """Gradient norm of a critic network."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def divergence_warning(self, step_key: object, value: float):
        """1 in an epoch where the policy of a key collapsed while its value loss exploded (see
        :mod:`maze_lab.train.trainers.common.divergence`); absent otherwise."""
