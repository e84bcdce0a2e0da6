"""The statistics topic of evolution strategies."""

from __future__ import annotations

from abc import ABC

from maze_lab.train.trainers.common.events import per_epoch_mean, per_epoch_sum


class ESEvents(ABC):
    """Perturbed returns, the size of the step, the workload and timings of each ES iteration; means over the
    iterations of an epoch."""

    @per_epoch_mean
    def time_epoch(self, value: float):
        """Seconds of the epoch."""

    @per_epoch_mean
    def time_rollouts(self, value: float):
        """Seconds the workers took for the episodes of one update."""

    @per_epoch_mean
    def time_update(self, value: float):
        """Seconds of one whole update (episodes, gradient estimate and Adam step)."""

    @per_epoch_mean
    def perturbed_return_mean(self, value: float):
        """Mean return of the perturbed policies' episodes."""

    @per_epoch_mean
    def perturbed_return_max(self, value: float):
        """Best return of a perturbed policy."""

    @per_epoch_mean
    def perturbed_return_min(self, value: float):
        """Worst return of a perturbed policy."""

    @per_epoch_mean
    def perturbed_return_std(self, value: float):
        """Standard deviation of the perturbed policies' returns."""

    @per_epoch_mean
    def tied_pairs(self, value: float):
        """Share of the antithetic pairs whose two episodes got the same return: such a pair adds nothing to the
        gradient (1.0: every pair tied, the update had no direction to follow)."""

    @per_epoch_mean
    def gradient_norm(self, value: float):
        """Norm of the gradient estimate from the ranked returns (before weight decay)."""

    @per_epoch_mean
    def update_norm(self, value: float):
        """Norm of the change of the flat parameters in this update."""

    @per_epoch_mean
    def update_ratio(self, value: float):
        """Update norm divided by the parameter norm before the update: how far one step moves the policy."""

    @per_epoch_mean
    def weight_norm(self, value: float):
        """Norm of the flat policy parameters after the update."""

    @per_epoch_mean
    def n_episodes(self, value: float):
        """Episodes of the perturbed policies in one update."""

    @per_epoch_mean
    def n_env_steps(self, value: float):
        """Agent actions of those episodes."""

    @per_epoch_mean
    def step_size(self, value: float):
        """Adam's step size."""

    @per_epoch_sum
    def worker_restarts(self, value: float):
        """Dead Ray workers replaced by fresh ones during the epoch (``runner.max_worker_restarts``)."""
