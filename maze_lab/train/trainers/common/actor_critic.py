"""The actor-critic training loop shared by A2C and PPO: rollouts, advantages, epochs, evaluation,
checkpoints, early stopping, stopping and pausing from another thread."""

from __future__ import annotations

import math
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.events.event_record import EventRecord
from maze_lab.core.log_stats.aggregation import EpochStatsAggregator, LogStats, aggregate_episode
from maze_lab.core.log_stats.writers import LogStatsWriter, epoch_commit
from maze_lab.distributions.distribution_mapper import is_bounded_box
from maze_lab.train.trainers.common.checkpoints import read_checkpoint, write_checkpoints
from maze_lab.train.trainers.common.config import ActorCriticAlgorithmConfig
from maze_lab.train.trainers.common.control import TrainingControl
from maze_lab.train.trainers.common.divergence import DivergenceMonitor
from maze_lab.train.trainers.common.events import ActorCriticEvents
from maze_lab.train.trainers.common.model_selection import BestModelSelection
from maze_lab.train.trainers.common.rollout import Rollout, RolloutGenerator
from maze_lab.train.trainers.common.schedules import as_schedule


class TrainingDivergedError(RuntimeError):
    """A loss became NaN or infinite; the message names the epoch, the update and the loss term."""


@dataclass
class KeyBatch:
    """Everything the loss needs for the samples of one policy key (flattened over time and envs)."""

    obs: dict[str, torch.Tensor]
    actions: dict[str, torch.Tensor]
    old_log_prob: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    old_values: torch.Tensor

    def __len__(self) -> int:
        return int(self.old_log_prob.shape[0])

    def select(self, idx: torch.Tensor | slice) -> KeyBatch:
        """A minibatch: the samples at ``idx`` (a tensor of indices or a slice, which gives views)."""
        return KeyBatch({k: v[idx] for k, v in self.obs.items()}, {k: v[idx] for k, v in self.actions.items()},
                        self.old_log_prob[idx], self.advantages[idx], self.returns[idx], self.old_values[idx])


def _stack_dicts(dicts: list[dict[str, np.ndarray]], device: torch.device) -> dict[str, torch.Tensor]:
    """Concatenate per-step dicts of (n_envs, ...) arrays into (steps * n_envs, ...) tensors."""
    out = {}
    for k in dicts[0]:
        arr = np.concatenate([d[k] for d in dicts]) if len(dicts) > 1 else dicts[0][k]
        t = torch.from_numpy(np.ascontiguousarray(arr))
        if t.dtype == torch.float64:
            t = t.float()
        out[k] = t.to(device)
    return out


