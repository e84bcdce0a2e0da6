"""Behavioural cloning: fit a TorchPolicy to recorded actions by maximum likelihood, with per-epoch statistics,
evaluation rollouts, best-model selection and checkpoints that the actor-critic trainers can fine-tune from."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.events.event_record import EventRecord
from maze_lab.core.log_stats.aggregation import EpochStatsAggregator, LogStats, aggregate_episode
from maze_lab.core.log_stats.writers import LogStatsWriter
from maze_lab.train.trainers.bc.config import BCAlgorithmConfig
from maze_lab.train.trainers.bc.dataset import ImitationBatch, InMemoryImitationDataset
from maze_lab.train.trainers.bc.events import ImitationEvents
from maze_lab.train.trainers.common.base import Trainer, TrainingDivergedError, grad_norm
from maze_lab.train.trainers.common.model_selection import BestModelSelection


def _optimizer_class(path: str) -> type[torch.optim.Optimizer]:
    module, _, name = path.rpartition(".")
    if not module.startswith("torch.optim"):
        raise ValueError(f"BCAlgorithmConfig.optimizer must name a torch.optim optimizer, got '{path}'")
    cls = getattr(importlib.import_module(module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        raise ValueError(f"BCAlgorithmConfig.optimizer '{path}' is not a torch optimizer class")
    return cls


class BC(Trainer):
    """Behavioural cloning trainer: minimises the negative log-likelihood of the recorded actions of every policy
    key under the policy (action masks in the observations apply, as the policy's networks mask the logits).

    :param algorithm_config: the algorithm parameters.
    :param model: a TorchActorCritic (its critic is kept as is, so that checkpoints fine-tune with A2C/PPO) or a
        TorchPolicy.
    :param dataset: an :class:`InMemoryImitationDataset`, or the directory of the recorded episodes (a run
        directory works: its ``trajectories/``); None: ``algorithm_config.dataset``.
    :param evaluator: a RolloutEvaluator run after each epoch (and every ``eval_every_k_iterations`` updates);
        None: no rollouts, the best model is the one with the lowest validation loss.
    :param model_selection: keeps the best weights (default: the evaluator's, else a new one).
    :param writers: writers of the statistics (default: the evaluation env's, else the process-wide defaults).
        Statistics of an epoch: ``train`` (means over its updates), ``validation`` (the held-out episodes), ``eval``
        (the evaluator's rollouts).
    :param checkpoint_dir: where ``state_dict_last.pt`` and ``state_dict_best.pt`` are written; None for no files.
    :param observation_spaces: per policy key the observation Dict space the data must fit (default: the
        evaluation env's).
    :param action_spaces: per policy key the action Dict space (default: the evaluation env's).
    """

    events = ImitationEvents

    learns_from_data = True
    """The run layer builds no training env for this trainer: it reads its dataset (``algorithm.dataset``)."""

    def __init__(self, algorithm_config: BCAlgorithmConfig, model: Any,
                 dataset: InMemoryImitationDataset | str | Path | None = None, evaluator: Any = None,
                 model_selection: BestModelSelection | None = None, writers: list[LogStatsWriter] | None = None,
                 checkpoint_dir: str | Path | None = None, observation_spaces: Mapping[StepKey, Any] | None = None,
                 action_spaces: Mapping[StepKey, Any] | None = None):
        self.policy = getattr(model, "policy", model)
        if not hasattr(self.policy, "compute_substep_policy_output"):
            raise TypeError(f"BC needs a TorchPolicy or TorchActorCritic, got {type(model).__name__}")
        if dataset is None:
            if not algorithm_config.dataset:
                raise ValueError("BC needs recorded episodes: pass dataset=<directory of *.trajectory.zip files or "
                                 "a run directory>, or set BCAlgorithmConfig.dataset")
            dataset = algorithm_config.dataset
        if not isinstance(dataset, InMemoryImitationDataset):
            dataset = InMemoryImitationDataset(dataset)
        self.dataset = dataset
        self.evaluator = evaluator
        eval_env = getattr(evaluator, "eval_env", None)
        if observation_spaces is None and eval_env is not None:
            observation_spaces = eval_env.observation_spaces_dict
        if action_spaces is None and eval_env is not None:
            action_spaces = eval_env.action_spaces_dict
        if observation_spaces is not None and action_spaces is not None:
            dataset.check_spaces(observation_spaces, action_spaces)
        self._check_network_inputs()
        super().__init__(algorithm_config, model, evaluator, model_selection, writers, checkpoint_dir)
        self.optimizer = _optimizer_class(algorithm_config.optimizer)(self.policy.parameters(), lr=algorithm_config.lr)
        self.train_episodes, self.validation_episodes = dataset.split(algorithm_config.validation_percentage,
                                                                      algorithm_config.seed)
        self.train_data = {k: b.to(self.device) for k, b in dataset.batches(self.train_episodes).items()}
        self.validation_data = ({k: b.to(self.device) for k, b in dataset.batches(self.validation_episodes).items()}
                                if self.validation_episodes else {})
        self.last_validation_stats: LogStats = {}
        self._validation_losses: dict[StepKey, float] = {}
        self.validation_aggregator = EpochStatsAggregator()

    def _check_network_inputs(self) -> None:
        """Compare recorded observation shapes with the inputs a network declares (``in_keys``/``in_shapes``)."""
        for key in self.dataset.step_keys:
            try:
                net = self.policy.network_for(key)
            except KeyError as err:
                where = self.dataset.trajectory_dir or "the given episodes"
                raise ValueError(f"the trajectories in {where} hold policy key {key!r}, the policy has networks for "
                                 f"{list(self.policy.networks)}") from err
            in_keys, in_shapes = getattr(net, "in_keys", None), getattr(net, "in_shapes", None)
            if in_keys is None or in_shapes is None:
                continue
            sample = next(b for i, b in self.dataset.batches([self._first_episode_with(key)]).items() if i == key)
            for name, shape in zip(in_keys, in_shapes, strict=False):
                if name not in sample.obs:
                    raise ValueError(f"policy key {key!r}: the policy network reads observation '{name}' which the "
                                     f"trajectories lack (recorded: {sorted(sample.obs)})")
                got = tuple(sample.obs[name].shape[1:])
                if tuple(shape) != got:
                    raise ValueError(f"policy key {key!r}, observation '{name}': the trajectories have shape {got}, "
                                     f"the policy network expects {tuple(shape)}")

    def _first_episode_with(self, key: StepKey) -> int:
        return next(i for i, ep in enumerate(self.dataset._data) if key in ep)

    # ---- losses ------------------------------------------------------------------------------------------------
    def _loss_terms(self, key: StepKey, batch: ImitationBatch) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """Mean negative log-likelihood, mean entropy and per-head accuracy of the most likely action."""
        out = self.policy.compute_substep_policy_output(batch.obs, key)
        dist = out.prob_dist
        nll = -dist.joint_log_prob(batch.actions).mean()
        entropy = dist.joint_entropy().mean()
        accuracy: dict[str, float] = {}
        with torch.no_grad():
            best = dist.deterministic_sample()
            for head, target in batch.actions.items():
                if target.is_floating_point() or head not in best:
                    continue
                hit = best[head].to(target.dtype) == target
                if hit.dim() > 1:
                    hit = hit.reshape(hit.shape[0], -1).all(dim=1)
                accuracy[head] = float(hit.float().mean())
        return nll, entropy, accuracy

    def validate(self) -> dict[StepKey, float]:
        """Validation loss per policy key (statistics go to the writers with the prefix ``validation``)."""
        losses: dict[StepKey, float] = {}
        if not self.validation_data:
            return losses
        events: list[EventRecord] = []
        self.policy.eval()
        with torch.no_grad():
            for key, batch in self.validation_data.items():
                nll, entropy, accuracy = self._loss_terms(key, batch)
                losses[key] = float(nll)
                events.append(EventRecord(ImitationEvents, ImitationEvents.policy_loss,
                                          {"step_key": key, "value": float(nll)}))
                events.append(EventRecord(ImitationEvents, ImitationEvents.policy_entropy,
                                          {"step_key": key, "value": float(entropy)}))
                for head, acc in accuracy.items():
                    events.append(EventRecord(ImitationEvents, ImitationEvents.discrete_accuracy,
                                              {"step_key": key, "action_head": head, "value": acc}))
        self.policy.train()
        self.validation_aggregator.add_episode(aggregate_episode([events]))
        stats = self.validation_aggregator.reduce()
        self.last_validation_stats = stats
        for w in self.writers:
            w.write("validation", self.epoch, stats)
        return losses

    # ---- the epoch: one pass over the training data ----------------------------------------------------------
    def _minibatches(self) -> list[tuple[StepKey, torch.Tensor]]:
        """Minibatch index sets of all policy keys, interleaved in a seeded random order."""
        plan: list[tuple[StepKey, torch.Tensor]] = []
        bs = self.config.batch_size
        for key, batch in self.train_data.items():
            perm = torch.randperm(len(batch), generator=self._generator)
            plan += [(key, perm[i:i + bs]) for i in range(0, len(batch), bs)]
        order = torch.randperm(len(plan), generator=self._generator).tolist()
        return [plan[i] for i in order]

    def _epoch_updates(self) -> Iterator[None]:
        for key, idx in self._minibatches():
            yield
            self._new_update()
            batch = self.train_data[key].select(idx.to(self.device))
            nll, entropy, accuracy = self._loss_terms(key, batch)
            if not torch.isfinite(nll):
                raise TrainingDivergedError(
                    f"BC epoch {self.epoch + 1}, update {self.updates + 1}: the loss of policy key {key!r} is "
                    f"{float(nll.detach())} (a recorded action has zero probability, e.g. it is masked out in its "
                    "observation, or the weights are no longer finite); the last good checkpoint stays on disk")
            self.optimizer.zero_grad(set_to_none=True)
            # an entropy bonus (algorithm.entropy_coef) keeps the cloned policy from collapsing onto one action
            loss = nll - self.config.entropy_coef * entropy if self.config.entropy_coef else nll
            loss.backward()
            self._record(ImitationEvents.policy_grad_norm, grad_norm(self.policy.network_for(key).parameters()), key)
            self.optimizer.step()
            self.updates += 1
            self._record(ImitationEvents.policy_loss, float(nll.detach()), key)
            self._record(ImitationEvents.policy_entropy, float(entropy.detach()), key)
            self._record(ImitationEvents.learning_rate, float(self.optimizer.param_groups[0]["lr"]))
            for head, acc in accuracy.items():
                self._record(ImitationEvents.discrete_accuracy, acc, key, action_head=head)
            k = self.config.eval_every_k_iterations
            if k and self.updates % k == 0 and self.evaluator is not None:
                self._evaluate_epoch()

    def _write_epoch_stats(self) -> LogStats:
        """The training statistics, then the validation loss of the epoch's weights."""
        stats = super()._write_epoch_stats()
        self._validation_losses = self.validate()
        return {**stats, **self.last_validation_stats}

    def _evaluate_epoch(self) -> None:
        """Rollouts with the evaluator (it updates the model selection); without one, the best model is the one
        that predicts held-out actions best (or, without held-out episodes, the training ones)."""
        if self.evaluator is not None:
            saved = self.evaluator.deterministic
            self.evaluator.deterministic = self.config.deterministic_eval
            try:
                super()._evaluate_epoch()
            finally:
                self.evaluator.deterministic = saved
            return
        losses = self._validation_losses or self._train_losses()
        if losses:
            self.model_selection.update(-sum(losses.values()), self.epoch)

    def _train_losses(self) -> dict[StepKey, float]:
        """The epoch's mean training loss per policy key (from the statistics just written)."""
        return {k.group[0]: v for k, v in self.stats_aggregator.last_stats.items()
                if k.event is ImitationEvents.policy_loss and k.group}
