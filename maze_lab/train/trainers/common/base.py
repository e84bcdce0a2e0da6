"""The home every maze-lab trainer shares: the epoch loop with stop / pause / resume from other threads, the
per-update statistics of the trainer's event topic, evaluation and best-model selection, the writers an epoch's
statistics go to, and the checkpoint files.

An algorithm subclasses :class:`Trainer` and writes what is its own: ``_epoch_updates`` (what one epoch does, one
update at a time) and the update itself, readable top to bottom in the algorithm's file. Everything the run layer
relies on (``train``, ``request_stop``, ``pause``, ``resume``, ``evaluate``, ``save_checkpoint``,
``load_checkpoint``, ``callbacks``, ``epoch``, ``env_steps``, ``stop_reason``, ``last_eval_reward``,
``model_selection``) is defined once, here.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from maze_lab.core.events.event_record import EventRecord
from maze_lab.core.log_stats.aggregation import EpochStatsAggregator, LogStats, StatKey, aggregate_episode
from maze_lab.core.log_stats.base_events import TrainingProgressEvents
from maze_lab.core.log_stats.log_setup import default_writers
from maze_lab.core.log_stats.writers import LogStatsWriter, epoch_commit
from maze_lab.core.utils.yielding import give_way
from maze_lab.train.trainers.common.checkpoints import read_checkpoint, write_checkpoints
from maze_lab.train.trainers.common.control import TrainingControl
from maze_lab.train.trainers.common.model_selection import BestModelSelection


class TrainingDivergedError(RuntimeError, FloatingPointError):
    """A loss became NaN or infinite; the message names the epoch, the update and the loss term. The checkpoint of
    the last finished epoch stays on disk."""


EVAL_SEED_OFFSET = 1_000_000
"""Evaluations use ``seed + EVAL_SEED_OFFSET`` every epoch: they compare policies on the same start states, which
the training envs (seeded with ``seed``) never see in the same order."""


class Trainer(TrainingControl, ABC):
    """Base of every trainer.

    :param config: the algorithm config (a dataclass with at least ``n_epochs``, ``seed``, ``device``; ``patience``
        where the algorithm stops early).
    :param model: the torch module that is trained and checkpointed (a TorchActorCritic, or a TorchPolicy).
    :param evaluator: a RolloutEvaluator run after each epoch; None: no rollouts.
    :param model_selection: keeps the best weights (default: the evaluator's, else a new one).
    :param writers: writers of the trainer statistics (default: see :attr:`writers`).
    :param checkpoint_dir: where ``state_dict_last.pt`` (each epoch and on stop) and ``state_dict_best.pt`` are
        written; None for no files.
    """

    events: type
    """The trainer's statistics topic (an event interface class); :meth:`_record` writes events of it."""

    train_prefix = "train"
    """The prefix of the trainer statistics (the training env's statistics share it)."""

    def __init__(self, config: Any, model: torch.nn.Module, evaluator: Any = None,
                 model_selection: BestModelSelection | None = None, writers: list[LogStatsWriter] | None = None,
                 checkpoint_dir: str | Path | None = None):
        self.config = config
        self.model = model
        self.evaluator = evaluator
        if model_selection is None:
            model_selection = getattr(evaluator, "model_selection", None) or BestModelSelection(model=model)
        if model_selection.model is None:
            model_selection.model = model
        if evaluator is not None and getattr(evaluator, "model_selection", None) is None:
            evaluator.model_selection = model_selection
        self.model_selection = model_selection
        self._writers = writers
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.device = torch.device(config.device)
        self.model.to(self.device)
        self.epoch = 0
        self.updates = 0
        self.wall_time = 0.0
        """Seconds spent training since the run began (restored on resume; pauses not counted)."""
        self._wall_mark: float | None = None
        self.env_steps = 0
        self.last_eval_reward: float | None = None
        self.stop_reason: str | None = None
        self.callbacks: list[Callable[[Any, LogStats], None]] = []
        self.warnings: list[str] = []
        """Warnings of this trainer's epochs (e.g. a diverged policy), newest last."""
        self.stats_aggregator = EpochStatsAggregator()
        self._update_events: list[list[EventRecord]] = []
        self._generator = torch.Generator().manual_seed(config.seed or 0)
        self._schedule_target: float | None = None
        self._init_control()

    env: Any = None
    """The training env (None for trainers that learn from data)."""

    # ---- where statistics go -----------------------------------------------------------------------------------
    @property
    def writers(self) -> list[LogStatsWriter]:
        """Writers of the trainer statistics: the given ones, else the training env's, else the evaluation env's,
        else the process-wide defaults."""
        if self._writers is not None:
            return self._writers
        for env in (self.env, getattr(self.evaluator, "eval_env", None)):
            if env is not None and hasattr(env, "writers"):
                return env.writers
        return default_writers()

    def _epoch_writers(self) -> list[LogStatsWriter]:
        """Every writer an epoch's statistics go to: the trainer's, the training env's and the evaluation env's
        (each once)."""
        eval_env = getattr(self.evaluator, "eval_env", None)
        found: list[LogStatsWriter] = []
        for w in [*self.writers, *getattr(self.env, "writers", []), *getattr(eval_env, "writers", [])]:
            if all(w is not seen for seen in found):
                found.append(w)
        return found

    def _record(self, event: Callable, value: float, step_key: Any = None, **group: Any) -> None:
        """One statistic of the current update (an event of :attr:`events`); grouped by ``step_key`` and ``group``."""
        attrs: dict[str, Any] = {} if step_key is None else {"step_key": step_key}
        attrs.update(group)
        attrs["value"] = float(value)
        if not self._update_events:
            self._update_events.append([])
        self._update_events[-1].append(EventRecord(self.events, event, attrs))

    def _new_update(self) -> None:
        """Start the statistics of a new update (their means over the epoch's updates are written)."""
        self._update_events.append([])

    def _write_epoch_stats(self) -> LogStats:
        """Write the epoch's trainer statistics (and the training env's); returns them all."""
        env_stats = self.env.write_epoch_stats(self.epoch) if self.env is not None else {}
        self.stats_aggregator.add_episode(aggregate_episode(self._update_events))
        self._update_events = []
        trainer_stats = self.stats_aggregator.reduce()
        trainer_stats[StatKey(TrainingProgressEvents.env_steps, None, None)] = int(self.env_steps)
        trainer_stats[StatKey(TrainingProgressEvents.time_training, None, None)] = round(self._advance_wall_time(), 3)
        prefix = getattr(self.env, "logging_prefix", None) or self.train_prefix
        for w in self.writers:
            give_way()  # a background run in a kernel makes room for a running cell
            w.write(prefix, self.epoch, trainer_stats)
        return {**env_stats, **trainer_stats}

    def _advance_wall_time(self) -> float:
        """Add the time since the last mark to :attr:`wall_time` and set a new mark; returns the total."""
        now = time.perf_counter()
        if self._wall_mark is not None:
            self.wall_time += now - self._wall_mark
        self._wall_mark = now
        return self.wall_time

    def _exclude_from_wall_time(self, seconds: float) -> None:
        if self._wall_mark is not None:
            self._wall_mark += seconds

    def _flush_epoch_stats(self) -> None:
        """Wait until every writer that writes in the background (the StatsStore of a run directory) has the epoch's
        statistics on disk; raises where one could not write them."""
        for w in self._epoch_writers():
            flush = getattr(w, "flush", None)
            if callable(flush):
                flush()

    # ---- evaluation ----------------------------------------------------------------------------------------------
    @property
    def eval_seed(self) -> int | None:
        """The seed of every evaluation (None for an unseeded run)."""
        return None if self.config.seed is None else self.config.seed + EVAL_SEED_OFFSET

    @property
    def eval_policy(self) -> Any:
        """What the evaluator rolls out (the policy part of the model)."""
        return getattr(self.model, "policy", self.model)

    def evaluate(self, deterministic: bool | None = None, repeats: int | None = None,
                 seed: int | None = None) -> float:
        """Evaluate the current policy now; returns the mean episode reward.

        :param deterministic: override the evaluator's setting.
        :param repeats: number of episodes (default: the evaluator's).
        :param seed: seed of the evaluation episodes (default: the evaluation envs go on with their own random
            stream; :attr:`eval_seed` gives the start states of the per-epoch evaluations).
        """
        if self.evaluator is None:
            raise ValueError(f"this {type(self).__name__} trainer has no evaluator; pass "
                             "evaluator=RolloutEvaluator(...)")
        saved = (self.evaluator.deterministic, self.evaluator.n_episodes)
        if deterministic is not None:
            self.evaluator.deterministic = deterministic
        if repeats is not None:
            self.evaluator.n_episodes = repeats
        try:
            self.last_eval_reward = self.evaluator.evaluate(self.eval_policy, epoch=self.epoch, seed=seed)
        finally:
            self.evaluator.deterministic, self.evaluator.n_episodes = saved
        return self.last_eval_reward

    def _evaluate_epoch(self) -> None:
        """After each epoch: evaluate (the evaluator updates the model selection)."""
        if self.evaluator is not None:
            self.last_eval_reward = self.evaluator.evaluate(self.eval_policy, epoch=self.epoch, seed=self.eval_seed)

    # ---- the epoch loop ------------------------------------------------------------------------------------------
    def train(self, n_epochs: int | None = None) -> None:
        """Train for ``n_epochs`` more epochs (default: the config's; 0 = until early stopping or stop)."""
        n_epochs = self.config.n_epochs if n_epochs is None else n_epochs
        target = self.epoch + n_epochs if n_epochs else math.inf
        self._schedule_target = target if n_epochs else None
        if self.config.seed is not None:
            torch.manual_seed(self.config.seed)
        self.stop_reason = None
        self._before_training(bool(n_epochs))
        self.model.train()
        self._wall_mark = time.perf_counter()  # the time between two train calls is not training time
        try:
            self.stop_reason = self._train_epochs(target)
        finally:
            self._wall_mark = None
            self._stop.clear()  # a stop ends this call only; a stop requested before it started is honoured

    def _before_training(self, has_target: bool) -> None:
        """Hook: runs at the start of every ``train`` call (reset envs, warn about schedules)."""

    def _train_epochs(self, target: float) -> str:
        while self.epoch < target:
            epoch_start = time.perf_counter()
            for _ in self._epoch_updates():
                # between two updates: the only place a pause holds and a stop ends the run
                give_way()  # a background run in a kernel makes room for a running cell
                self._between_updates()  # a requested checkpoint is written here; a pause holds here
                if self._stop.is_set():
                    self.save_checkpoint()
                    return "stopped"
            self.epoch += 1
            self._record(self.events.time_epoch, time.perf_counter() - epoch_start)
            # train, trainer and eval statistics of the epoch reach readers together (the StatsStore)
            # the epoch's end (statistics, evaluation, checkpoint) gives way between its parts, as updates do
            give_way()
            with epoch_commit(self._epoch_writers(), self.epoch):
                stats = self._write_epoch_stats()
                give_way()
                self._evaluate_epoch()
            give_way()
            # a checkpoint never claims an epoch whose statistics are not on disk: a failed statistics write (a full
            # disk) raises here, before the checkpoint of this epoch is written
            self._flush_epoch_stats()
            self.save_checkpoint()
            for cb in self.callbacks:
                cb(self, stats)
            patience = getattr(self.config, "patience", 0)
            if (self.evaluator is not None and patience
                    and self.model_selection.epochs_without_improvement(self.epoch) >= patience):
                return f"early stopping: no improvement for {patience} epochs"
            if self._stop.is_set():
                return "stopped"
        return "done"

    @abstractmethod
    def _epoch_updates(self) -> Iterator[None]:
        """One epoch, as a generator: it yields before each update and performs the update when resumed, so that
        the loop can pause or stop between two updates::

            for _ in range(self.config.epoch_length):
                yield
                self._one_update()
        """

    def _progress(self, within_epoch: float = 0.0) -> float:
        """Where the schedules stand: 0 at epoch 0, 1 at the epoch the current ``train`` call ends at.

        The horizon is the run's own target (epochs done + the epochs of this call): a resumed run continues its
        schedules from its epoch, and ``train(n)`` decays them to their end over its n epochs. Without a target
        (``n_epochs=0``) the schedules hold their start value.

        :param within_epoch: the share of the current epoch already done (0 to 1).
        """
        if not self._schedule_target:
            return 0.0
        return (self.epoch + within_epoch) / self._schedule_target

    # ---- updates -------------------------------------------------------------------------------------------------
    def _check_finite(self, terms: dict[str, torch.Tensor]) -> None:
        """Raise :class:`TrainingDivergedError` naming the loss terms that are NaN or infinite."""
        bad = {name: t.item() for name, t in terms.items() if not torch.isfinite(t).all()}
        if bad:
            listed = ", ".join(f"'{name}' is {value}" for name, value in bad.items())
            raise TrainingDivergedError(
                f"epoch {self.epoch + 1}, update {self.updates + 1}: loss term {listed}; the last good checkpoint "
                f"stays on disk. Lower the learning rate or check rewards and observations for NaN/inf."
            )

    def _rollout(self, n_steps: int, sampler: Any = None) -> Any:
        """``n_steps`` agent actions of every training env with the policy (or ``sampler``), from
        ``self.rollout_generator``. A failure while the weights are NaN or inf (torch refusing to sample, or an env
        refusing the NaN action it was given) is reported as the divergence it is."""
        try:
            return self.rollout_generator.rollout(self.eval_policy, n_steps, epoch=self.epoch + 1, sampler=sampler)
        except (RuntimeError, ValueError) as err:
            diverged = self._diverged_weights_error("the rollout")
            if diverged is not None:
                raise diverged from err
            raise

    def _diverged_weights_error(self, during: str) -> TrainingDivergedError | None:
        """A TrainingDivergedError naming the parameters that are NaN or infinite (None where all are finite): what a
        torch error deep in sampling or a loss really means when the weights diverged."""
        bad = [name for name, t in _flat_tensors(self.model.state_dict())
               if t.is_floating_point() and not torch.isfinite(t).all()]
        if not bad:
            return None
        listed = ", ".join(bad[:4]) + (f" and {len(bad) - 4} more" if len(bad) > 4 else "")
        return TrainingDivergedError(
            f"epoch {self.epoch + 1}, update {self.updates + 1}: {during} failed because weights are NaN or inf "
            f"({listed}); the last good checkpoint stays on disk. Lower the learning rate or check rewards and "
            "observations for NaN/inf.")

    # ---- checkpoints ---------------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Everything needed to resume: weights, optimizer(s), counters and best score, plus
        :meth:`_extra_state`."""
        state = {"model": self.model.state_dict(), "epoch": self.epoch, "updates": self.updates,
                 "env_steps": self.env_steps, "wall_time": float(self.wall_time),
                 "best_reward": self.model_selection.best_reward, "best_epoch": self.model_selection.best_epoch,
                 "trainer": type(self).__name__}
        state.update({name: opt.state_dict() for name, opt in self._optimizers().items()})
        state.update(self._extra_state())
        return state

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The optimizers by their checkpoint key (``optimizer`` for a single one)."""
        optimizer = getattr(self, "optimizer", None)
        return {"optimizer": optimizer} if optimizer is not None else {}

    def _extra_state(self) -> dict[str, Any]:
        """Hook: what else a checkpoint holds (target networks, normalization statistics, ...)."""
        return {}

    def _load_extra_state(self, state: dict[str, Any], weights_only: bool) -> None:
        """Hook: restore what :meth:`_extra_state` saved (called after the model weights are loaded)."""

    def save_checkpoint(self, path: str | Path | None = None) -> Path | None:
        """Write ``state_dict_last.pt`` and the best weights ``state_dict_best.pt`` (atomically)."""
        return write_checkpoints(self.state(), self.checkpoint_dir, self.model_selection, path)

    def load_checkpoint(self, path: str | Path, weights_only: bool = False) -> None:
        """Resume from a checkpoint; ``weights_only`` loads just the model (fine-tuning with another trainer).

        The file is read with ``torch.load(weights_only=True)``: no code from the file is executed.
        """
        self.load_state(read_checkpoint(path, self.device), weights_only)

    def load_state(self, state: dict[str, Any], weights_only: bool = False) -> None:
        """Resume from a checkpoint already read (:func:`read_checkpoint`); see :meth:`load_checkpoint`."""
        self.model.load_state_dict(state["model"])
        self._load_extra_state(state, weights_only)
        if weights_only:
            return
        if state.get("trainer") == type(self).__name__:
            for name, optimizer in self._optimizers().items():
                if name in state:
                    optimizer.load_state_dict(state[name])
        self.epoch = int(state.get("epoch", 0))
        self.updates = int(state.get("updates", 0))
        self.env_steps = int(state.get("env_steps", 0))
        self.wall_time = float(state.get("wall_time", 0.0))
        if state.get("best_reward") is not None:
            self.model_selection.best_reward = float(state["best_reward"])
            self.model_selection.best_epoch = state.get("best_epoch")
            self.model_selection.last_improvement_epoch = self.epoch


def _flat_tensors(state: Any, prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    """The tensors of a (nested) state dict with their dotted names."""
    found: list[tuple[str, torch.Tensor]] = []
    for key, value in state.items():
        if isinstance(value, torch.Tensor):
            found.append((f"{prefix}{key}", value))
        elif isinstance(value, dict):
            found += _flat_tensors(value, f"{prefix}{key}.")
    return found


def grad_norm(params: Any) -> float:
    """The global L2 norm of the gradients of ``params`` (0 where none has a gradient)."""
    grads = [p.grad.detach().reshape(-1) for p in params if p.grad is not None]
    if not grads:
        return 0.0
    return float(torch.linalg.vector_norm(torch.cat(grads)))


def adam(params: list[torch.nn.Parameter], lr: float, eps: float = 1e-5) -> torch.optim.Adam:
    """Adam with one fused kernel per step where the device has one (several times faster for the small networks
    of RL than a kernel per parameter); the per-parameter implementation elsewhere."""
    devices = {p.device.type for p in params}
    fused = all(p.dtype.is_floating_point for p in params) and len(devices) == 1
    if fused:
        try:
            return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
        except RuntimeError:  # no fused kernel for this device or dtype
            pass
    return torch.optim.Adam(params, lr=lr, eps=eps)
