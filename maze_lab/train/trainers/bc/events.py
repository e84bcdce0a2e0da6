"""The statistics topic of the imitation-learning trainers."""

from __future__ import annotations

from abc import ABC

from maze_lab.core.log_stats.event_decorators import define_stats_grouping
from maze_lab.train.trainers.common.events import per_epoch_mean


class ImitationEvents(ABC):
    """Losses, accuracies, entropies and gradient norms of imitation learning; written with the prefix ``train``
    (means over the updates of an epoch) and ``validation`` (over the held-out episodes)."""

    @per_epoch_mean
    def time_epoch(self, value: float):
        """Seconds of the epoch."""

    @per_epoch_mean
    def learning_rate(self, value: float):
        """The learning rate."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def policy_loss(self, step_key: object, value: float):
        """Negative log-likelihood of the recorded actions of a policy key."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def policy_entropy(self, step_key: object, value: float):
        """Mean entropy of a policy key's action distribution."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def policy_grad_norm(self, step_key: object, value: float):
        """Gradient norm of a policy network (training only)."""

    @per_epoch_mean
    @define_stats_grouping("step_key", "action_head")
    def discrete_accuracy(self, step_key: object, action_head: str, value: float):
        """Share of samples whose most likely action equals the recorded one (discrete heads)."""
