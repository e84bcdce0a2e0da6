"""Behavioural cloning: fit a TorchPolicy to recorded actions by maximum likelihood, with per-epoch statistics,
evaluation rollouts, best-model selection and checkpoints that the actor-critic trainers can fine-tune from."""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.events.event_record import EventRecord
from maze_lab.core.log_stats.aggregation import EpochStatsAggregator, LogStats, aggregate_episode
from maze_lab.core.log_stats.log_setup import default_writers
from maze_lab.core.log_stats.writers import LogStatsWriter, epoch_commit
from maze_lab.train.trainers.bc.config import BCAlgorithmConfig
from maze_lab.train.trainers.bc.dataset import ImitationBatch, InMemoryImitationDataset
from maze_lab.train.trainers.bc.events import ImitationEvents
from maze_lab.train.trainers.common.checkpoints import read_checkpoint, write_checkpoints
from maze_lab.train.trainers.common.control import TrainingControl
from maze_lab.train.trainers.common.model_selection import BestModelSelection


def _optimizer_class(path: str) -> type[torch.optim.Optimizer]:
    module, _, name = path.rpartition(".")
    if not module.startswith("torch.optim"):
        raise ValueError(f"BCAlgorithmConfig.optimizer must name a torch.optim optimizer, got '{path}'")
    cls = getattr(importlib.import_module(module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        raise ValueError(f"BCAlgorithmConfig.optimizer '{path}' is not a torch optimizer class")
    return cls


def _grad_norm(params: Any) -> float:
    grads = [p.grad.detach().norm() for p in params if p.grad is not None]
    return float(torch.norm(torch.stack(grads))) if grads else 0.0


class BC(TrainingControl):
    """Behavioural cloning trainer: minimises the negative log-likelihood of the recorded actions of every policy
    key under the policy (action masks in the observations apply, as the policy's networks mask the logits).

    :param algorithm_config: the algorithm parameters.
    :param model: a TorchActorCritic (its critic is kept as is, so that checkpoints fine-tune with A2C/PPO) or a
        TorchPolicy.
    :param dataset: an :class:`InMemoryImitationDataset`, or the directory of the recorded episodes.
    :param evaluator: a RolloutEvaluator run after each epoch (and every ``eval_every_k_iterations`` updates);
        None: no rollouts, the best model is the one with the lowest validation loss.
    :param model_selection: keeps the best weights (default: the evaluator's, else a new one).
    :param writers: writers of the statistics (default: the evaluation env's, else the process-wide defaults).
    :param checkpoint_dir: where ``state_dict_last.pt`` and ``state_dict_best.pt`` are written; None for no files.
    :param observation_spaces: per policy key the observation Dict space the data must fit (default: the
        evaluation env's).
    :param action_spaces: per policy key the action Dict space (default: the evaluation env's).
    """

    def __init__(self, algorithm_config: BCAlgorithmConfig, model: Any,
                 dataset: InMemoryImitationDataset | str | Path, evaluator: Any = None,
                 model_selection: BestModelSelection | None = None, writers: list[LogStatsWriter] | None = None,
                 checkpoint_dir: str | Path | None = None, observation_spaces: Mapping[StepKey, Any] | None = None,
                 action_spaces: Mapping[StepKey, Any] | None = None):
        self.config = algorithm_config
        self.model = model
        self.policy = getattr(model, "policy", model)
        if not hasattr(self.policy, "compute_substep_policy_output"):
            raise TypeError(f"BC needs a TorchPolicy or TorchActorCritic, got {type(model).__name__}")
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
        if model_selection is None:
            model_selection = getattr(evaluator, "model_selection", None) or BestModelSelection(model=model)
        if model_selection.model is None:
            model_selection.model = model
        if evaluator is not None and getattr(evaluator, "model_selection", None) is None:
            evaluator.model_selection = model_selection
        self.model_selection = model_selection
        self._writers = writers
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.device = torch.device(algorithm_config.device)
        self.model.to(self.device)
        self.optimizer = _optimizer_class(algorithm_config.optimizer)(self.policy.parameters(), lr=algorithm_config.lr)
        self.train_episodes, self.validation_episodes = dataset.split(algorithm_config.validation_percentage,
                                                                      algorithm_config.seed)
        self.train_data = {k: b.to(self.device) for k, b in dataset.batches(self.train_episodes).items()}
        self.validation_data = ({k: b.to(self.device) for k, b in dataset.batches(self.validation_episodes).items()}
                                if self.validation_episodes else {})
        self.epoch = 0
        self.updates = 0
        self.last_eval_reward: float | None = None
        self.last_validation_stats: LogStats = {}
        self.stop_reason: str | None = None
        self.callbacks: list[Callable[[BC, LogStats], None]] = []
        self._init_control()
        self._events: list[EventRecord] = []
        self._generator = torch.Generator().manual_seed(algorithm_config.seed or 0)
        self.stats_aggregator = EpochStatsAggregator()
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

    @property
    def writers(self) -> list[LogStatsWriter]:
        """Writers of the statistics: the given ones, else the evaluation env's, else the process-wide defaults."""
        if self._writers is not None:
            return self._writers
        env = getattr(self.evaluator, "eval_env", None)
        return env.writers if env is not None else default_writers()

    def _epoch_writers(self) -> list[LogStatsWriter]:
        """Every writer an epoch's statistics go to: the trainer's and the evaluation env's."""
        eval_env = getattr(self.evaluator, "eval_env", None)
        return [*self.writers, *getattr(eval_env, "writers", [])]

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

    def evaluate(self) -> float | None:
        """Roll out the current policy with the evaluator; returns the mean episode reward (None: no evaluator)."""
        if self.evaluator is None:
            return None
        saved = self.evaluator.deterministic
        self.evaluator.deterministic = self.config.deterministic_eval
        try:
            # the same eval seed every time: evaluations compare policies on the same start states
            seed = None if self.config.seed is None else self.config.seed + 1_000_000
            self.last_eval_reward = self.evaluator.evaluate(self.policy, epoch=self.epoch, seed=seed)
        finally:
            self.evaluator.deterministic = saved
        return self.last_eval_reward

    # ---- training loop ---------------------------------------------------------------------------------------
    def train(self, n_epochs: int | None = None) -> None:
        """Train for ``n_epochs`` more epochs (default: the config's; 0 = until stopped)."""
        n_epochs = self.config.n_epochs if n_epochs is None else n_epochs
        target = self.epoch + n_epochs if n_epochs else math.inf
        if self.config.seed is not None:
            torch.manual_seed(self.config.seed)
        self.stop_reason = None
        self.policy.train()
        try:
            while self.epoch < target:
                if not self._one_epoch():
                    self.stop_reason = "stopped"
                    self.save_checkpoint()
                    return
                if self._stop.is_set():
                    self.stop_reason = "stopped"
                    return
            self.stop_reason = "done"
        finally:
            self._stop.clear()  # a stop ends this call only

    def _minibatches(self) -> list[tuple[StepKey, torch.Tensor]]:
        """Minibatch index sets of all policy keys, interleaved in a seeded random order."""
        plan: list[tuple[StepKey, torch.Tensor]] = []
        bs = self.config.batch_size
        for key, batch in self.train_data.items():
            perm = torch.randperm(len(batch), generator=self._generator)
            plan += [(key, perm[i:i + bs]) for i in range(0, len(batch), bs)]
        order = torch.randperm(len(plan), generator=self._generator).tolist()
        return [plan[i] for i in order]

    def _one_epoch(self) -> bool:
        """One pass over the training data; False where a stop was requested before it finished."""
        start = time.perf_counter()
        events: list[list[EventRecord]] = []
        for key, idx in self._minibatches():
            self._running.wait()
            if self._stop.is_set():
                return False
            batch = self.train_data[key].select(idx.to(self.device))
            nll, entropy, accuracy = self._loss_terms(key, batch)
            if not torch.isfinite(nll):
                raise FloatingPointError(f"BC epoch {self.epoch + 1}, update {self.updates + 1}: the loss of policy "
                                         f"key {key!r} is {float(nll)} (a recorded action has zero probability, "
                                         "e.g. it is masked out in its observation)")
            self.optimizer.zero_grad(set_to_none=True)
            nll.backward()
            params = list(self.policy.network_for(key).parameters())
            grad_norm = _grad_norm(params)
            self.optimizer.step()
            self.updates += 1
            nll, entropy = nll.detach(), entropy.detach()
            step = [EventRecord(ImitationEvents, ImitationEvents.policy_loss, {"step_key": key, "value": float(nll)}),
                    EventRecord(ImitationEvents, ImitationEvents.policy_entropy,
                                {"step_key": key, "value": float(entropy)}),
                    EventRecord(ImitationEvents, ImitationEvents.policy_grad_norm,
                                {"step_key": key, "value": grad_norm}),
                    EventRecord(ImitationEvents, ImitationEvents.learning_rate,
                                {"value": float(self.optimizer.param_groups[0]["lr"])})]
            step += [EventRecord(ImitationEvents, ImitationEvents.discrete_accuracy,
                                 {"step_key": key, "action_head": h, "value": a}) for h, a in accuracy.items()]
            events.append(step)
            k = self.config.eval_every_k_iterations
            if k and self.updates % k == 0 and self.evaluator is not None:
                self._select(self.evaluate())
        self.epoch += 1
        events.append([EventRecord(ImitationEvents, ImitationEvents.time_epoch,
                                   {"value": time.perf_counter() - start})])
        self.stats_aggregator.add_episode(aggregate_episode(events))
        stats = self.stats_aggregator.reduce()
        # train, validation and eval statistics of the epoch reach readers together (the StatsStore)
        with epoch_commit(self._epoch_writers(), self.epoch):
            for w in self.writers:
                w.write("train", self.epoch, stats)
            val_losses = self.validate()
            if self.evaluator is not None:
                self._select(self.evaluate())
            else:
                # without rollouts the best model is the one that predicts held-out actions best
                losses = val_losses or {k: float(v) for k, v in self._train_losses(stats).items()}
                self._select(-sum(losses.values()))
        self.save_checkpoint()
        for cb in self.callbacks:
            cb(self, {**stats, **self.last_validation_stats})
        return True

    @staticmethod
    def _train_losses(stats: LogStats) -> dict[StepKey, float]:
        return {k.group[0]: v for k, v in stats.items() if k.event is ImitationEvents.policy_loss and k.group}

    def _select(self, score: float | None) -> None:
        # the evaluator updates the model selection itself; without one the score is handed over here
        if self.evaluator is None and score is not None:
            self.model_selection.update(score, self.epoch)

    # ---- checkpoints -----------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Weights (in the actor-critic trainers' format), optimizer, counters and best score."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "epoch": self.epoch,
                "updates": self.updates, "best_reward": self.model_selection.best_reward,
                "best_epoch": self.model_selection.best_epoch, "trainer": type(self).__name__}

    def save_checkpoint(self, path: str | Path | None = None) -> Path | None:
        """Write ``state_dict_last.pt`` and the best weights ``state_dict_best.pt`` (atomically)."""
        return write_checkpoints(self.state(), self.checkpoint_dir, self.model_selection, path)

    def load_checkpoint(self, path: str | Path, weights_only: bool = False) -> None:
        """Load weights (and, unless ``weights_only``, the optimizer and counters of a BC checkpoint).

        The file is read with ``torch.load(weights_only=True)``: no code from the file is executed.
        """
        state = read_checkpoint(path, self.device)
        self.model.load_state_dict(state["model"])
        if weights_only:
            return
        if state.get("trainer") == type(self).__name__ and "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        self.epoch = int(state.get("epoch", 0))
        self.updates = int(state.get("updates", 0))
