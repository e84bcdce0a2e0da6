"""The statistics topic of IMPALA."""

from __future__ import annotations

from abc import ABC

from maze_lab.core.log_stats.event_decorators import define_stats_grouping
from maze_lab.train.trainers.common.events import per_epoch_mean, per_epoch_sum


class ImpalaEvents(ABC):
    """Timings, the actors' lag behind the learner, importance weights, losses and gradient norms; means over the
    updates of an epoch."""

    @per_epoch_mean
    def time_epoch(self, value: float):
        """Seconds of the epoch."""

    @per_epoch_mean
    def time_wait(self, value: float):
        """Seconds the learner waited for the trajectories of one update (0 while the actors keep up)."""

    @per_epoch_mean
    def time_update(self, value: float):
        """Seconds of the V-trace targets and the gradient step of one update."""

    @per_epoch_mean
    def learning_rate(self, value: float):
        """The learning rate."""

    @per_epoch_mean
    def policy_lag(self, value: float):
        """Learner updates between the weights that acted and the weights that learn from it (mean of the batch)."""

    @per_epoch_mean
    def policy_lag_max(self, value: float):
        """The largest policy lag of the batch's trajectories."""

    @per_epoch_mean
    def queue_size(self, value: float):
        """Trajectories waiting in the queue after the batch was taken."""

    @per_epoch_mean
    def importance_weight(self, value: float):
        """Mean of pi / mu, the learner's over the actors' probability of the taken actions (before clipping)."""

    @per_epoch_mean
    def clipped_rho_fraction(self, value: float):
        """Share of the sub-steps whose importance weight was clipped for the value targets."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def policy_loss(self, step_key: object, value: float):
        """Policy-gradient loss of a policy key: -(V-trace advantage * log pi) averaged over its sub-steps."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def policy_entropy(self, step_key: object, value: float):
        """Mean entropy of a policy key's action distribution."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def policy_grad_norm(self, step_key: object, value: float):
        """Gradient norm of a policy network."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def critic_value(self, step_key: object, value: float):
        """Mean predicted value."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def critic_value_loss(self, step_key: object, value: float):
        """Mean squared difference of the predicted values and their V-trace targets."""

    @per_epoch_mean
    @define_stats_grouping("step_key")
    def critic_grad_norm(self, step_key: object, value: float):
        """Gradient norm of a critic network."""

    @per_epoch_sum
    def worker_restarts(self, value: float):
        """Dead Ray workers replaced by fresh ones during the epoch (``runner.max_worker_restarts``)."""
