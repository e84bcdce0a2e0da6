"""What A2C and PPO share on top of the trainer base: rollouts of the training envs, advantages over the chain of
sub-steps, the optimizer step with gradient clipping, the divergence check, normalization statistics in
checkpoints."""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.log_stats.aggregation import LogStats
from maze_lab.core.log_stats.writers import LogStatsWriter
from maze_lab.core.utils.log import get_logger
from maze_lab.core.utils.yielding import give_way
from maze_lab.distributions.distribution_mapper import is_bounded_box
from maze_lab.train.trainers.common.base import Trainer, adam, grad_norm
from maze_lab.train.trainers.common.config import ActorCriticAlgorithmConfig
from maze_lab.train.trainers.common.divergence import DivergenceMonitor
from maze_lab.train.trainers.common.events import ActorCriticEvents
from maze_lab.train.trainers.common.model_selection import BestModelSelection
from maze_lab.train.trainers.common.rollout import Rollout, RolloutGenerator, substep_policy_output
from maze_lab.train.trainers.common.schedules import as_schedule

_log = get_logger(__name__)


@dataclass
class KeyBatch:
    """Everything the loss needs for the samples of one policy key (flattened over time and envs)."""

    obs: dict[str, torch.Tensor]
    actions: dict[str, torch.Tensor]
    old_log_prob: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    old_values: torch.Tensor
    agent_ids: np.ndarray | None = None
    """The agent of each sample (None where the rollout did not record them): for policy keys with separate agent
    networks each sample goes through its agent's network."""

    def __len__(self) -> int:
        return int(self.old_log_prob.shape[0])

    def select(self, idx: torch.Tensor | slice) -> KeyBatch:
        """A minibatch: the samples at ``idx`` (a tensor of indices or a slice, which gives views)."""
        agent_ids = self.agent_ids
        if agent_ids is not None:
            agent_ids = agent_ids[idx if isinstance(idx, slice) else idx.cpu().numpy()]
        return KeyBatch({k: v[idx] for k, v in self.obs.items()}, {k: v[idx] for k, v in self.actions.items()},
                        self.old_log_prob[idx], self.advantages[idx], self.returns[idx], self.old_values[idx],
                        agent_ids)


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


