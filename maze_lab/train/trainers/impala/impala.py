"""IMPALA (Espeholt et al. 2018): actors in worker processes roll out copies of the policy and queue their
trajectories; the learner takes ``actors_batch_size`` of them per update, corrects for the actors' older weights with
V-trace and takes one gradient step on the policy-gradient, value and entropy losses.

Works on flat and structured envs (several policy keys, sub-steps, action masks): the learner evaluates each policy
key's sub-steps of the whole batch at once, and a trajectory's discount is gamma only where an env step ends (1
between the sub-steps of one env step), as A2C's and PPO's advantages do.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.log_stats.writers import LogStatsWriter
from maze_lab.train.ray_config import RayWorkerSettings
from maze_lab.train.trainers.common.actor_critic import _agent_ids, _float, _key_of, full_step_ends
from maze_lab.train.trainers.common.base import Trainer, adam, grad_norm
from maze_lab.train.trainers.common.model_selection import BestModelSelection
from maze_lab.train.trainers.common.ray_workers import RayWorkersMixin
from maze_lab.train.trainers.common.rollout import substep_policy_output
from maze_lab.train.trainers.common.worker_stats import WorkerEpisodeStats
from maze_lab.train.trainers.impala.actors import ActorPool, ImpalaActorError, Trajectory
from maze_lab.train.trainers.impala.config import ImpalaAlgorithmConfig
from maze_lab.train.trainers.impala.events import ImpalaEvents
from maze_lab.train.trainers.impala.vtrace import clip_rewards, vtrace

__all__ = ["IMPALA", "ImpalaAlgorithmConfig", "ImpalaActorError"]


class IMPALA(RayWorkersMixin, Trainer):
    """The IMPALA learner; it starts its actor processes (or Ray actors) on the first :meth:`train` and stops them
    on :meth:`close`.

    :param algorithm_config: the algorithm parameters.
    :param model: a TorchActorCritic with a state critic (policy + V).
    :param env_factories: one factory per actor, picklable with cloudpickle; each builds one env (a LogStatsWrapper
        is added where it has none).
    :param evaluator: run after each epoch; it keeps the best weights.
    :param model_selection: keeps the best weights (default: the evaluator's, else a new one).
    :param writers: writers of the trainer statistics and the actors' episode statistics (default: the
        process-wide writers).
    :param checkpoint_dir: where ``state_dict_last.pt`` and ``state_dict_best.pt`` are written; None for no files.
    :param workers: ``"processes"`` (actor processes of this machine, ``actor_processes`` of them) or ``"ray"``
        (Ray actors of ``ray.envs_per_worker`` envs each, see :mod:`maze_lab.train.trainers.impala.ray_actors`).
    :param ray: with ``workers="ray"``: the Ray address, resources per worker and ``max_worker_restarts``
        (default: a local Ray, 1 CPU per worker, no restarts).
    """

    events = ImpalaEvents
    uses_env_factories = True
    """The run layer passes env factories (the actors build their envs in their own processes)."""

    def __init__(self, algorithm_config: ImpalaAlgorithmConfig, model: Any,
                 env_factories: list[Callable[[], Any]], evaluator: Any = None,
                 model_selection: BestModelSelection | None = None, writers: list[LogStatsWriter] | None = None,
                 checkpoint_dir: str | Path | None = None, workers: str = "processes",
                 ray: RayWorkerSettings | None = None):
        self._init_workers_backend(workers, ray)
        if not env_factories:
            raise ValueError("IMPALA needs one env factory per actor (env_factories=[f0, f1, ...]); got none")
        critic = getattr(model, "critic", None)
        if critic is None or not hasattr(critic, "predict_values"):
            raise ValueError(f"IMPALA needs a state critic (V) for its V-trace targets; the model's critic is "
                             f"{type(critic).__name__}. Compose the model with a state-value critic (e.g. "
                             f"critic=default_state)")
        self.env_factories = list(env_factories)
        self.env = WorkerEpisodeStats("train", writers)
        super().__init__(algorithm_config, model, evaluator, model_selection, writers, checkpoint_dir)
        self.policy, self.critic = model.policy, model.critic
        self.optimizer = adam(list(self.model.parameters()), self.config.lr)
        self.actors: Any = None
        """ActorPool (actor processes) or RayActorPool (Ray actors), from the first train() on."""

    @property
    def n_actor_processes(self) -> int:
        """The number of actor processes: ``actor_processes``, or one per actor."""
        return min(self.config.actor_processes or len(self.env_factories), len(self.env_factories))

    # ---- actors ----------------------------------------------------------------------------------------------
    def _before_training(self, has_target: bool) -> None:
        self._check_weights("handing the weights to the actors")
        if self.actors is None or self.actors.closed:
            cfg = self.config
            if self.worker_backend == "ray":
                from maze_lab.train.trainers.impala.ray_actors import RayActorPool

                self._connect_ray()
                self.actors = RayActorPool(self.env_factories, self.policy, cfg.n_rollout_steps, cfg.queue_size,
                                           cfg.seed, self.ray_settings, owns_ray=self._owns_ray,
                                           on_restart=self._worker_replaced)
            else:
                self.actors = ActorPool(self.env_factories, self.policy, self.n_actor_processes,
                                        cfg.n_rollout_steps, cfg.queue_size, cfg.seed)
        self.actors.publish(self.policy, self.updates)

    def _check_weights(self, during: str) -> None:
        diverged = self._diverged_weights_error(during)
        if diverged is not None:
            raise diverged

    def _next_trajectory(self) -> Trajectory:
        try:
            return self.actors.get(self.config.actor_start_timeout)
        except ImpalaActorError as err:
            # an actor that cannot sample from NaN weights reports the divergence it is
            diverged = self._diverged_weights_error("an actor's rollout")
            if diverged is not None:
                raise diverged from err
            raise

    def close(self) -> None:
        """Stop the actors (they flush their envs' event logs) and shut down a Ray this trainer started;
        idempotent. A later ``train`` starts new ones."""
        if self.actors is not None:
            self.actors.close()
        self._shutdown_ray()

    # ---- the epoch ---------------------------------------------------------------------------------------------
    def _epoch_updates(self) -> Iterator[None]:
        for _ in range(self.config.epoch_length):
            yield
            self._one_update()

    def _one_update(self) -> None:
        cfg = self.config
        t0 = time.perf_counter()
        batch = [self._next_trajectory() for _ in range(cfg.actors_batch_size)]
        t1 = time.perf_counter()
        self._new_update()
        for trajectory in batch:
            self.env.add(trajectory.episodes)
        lags = [self.updates - t.version for t in batch]
        self._record(ImpalaEvents.policy_lag, float(np.mean(lags)))
        self._record(ImpalaEvents.policy_lag_max, float(max(lags)))
        self._record(ImpalaEvents.queue_size, self.actors.qsize())
        self._record(ImpalaEvents.learning_rate, cfg.lr)
        self._record(ImpalaEvents.worker_restarts, self._take_restarts())
        self.learn(batch)
        self.updates += 1
        self.env_steps += sum(len(t.rollout.records) for t in batch)
        self.actors.publish(self.policy, self.updates)
        self._record(ImpalaEvents.time_wait, t1 - t0)
        self._record(ImpalaEvents.time_update, time.perf_counter() - t1)

    # ---- one update ------------------------------------------------------------------------------------------
    def learn(self, batch: list[Trajectory]) -> None:
        """One gradient step on a batch of trajectories (all of ``n_rollout_steps`` sub-steps)."""
        cfg = self.config
        T, B = len(batch[0].rollout.records), len(batch)
        if any(len(t.rollout.records) != T for t in batch):
            lengths = [len(t.rollout.records) for t in batch]
            raise ValueError(f"IMPALA batches trajectories of one length (n_rollout_steps); got {lengths}")
        device = self.device
        records = [[t.rollout.records[s] for t in batch] for s in range(T)]  # [s][b]

        # the learner's log pi, entropy and V of every sub-step, one forward pass per policy key
        cells: dict[StepKey, list[tuple[int, int]]] = {}
        for s in range(T):
            for b in range(B):
                cells.setdefault(records[s][b].key, []).append((s, b))
        flat_index, log_probs, entropies, values = [], [], [], []
        for key, where in cells.items():
            obs = _stack([records[s][b].obs for s, b in where], device)
            actions = _stack([records[s][b].actions for s, b in where], device)
            agent_ids = _agent_ids([records[s][b] for s, b in where])
            out = substep_policy_output(self.policy, obs, key, agent_ids)
            critic_in = out.embedding_logits if out.embedding_logits else obs
            flat_index.append(torch.tensor([s * B + b for s, b in where], dtype=torch.long))
            log_probs.append(out.prob_dist.joint_log_prob(actions).reshape(-1))
            entropies.append(out.prob_dist.joint_entropy().reshape(-1))
            values.append(self.critic.predict_values({key: critic_in})[key].reshape(-1))
        order = torch.argsort(torch.cat(flat_index)).to(device)  # back to time-major (s, b) order
        target_log_prob = torch.cat(log_probs)[order].reshape(T, B)
        entropy = torch.cat(entropies)[order].reshape(T, B)
        value = torch.cat(values)[order].reshape(T, B)

        behaviour_log_prob = torch.as_tensor(np.array([[r.log_prob[0] for r in row] for row in records],
                                                      dtype=np.float32), device=device)
        rewards = clip_rewards(torch.as_tensor(np.array([[r.reward[0] for r in row] for row in records],
                                                        dtype=np.float32), device=device), cfg.reward_clipping)
        done = np.array([[bool(r.terminated[0] or r.truncated[0]) for r in row] for row in records])
        with torch.no_grad():
            rewards = rewards + cfg.gamma * self._cut_off_values(batch, B)
            bootstrap = self._bootstrap_values(batch)
        # the discount after a sub-step: gamma where an env step ends (the next actor is the first policy key
        # again), 1 between the sub-steps of one env step, 0 where the episode ended
        step_ends = np.concatenate([full_step_ends(t.rollout) for t in batch], axis=1)  # (T, B): one env each
        discounts = torch.as_tensor(np.where(step_ends, cfg.gamma, 1.0) * (1.0 - done), dtype=torch.float32,
                                    device=device)
        targets = vtrace(behaviour_log_prob, target_log_prob.detach(), rewards, value.detach(), bootstrap, discounts,
                         cfg.vtrace_clip_rho_threshold, cfg.vtrace_clip_pg_rho_threshold)

        policy_cells = -(targets.pg_advantages * target_log_prob)
        value_cells = (targets.vs - value).pow(2)
        key_of_cell = np.empty((T, B), dtype=object)
        for key, where in cells.items():
            for s, b in where:
                key_of_cell[s, b] = key
        total = 0.0
        for key in cells:
            mask = torch.as_tensor(key_of_cell == key, device=device)
            policy_loss, value_loss = policy_cells[mask].mean(), value_cells[mask].mean()
            key_entropy = entropy[mask].mean()
            self._check_finite({"policy_loss": policy_loss, "value_loss": value_loss, "entropy": key_entropy})
            total = total + cfg.policy_loss_coef * policy_loss + cfg.value_loss_coef * value_loss \
                - cfg.entropy_coef * key_entropy
            self._record(ImpalaEvents.policy_loss, policy_loss.item(), key)
            self._record(ImpalaEvents.policy_entropy, key_entropy.item(), key)
            self._record(ImpalaEvents.critic_value, value[mask].mean().item(), key)
            self._record(ImpalaEvents.critic_value_loss, value_loss.item(), key)
        self._record(ImpalaEvents.importance_weight, targets.rhos.mean().item())
        if cfg.vtrace_clip_rho_threshold is not None:
            self._record(ImpalaEvents.clipped_rho_fraction,
                         (targets.rhos > cfg.vtrace_clip_rho_threshold).float().mean().item())

        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        for key, net in self.policy.networks.items():
            self._record(ImpalaEvents.policy_grad_norm, grad_norm(net.parameters()), _key_of(key))
        for key, net in self.critic.networks.items():
            self._record(ImpalaEvents.critic_grad_norm, grad_norm(net.parameters()), key)
        if cfg.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(list(self.model.parameters()), cfg.max_grad_norm)
        self.optimizer.step()
        # finite losses can still step into NaN weights: they must not reach the actors
        self._check_weights("the gradient step")

    def _values(self, key: StepKey, obs: dict[str, np.ndarray]) -> torch.Tensor:
        return self.critic.predict_values({key: _float({k: torch.as_tensor(v).to(self.device)
                                                         for k, v in obs.items()})})[key].reshape(-1)

    def _bootstrap_values(self, batch: list[Trajectory]) -> torch.Tensor:
        """V of the state after each trajectory's last sub-step, one critic pass per policy key."""
        out = torch.zeros(len(batch), device=self.device)
        by_key: dict[StepKey, list[int]] = {}
        for b, t in enumerate(batch):
            by_key.setdefault(t.rollout.next_key, []).append(b)
        for key, idx in by_key.items():
            names = batch[idx[0]].rollout.next_obs
            obs = {k: np.concatenate([batch[b].rollout.next_obs[k] for b in idx]) for k in names}
            out[idx] = self._values(key, obs)
        return out

    def _cut_off_values(self, batch: list[Trajectory], B: int) -> torch.Tensor:
        """(T, B): V of the last observation where a time limit cut an episode off at that sub-step (its return
        goes on beyond the cut), 0 elsewhere."""
        T = len(batch[0].rollout.records)
        out = torch.zeros(T, B, device=self.device)
        for b, t in enumerate(batch):
            for s, record in enumerate(t.rollout.records):
                for _, obs in record.bootstrap:
                    out[s, b] = self._values(t.rollout.first_key, {k: np.asarray(v)[None] for k, v in obs.items()})[0]
        return out


def _stack(dicts: list[dict[str, np.ndarray]], device: torch.device, as_float: bool = True) -> dict[str, torch.Tensor]:
    """Concatenate one-env dicts of (1, ...) arrays into (n, ...) tensors (float64 observations as float32)."""
    out = {}
    for k in dicts[0]:
        t = torch.from_numpy(np.ascontiguousarray(np.concatenate([d[k] for d in dicts])))
        if as_float and t.dtype == torch.float64:
            t = t.float()
        out[k] = t.to(device)
    return out