class ActorCriticTrainer(TrainingControl, ABC):
    """Base of A2C and PPO.

    :param algorithm_config: the algorithm parameters.
    :param model: a TorchActorCritic (policy + state critic).
    :param env: the training vector env (or give ``rollout_generator``).
    :param rollout_generator: a RolloutGenerator over the training vector env.
    :param evaluator: run after each epoch (default: ``algorithm_config.rollout_evaluator``).
    :param model_selection: keeps the best weights (default: the evaluator's, else a new one).
    :param writers: writers of the trainer statistics (default: the training env's writers).
    :param checkpoint_dir: where ``state_dict_last.pt`` (each epoch and on stop) and
        ``state_dict_best.pt`` are written; None for no files.
    """

    def __init__(self, algorithm_config: ActorCriticAlgorithmConfig, model: Any, env: Any = None,
                 rollout_generator: RolloutGenerator | None = None, evaluator: Any = None,
                 model_selection: BestModelSelection | None = None, writers: list[LogStatsWriter] | None = None,
                 checkpoint_dir: str | Path | None = None):
        if rollout_generator is None:
            if env is None:
                raise ValueError("give the training env (env=...) or a rollout_generator")
            rollout_generator = RolloutGenerator(env)
        algorithm_config, self.bounded_box_changes = _for_action_spaces(algorithm_config, rollout_generator.env)
        self.config = algorithm_config
        self.model = model
        self.policy = model.policy
        self.critic = model.critic
        self.rollout_generator = rollout_generator
        self.env = rollout_generator.env
        self.evaluator = evaluator if evaluator is not None else algorithm_config.rollout_evaluator
        if model_selection is None:
            model_selection = getattr(self.evaluator, "model_selection", None) or BestModelSelection(model=model)
        if model_selection.model is None:
            model_selection.model = model
        if self.evaluator is not None and getattr(self.evaluator, "model_selection", None) is None:
            self.evaluator.model_selection = model_selection
        self.model_selection = model_selection
        self._writers = writers
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.device = torch.device(algorithm_config.device)
        self.model.to(self.device)
        self.lr_schedule = as_schedule(algorithm_config.lr)
        self.optimizer = _adam(list(self.model.parameters()), self.lr_schedule.initial)
        self.epoch = 0
        self.updates = 0
        self.env_steps = 0
        self._init_control()
        self._update_events: list[list[EventRecord]] = []
        self._generator = torch.Generator().manual_seed(algorithm_config.seed or 0)
        self.stats_aggregator = EpochStatsAggregator()
        self.last_eval_reward: float | None = None
        self.callbacks: list[Callable[[ActorCriticTrainer, LogStats], None]] = []
        self.stop_reason: str | None = None
        self._schedule_target: float | None = None  # the epoch the schedules reach their end at (see _progress)
        self._update_in_epoch = 0
        self.divergence_monitor = DivergenceMonitor()
        self.warnings: list[str] = []
        """Warnings of this trainer's epochs (a diverged policy), newest last."""

    @property
    def writers(self) -> list[LogStatsWriter]:
        """Writers of the trainer statistics: the given ones, else the training env's."""
        return self._writers if self._writers is not None else self.env.writers

    def evaluate(self, deterministic: bool | None = None, repeats: int | None = None) -> float:
        """Evaluate the current policy now; returns the mean episode reward.

        :param deterministic: override the evaluator's setting.
        :param repeats: number of episodes (default: the evaluator's).
        """
        if self.evaluator is None:
            raise ValueError("this trainer has no evaluator; pass evaluator=RolloutEvaluator(...) or set "
                             "algorithm_config.rollout_evaluator")
        saved = (self.evaluator.deterministic, self.evaluator.n_episodes)
        if deterministic is not None:
            self.evaluator.deterministic = deterministic
        if repeats is not None:
            self.evaluator.n_episodes = repeats
        try:
            self.last_eval_reward = self.evaluator.evaluate(self.policy, epoch=self.epoch)
        finally:
            self.evaluator.deterministic, self.evaluator.n_episodes = saved
        return self.last_eval_reward

    # ---- training loop ---------------------------------------------------------------------------------------
    def train(self, n_epochs: int | None = None) -> None:
        """Train for ``n_epochs`` more epochs (default: the config's; 0 = until early stopping or stop)."""
        n_epochs = self.config.n_epochs if n_epochs is None else n_epochs
        target = self.epoch + n_epochs if n_epochs else math.inf
        self._schedule_target = target if n_epochs else None
        if not n_epochs:
            self._warn_schedules_without_target()
        if self.config.seed is not None:
            torch.manual_seed(self.config.seed)
        if self.rollout_generator._obs is None:
            self.rollout_generator.reset(self.config.seed)
        self.stop_reason = None
        self.model.train()
        try:
            self._train_epochs(target)
        finally:
            self._stop.clear()  # a stop ends this call only; a stop requested before it started is honoured

    def _train_epochs(self, target: float) -> None:
        while self.epoch < target:
            epoch_start = time.perf_counter()
            for update_in_epoch in range(self.config.epoch_length):
                self._update_in_epoch = update_in_epoch
                self._running.wait()
                if self._stop.is_set():
                    self.stop_reason = "stopped"
                    self.save_checkpoint()
                    return
                self._one_update()
            self.epoch += 1
            self._record(ActorCriticEvents.time_epoch, time.perf_counter() - epoch_start)
            # train, trainer and eval statistics of the epoch reach readers together (the StatsStore)
            with epoch_commit(self._epoch_writers(), self.epoch):
                stats = self._write_epoch_stats()
                if self.evaluator is not None:
                    # the same eval seed every epoch: evaluations compare policies on the same start states
                    eval_seed = None if self.config.seed is None else self.config.seed + 1_000_000
                    self.last_eval_reward = self.evaluator.evaluate(self.policy, epoch=self.epoch, seed=eval_seed)
            self.save_checkpoint()
            for cb in self.callbacks:
                cb(self, stats)
            if (self.evaluator is not None and self.config.patience
                    and self.model_selection.epochs_without_improvement(self.epoch) >= self.config.patience):
                self.stop_reason = f"early stopping: no improvement for {self.config.patience} epochs"
                return
            if self._stop.is_set():
                self.stop_reason = "stopped"
                return
        self.stop_reason = "done"

    def _progress(self) -> float:
        """Where the schedules stand: 0 at epoch 0, 1 at the epoch the current ``train`` call ends at.

        The horizon is the run's own target (epochs done + the epochs of this call), not ``config.n_epochs``: a
        resumed run continues its schedules from its epoch, and ``train(n)`` decays them to their end over its n
        epochs. Without a target (``n_epochs=0``: until early stopping or stop) the schedules hold their start value.
        """
        target = self._schedule_target
        if not target:
            return 0.0
        return (self.epoch + self._update_in_epoch / self.config.epoch_length) / target

    def _warn_schedules_without_target(self) -> None:
        """Say so where a schedule cannot decay because this training call has no number of epochs."""
        schedules = {"lr": self.lr_schedule, "clip_range": getattr(self, "clip_schedule", None)}
        varying = [name for name, schedule in schedules.items()
                   if schedule is not None and schedule.value(0.0) != schedule.value(1.0)]
        if varying:
            print(f"maze-lab: training without a number of epochs (n_epochs=0): the schedule(s) of "
                  f"{', '.join(varying)} hold their start value; give n_epochs=N (or train(N)) to decay them over "
                  f"N epochs", file=sys.stderr)

    def _one_update(self) -> None:
        t0 = time.perf_counter()
        self.policy.eval()
        rollout = self.rollout_generator.rollout(self.policy, self.config.n_rollout_steps, epoch=self.epoch + 1)
        self.policy.train()
        t1 = time.perf_counter()
        self.env_steps += rollout.n_actions
        lr = self.lr_schedule.value(self._progress())
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self._update_events.append([])
        self._record(ActorCriticEvents.learning_rate, lr)
        batches = self._prepare_batches(rollout)
        self.update(batches)
        self.updates += 1
        self._record(ActorCriticEvents.time_rollout, t1 - t0)
        self._record(ActorCriticEvents.time_update, time.perf_counter() - t1)

    def _record(self, event: Callable, value: float, step_key: StepKey | None = None) -> None:
        attrs = {"value": float(value)} if step_key is None else {"step_key": step_key, "value": float(value)}
        if not self._update_events:
            self._update_events.append([])
        self._update_events[-1].append(EventRecord(ActorCriticEvents, event, attrs))

    def _epoch_writers(self) -> list[LogStatsWriter]:
        """Every writer an epoch's statistics go to: the trainer's, the training env's and the evaluation env's."""
        eval_env = getattr(self.evaluator, "eval_env", None)
        return [*self.writers, *getattr(self.env, "writers", []), *getattr(eval_env, "writers", [])]

    def _check_divergence(self) -> None:
        """Record ``divergence_warning`` (and print one line per policy key) where the epoch's policy collapsed
        while its value loss exploded (the rule of :mod:`maze_lab.train.trainers.common.divergence`)."""
        sums: dict[tuple[Callable, Any], list[float]] = {}
        for update in self._update_events:
            for record in update:
                if record.interface_method in (ActorCriticEvents.policy_entropy, ActorCriticEvents.critic_value_loss):
                    sums.setdefault((record.interface_method, record.attributes.get("step_key")), []).append(
                        record.attributes["value"])
        means = {k: float(np.mean(v)) for k, v in sums.items()}
        entropies = {key: v for (event, key), v in means.items() if event is ActorCriticEvents.policy_entropy}
        losses = {key: v for (event, key), v in means.items() if event is ActorCriticEvents.critic_value_loss}
        for key, message in self.divergence_monitor.check(self.epoch, entropies, losses).items():
            self._record(ActorCriticEvents.divergence_warning, 1.0, key)
            if key not in self.divergence_monitor.warned:  # one console line per key; the statistic every epoch
                self.divergence_monitor.warned.add(key)
                print(f"maze-lab: WARNING {message}", file=sys.stderr, flush=True)
            self.warnings.append(message)

    def _write_epoch_stats(self) -> LogStats:
        env_stats = self.env.write_epoch_stats(self.epoch)
        self._check_divergence()
        self.stats_aggregator.add_episode(aggregate_episode(self._update_events))
        self._update_events = []
        trainer_stats = self.stats_aggregator.reduce()
        for w in self.writers:
            w.write(getattr(self.env, "logging_prefix", None) or "train", self.epoch, trainer_stats)
        return {**env_stats, **trainer_stats}

    # ---- advantages ------------------------------------------------------------------------------------------
    def _critic_inputs(self, key: StepKey, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return obs

    def _values(self, key: StepKey, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.critic.predict_values({key: obs})[key]

    def _prepare_batches(self, rollout: Rollout) -> dict[StepKey, KeyBatch]:
        """Values, bootstrapping and generalized advantages over the chain of sub-steps; batches per key."""
        cfg = self.config
        records = rollout.records
        n_sub, n = len(records), rollout.n_envs
        keys = [r.key for r in records]
        by_key: dict[StepKey, list[int]] = {}
        for s, k in enumerate(keys):
            by_key.setdefault(k, []).append(s)
        obs_by_key = {k: _stack_dicts([records[s].obs for s in idx], self.device) for k, idx in by_key.items()}
        values = np.zeros((n_sub + 1, n), dtype=np.float32)
        rewards = np.stack([r.reward for r in records]).astype(np.float32)
        with torch.no_grad():
            for k, idx in by_key.items():
                v = self._values(k, obs_by_key[k]).reshape(len(idx), n)
                values[idx] = v.cpu().numpy()
            next_obs = {kk: torch.as_tensor(vv).to(self.device) for kk, vv in rollout.next_obs.items()}
            values[n_sub] = self._values(rollout.next_key, _float(next_obs)).cpu().numpy().reshape(n)
            for s, r in enumerate(records):
                if r.bootstrap:
                    envs = [i for i, _ in r.bootstrap]
                    term_obs = _float({kk: torch.as_tensor(np.stack([o[kk] for _, o in r.bootstrap])).to(self.device)
                                       for kk in r.bootstrap[0][1]})
                    v = self._values(rollout.first_key, term_obs).cpu().numpy().reshape(len(envs))
                    rewards[s, envs] += cfg.gamma * v
        done = np.stack([r.terminated | r.truncated for r in records])
        # a full env step ends where the next actor is the first policy key again (or the episode ended)
        next_keys = keys[1:] + [rollout.next_key]
        boundary = np.array([nk == rollout.first_key for nk in next_keys])
        adv = np.zeros((n_sub, n), dtype=np.float32)
        last = np.zeros(n, dtype=np.float32)
        for s in reversed(range(n_sub)):
            not_done = 1.0 - done[s].astype(np.float32)
            gamma = cfg.gamma if boundary[s] else 1.0
            lam = cfg.gae_lambda if boundary[s] else 1.0
            delta = rewards[s] + gamma * values[s + 1] * not_done - values[s]
            last = delta + gamma * lam * not_done * last
            adv[s] = last
        returns = adv + values[:n_sub]
        batches = {}
        for k, idx in by_key.items():
            actions = _stack_dicts([records[s].actions for s in idx], self.device)
            batches[k] = KeyBatch(
                obs=obs_by_key[k], actions=actions,
                old_log_prob=torch.from_numpy(np.concatenate([records[s].log_prob for s in idx])).to(self.device),
                advantages=torch.from_numpy(adv[idx].reshape(-1)).to(self.device),
                returns=torch.from_numpy(returns[idx].reshape(-1)).to(self.device),
                old_values=torch.from_numpy(values[idx].reshape(-1)).to(self.device),
            )
        return batches

    # ---- losses ----------------------------------------------------------------------------------------------
    def _policy_and_values(self, key: StepKey, batch: KeyBatch) -> tuple[Any, torch.Tensor]:
        out = self.policy.compute_substep_policy_output(batch.obs, key)
        critic_in = out.embedding_logits if out.embedding_logits else batch.obs
        return out, self.critic.predict_values({key: critic_in})[key].reshape(-1)

    def _forward(self, key: StepKey, batch: KeyBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                torch.Tensor]:
        """Log-probability of the taken actions, mean entropy, (normalized) advantages and predicted values."""
        out, values = self._policy_and_values(key, batch)
        log_prob = out.prob_dist.joint_log_prob(batch.actions)
        entropy = out.prob_dist.joint_entropy().mean()
        adv = batch.advantages
        if self.config.normalize_advantages and len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        return log_prob, entropy, adv, values

    def _check_finite(self, terms: dict[str, torch.Tensor]) -> None:
        bad = {name: t.item() for name, t in terms.items() if not torch.isfinite(t).all()}
        if bad:
            listed = ", ".join(f"'{name}' is {value}" for name, value in bad.items())
            raise TrainingDivergedError(
                f"epoch {self.epoch + 1}, update {self.updates + 1}: loss term {listed}; the last good checkpoint "
                f"stays on disk. Lower the learning rate or check rewards and observations for NaN/inf."
            )

    def _step(self, loss: torch.Tensor, record_grad_norms: bool = False) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if record_grad_norms:
            self._record_grad_norms()  # before clipping: the norms the loss produced
        if self.config.max_grad_norm > 0:
            _clip_grad_norm([p for group in self.optimizer.param_groups for p in group["params"]],
                            self.config.max_grad_norm)
        self.optimizer.step()

    def _record_grad_norms(self) -> None:
        for key, net in self.policy.networks.items():
            self._record(ActorCriticEvents.policy_grad_norm, _grad_norm(net.parameters()), _key_of(key))
        for key, net in self.critic.networks.items():
            self._record(ActorCriticEvents.critic_grad_norm, _grad_norm(net.parameters()), key)

    @property
    def critic_burn_in(self) -> bool:
        """Whether only the critic is trained in this epoch."""
        return self.epoch < self.config.critic_burn_in_epochs

    @abstractmethod
    def update(self, batches: dict[StepKey, KeyBatch]) -> None:
        """One update of policy and critic from a rollout."""

    # ---- checkpoints -----------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Everything needed to resume: weights, optimizer, counters, best reward, normalization statistics."""
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "updates": self.updates,
            "env_steps": self.env_steps,
            "best_reward": self.model_selection.best_reward,
            "best_epoch": self.model_selection.best_epoch,
            "trainer": type(self).__name__,
        }
        stats = _normalization_statistics(self.env)
        if stats is not None:
            state["normalization_statistics"] = stats
        return state

    def save_checkpoint(self, path: str | Path | None = None) -> Path | None:
        """Write ``state_dict_last.pt`` and the best weights ``state_dict_best.pt`` (atomically)."""
        return write_checkpoints(self.state(), self.checkpoint_dir, self.model_selection, path)

    def load_checkpoint(self, path: str | Path, weights_only: bool = False) -> None:
        """Resume from a checkpoint; ``weights_only`` loads just the model (fine-tuning with another trainer).

        The file is read with ``torch.load(weights_only=True)``: no code from the file is executed.
        """
        state = read_checkpoint(path, self.device)
        self.model.load_state_dict(state["model"])
        if state.get("normalization_statistics"):
            _restore_normalization_statistics(self.env, state["normalization_statistics"])
        if weights_only:
            return
        if state.get("trainer") == type(self).__name__ and "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        self.epoch = int(state.get("epoch", 0))
        self.updates = int(state.get("updates", 0))
        self.env_steps = int(state.get("env_steps", 0))
        if state.get("best_reward") is not None:
            self.model_selection.best_reward = float(state["best_reward"])
            self.model_selection.best_epoch = state.get("best_epoch")
            self.model_selection.last_improvement_epoch = self.epoch


def _adam(params: list[torch.nn.Parameter], lr: float) -> torch.optim.Adam:
    """Adam with one fused kernel per step where the device has one (several times faster for the small networks
    of RL than a kernel per parameter); the per-parameter implementation elsewhere."""
    devices = {p.device.type for p in params}
    fused = all(p.dtype.is_floating_point for p in params) and len(devices) == 1
    if fused:
        try:
            return torch.optim.Adam(params, lr=lr, eps=1e-5, fused=True)
        except RuntimeError:  # no fused kernel for this device or dtype
            pass
    return torch.optim.Adam(params, lr=lr, eps=1e-5)


def _clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float) -> None:
    """Scale the gradients in place so that their global L2 norm is at most ``max_norm``."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp(max=1.0))


def _for_action_spaces(config: ActorCriticAlgorithmConfig, env: Any) -> tuple[ActorCriticAlgorithmConfig,
                                                                              dict[str, Any]]:
    """The config with its ``bounded_box`` values applied where every action head of ``env`` is a bounded Box."""
    spaces = getattr(env, "action_spaces_dict", None)
    if not config.bounded_box or not spaces:
        return config, {}
    heads = [space for dict_space in spaces.values() for space in getattr(dict_space, "spaces", {}).values()]
    if not heads or not all(is_bounded_box(space) for space in heads):
        return config, {}
    config, changes = config.for_bounded_box_actions()
    if changes:
        values = ", ".join(f"{k}={v}" for k, v in changes.items())
        print(f"maze-lab: every action head is a bounded Box: training with algorithm.bounded_box {values} (set "
              f"algorithm.bounded_box={{}} for the generic values)", file=sys.stderr)
    return config, changes


def _float(obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: (v.float() if v.dtype == torch.float64 else v) for k, v in obs.items()}


def _key_of(key: Any) -> Any:
    return key.step_key if hasattr(key, "step_key") else key


def _grad_norm(params: Any) -> float:
    grads = [p.grad.detach().reshape(-1) for p in params if p.grad is not None]
    if not grads:
        return 0.0
    return float(torch.linalg.vector_norm(torch.cat(grads)))


def _normalization_statistics(env: Any) -> Any:
    """The observation normalization statistics of the training envs (None without normalization)."""
    try:
        envs = getattr(env, "envs", None)
        if envs:
            getter = getattr(envs[0], "get_normalization_statistics", None)
            stats = getter() if getter is not None else None
        elif hasattr(env, "call"):
            stats = env.call("get_normalization_statistics")[0]
        else:
            stats = None
    except Exception:  # noqa: BLE001 - no normalization wrapper in the stack
        return None
    return _to_plain(stats) if stats else None


def _restore_normalization_statistics(env: Any, stats: Any) -> None:
    """Give every training env the statistics of a checkpoint."""
    plain = _to_numpy(stats)
    envs = getattr(env, "envs", None)
    if envs:
        for e in envs:
            e.set_normalization_statistics(plain)
    elif hasattr(env, "call"):
        env.call("set_normalization_statistics", plain)


def _to_numpy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _to_numpy(v) for k, v in value.items()}
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, list):
        return [_to_numpy(v) for v in value]
    return value


def _to_plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _to_plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, list | tuple):
        return [_to_plain(v) for v in value]
    return value