class ActorCriticTrainer(Trainer):
    """Base of A2C and PPO: an update is one rollout of the training envs, its advantages, and the algorithm's
    :meth:`update` on them.

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

    events = ActorCriticEvents

    def __init__(self, algorithm_config: ActorCriticAlgorithmConfig, model: Any, env: Any = None,
                 rollout_generator: RolloutGenerator | None = None, evaluator: Any = None,
                 model_selection: BestModelSelection | None = None, writers: list[LogStatsWriter] | None = None,
                 checkpoint_dir: str | Path | None = None):
        if rollout_generator is None:
            if env is None:
                raise ValueError("give the training env (env=...) or a rollout_generator")
            rollout_generator = RolloutGenerator(env)
        algorithm_config, self.bounded_box_changes = _for_action_spaces(algorithm_config, rollout_generator.env)
        self.rollout_generator = rollout_generator
        self.env = rollout_generator.env
        super().__init__(algorithm_config, model,
                         evaluator if evaluator is not None else algorithm_config.rollout_evaluator,
                         model_selection, writers, checkpoint_dir)
        self.policy = model.policy
        self.critic = model.critic
        self.lr_schedule = as_schedule(algorithm_config.lr)
        self.optimizer = adam(list(self.model.parameters()), self.lr_schedule.initial)
        self._update_in_epoch = 0
        self.divergence_monitor = DivergenceMonitor()

    # ---- training loop ---------------------------------------------------------------------------------------
    def _before_training(self, has_target: bool) -> None:
        if not has_target:
            self._warn_schedules_without_target()
        if self.rollout_generator._obs is None:
            self.rollout_generator.reset(self.config.seed)

    def _epoch_updates(self) -> Iterator[None]:
        for update_in_epoch in range(self.config.epoch_length):
            yield
            self._update_in_epoch = update_in_epoch
            self._one_update()

    def _progress(self, within_epoch: float | None = None) -> float:
        """Where the schedules stand (see :meth:`Trainer._progress`), counting the updates done in this epoch."""
        if within_epoch is None:
            within_epoch = self._update_in_epoch / self.config.epoch_length
        return super()._progress(within_epoch)

    def _warn_schedules_without_target(self) -> None:
        """Say so where a schedule cannot decay because this training call has no number of epochs."""
        schedules = {"lr": self.lr_schedule, "clip_range": getattr(self, "clip_schedule", None)}
        varying = [name for name, schedule in schedules.items()
                   if schedule is not None and schedule.value(0.0) != schedule.value(1.0)]
        if varying:
            _log.info(f"training without a number of epochs (n_epochs=0): the schedule(s) of {', '.join(varying)} "
                      f"hold their start value; give n_epochs=N (or train(N)) to decay them over N epochs")

    def _one_update(self) -> None:
        t0 = time.perf_counter()
        self.policy.eval()
        rollout = self._rollout(self.config.n_rollout_steps)
        self.policy.train()
        t1 = time.perf_counter()
        self.env_steps += rollout.n_actions
        lr = self.lr_schedule.value(self._progress())
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self._new_update()
        self._record(ActorCriticEvents.learning_rate, lr)
        give_way()  # between the rollout and the update's parts: a background run makes room for a running cell
        batches = self._prepare_batches(rollout)
        give_way()
        self.update(batches)
        self.updates += 1
        self._record(ActorCriticEvents.time_rollout, t1 - t0)
        self._record(ActorCriticEvents.time_update, time.perf_counter() - t1)

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
                _log.warning(message)
            self.warnings.append(message)

    def _write_epoch_stats(self) -> LogStats:
        self._check_divergence()
        return super()._write_epoch_stats()

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
        boundary = full_step_ends(rollout)
        adv = np.zeros((n_sub, n), dtype=np.float32)
        last = np.zeros(n, dtype=np.float32)
        for s in reversed(range(n_sub)):
            not_done = 1.0 - done[s].astype(np.float32)
            gamma = np.where(boundary[s], np.float32(cfg.gamma), np.float32(1.0))
            lam = np.where(boundary[s], np.float32(cfg.gae_lambda), np.float32(1.0))
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
                agent_ids=_agent_ids([records[s] for s in idx]),
            )
        return batches

    # ---- losses ----------------------------------------------------------------------------------------------
    def _policy_and_values(self, key: StepKey, batch: KeyBatch) -> tuple[Any, torch.Tensor]:
        out = substep_policy_output(self.policy, batch.obs, key, batch.agent_ids)
        critic_in = out.embedding_logits if out.embedding_logits else batch.obs
        return out, self.critic.predict_values({key: critic_in})[key].reshape(-1)

    def _log_prob_entropy_values(self, key: StepKey, batch: KeyBatch) -> tuple[torch.Tensor, torch.Tensor,
                                                                                torch.Tensor]:
        """Log-probability of the taken actions, mean entropy of the policy, and the critic's values."""
        out, values = self._policy_and_values(key, batch)
        return out.prob_dist.joint_log_prob(batch.actions), out.prob_dist.joint_entropy().mean(), values

    @property
    def parameters(self) -> list[torch.nn.Parameter]:
        """The parameters of policy and critic (the optimizer's)."""
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _record_grad_norms(self) -> None:
        for key, net in self.policy.networks.items():
            self._record(ActorCriticEvents.policy_grad_norm, grad_norm(net.parameters()), _key_of(key))
        for key, net in self.critic.networks.items():
            self._record(ActorCriticEvents.critic_grad_norm, grad_norm(net.parameters()), key)

    @property
    def critic_burn_in(self) -> bool:
        """Whether only the critic is trained in this epoch."""
        return self.epoch < self.config.critic_burn_in_epochs

    @abstractmethod
    def update(self, batches: dict[StepKey, KeyBatch]) -> None:
        """One update of policy and critic from a rollout."""

    # ---- checkpoints -----------------------------------------------------------------------------------------
    def _extra_state(self) -> dict[str, Any]:
        """The observation normalization statistics of the training envs, where they have them."""
        stats = _normalization_statistics(self.env)
        return {"normalization_statistics": stats} if stats is not None else {}

    def _load_extra_state(self, state: dict[str, Any], weights_only: bool) -> None:
        if state.get("normalization_statistics"):
            _restore_normalization_statistics(self.env, state["normalization_statistics"])


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
        _log.info(f"every action head is a bounded Box: training with algorithm.bounded_box {values} (set "
                  f"algorithm.bounded_box={{}} for the generic values)")
    return config, changes


