"""The statistics topic of SAC."""

from __future__ import annotations

from abc import ABC

from maze_lab.core.log_stats.event_decorators import define_stats_grouping
from maze_lab.train.trainers.common.events import per_epoch_mean


class SACEvents(ABC):
    """Timings, losses, Q values, alpha and the replay buffer of SAC; means over the updates of an epoch."""

    @per_epoch_mean
    def time_epoch(self, value: float):
        """Seconds of the epoch."""

    @per_epoch_mean
    def time_rollout(self, value: float):
        """Seconds of collecting the env steps of one update."""

    @per_epoch_mean
    def time_update(self, value: float):
        """Seconds of the gradient steps of one update."""

    @per_epoch_mean
    def learning_rate(self, value: float):
        """The learning rate of policy and Q networks."""

    @per_epoch_mean
    def entropy_coef(self, value: float):
        """alpha, the weight of the entropy term."""

    @per_epoch_mean
    def entropy_coef_loss(self, value: float):
        """The loss alpha is tuned on (entropy tuning only)."""

    @per_epoch_mean
    def buffer_size(self, value: float):
        """Transitions in the replay buffer."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def policy_loss(self, step_key: object, value: float):
        """alpha * log pi(a|s) - min Q(s, a) for actions a drawn from the policy."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def policy_entropy(self, step_key: object, value: float):
        """Entropy estimate of the policy (-log pi of its own samples; exact for Discrete heads)."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def policy_grad_norm(self, step_key: object, value: float):
        """Gradient norm of the policy network."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def critic_value(self, step_key: object, value: float):
        """Mean Q value of the sampled transitions (first Q network)."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def critic_value_loss(self, step_key: object, value: float):
        """Mean squared TD error, summed over the Q networks."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def critic_grad_norm(self, step_key: object, value: float):
        """Gradient norm of the Q networks."""