class LossMeans:
    """The losses of an update's gradient steps per policy key, recorded as their means over the steps.

    Each step's terms are stacked into one tensor and summed in float64 (the same sums as adding each term's float,
    without reading every term out of torch at every step); the loss terms are checked for NaN and infinity in one
    operation per step.
    """

    TERMS = ("policy_loss", "entropy", "value_loss", "value")
    """The terms recorded per policy key, in the order they are recorded."""
    EVENTS = {"policy_loss": ActorCriticEvents.policy_loss, "entropy": ActorCriticEvents.policy_entropy,
              "value_loss": ActorCriticEvents.critic_value_loss, "value": ActorCriticEvents.critic_value}

    def __init__(self) -> None:
        self.sums: dict[StepKey, torch.Tensor] = {}
        self.extra_names: tuple[str, ...] = ()

    def add(self, trainer: Any, key: StepKey, policy_loss: torch.Tensor, entropy: torch.Tensor,
            value_loss: torch.Tensor, value: torch.Tensor, **extra: torch.Tensor) -> None:
        """One gradient step's terms of policy key ``key`` (scalars): raises :class:`TrainingDivergedError` (through
        ``trainer._check_finite``) where a loss term is NaN or infinite; ``extra`` terms (e.g. PPO's KL) are summed
        too (:meth:`extra_sum`)."""
        with torch.no_grad():
            stacked = torch.stack([policy_loss, entropy, value_loss, value, *extra.values()]).detach()
            if not bool(torch.isfinite(stacked[:3]).all()):
                trainer._check_finite({"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy})
            total = self.sums.get(key)
            self.sums[key] = stacked.double() if total is None else total + stacked
        self.extra_names = tuple(extra)

    def extra_sum(self, name: str) -> float:
        """The sum of an extra term over all steps and keys."""
        position = len(self.TERMS) + self.extra_names.index(name)
        return sum(float(total[position]) for total in self.sums.values())

    def record(self, trainer: ActorCriticTrainer, n_steps: int) -> None:
        """Record each term's sum over ``n_steps`` gradient steps."""
        for key, total in self.sums.items():
            values = total.tolist()
            for position, name in enumerate(self.TERMS):
                trainer._record(self.EVENTS[name], values[position] / n_steps, key)


def _float(obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: (v.float() if v.dtype == torch.float64 else v) for k, v in obs.items()}


def full_step_ends(rollout: Rollout) -> np.ndarray:
    """(sub-steps, envs) bools: where a sub-step completed a full env step, after which gamma (and lambda) apply.

    Records of envs with several agents on a policy key carry it (``step_end``: the next actor already acted in the
    step, or the episode ended); otherwise a full step ends where the next actor is the first policy key again."""
    records = rollout.records
    next_keys = [r.key for r in records[1:]] + [rollout.next_key]
    ends = np.repeat(np.array([nk == rollout.first_key for nk in next_keys], dtype=bool)[:, None], rollout.n_envs,
                     axis=1)
    for s, r in enumerate(records):
        if r.step_end is not None:
            ends[s] = r.step_end
    return ends


def _agent_ids(records: list[Any]) -> np.ndarray | None:
    """The agents of the records' samples, flattened over time and envs (None where a record has none)."""
    if any(r.agent_ids is None for r in records):
        return None
    return np.concatenate([r.agent_ids for r in records])


def _key_of(key: Any) -> Any:
    return key.step_key if hasattr(key, "step_key") else key


def _normalization_statistics(env: Any) -> Any:
    """The observation normalization statistics of the training envs (None without normalization). Only an env
    stack without the method means "no normalization": a worker that died or raised is raised, naming the worker
    (taken for "none", it came back as an unrelated error at the next rollout)."""
    from maze_lab.train.vector_env import VectorEnvCallError

    name = "get_normalization_statistics"
    envs = getattr(env, "envs", None)
    if envs:
        getter = getattr(envs[0], name, None)
        stats = getter() if getter is not None else None
    elif hasattr(env, "call"):
        if getattr(env, "started", True) is False and getattr(env, "failure", None) is None:
            return None  # the workers start with the first rollout: they normalized nothing yet
        try:
            stats = env.call(name)[0]
        except VectorEnvCallError as err:
            if not _no_such_method(err, name):
                raise
            return None
    else:
        stats = None
    return _to_plain(stats) if stats else None


def _no_such_method(err: Exception, name: str) -> bool:
    """Whether a failed call on the envs of workers failed because their env stack has no method ``name`` (the last
    line of the worker's traceback is that AttributeError)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return bool(lines) and lines[-1].startswith("AttributeError") and name in lines[-1]


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
        # a copy: the array may be read-only (one that came from a Ray worker lives in the object store)
        return torch.from_numpy(np.array(value, order="C", copy=True))
    if isinstance(value, list | tuple):
        return [_to_plain(v) for v in value]
    return value
