"""Rollouts of a policy on a vector env into per-sub-step records (policy key, obs, actions, log-probs...)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.utils.yielding import give_way


@dataclass
class SubStepRecord:
    """One agent action in every env of the vector env (all envs act with the same policy key)."""

    key: StepKey
    obs: dict[str, np.ndarray]
    actions: dict[str, np.ndarray]
    log_prob: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    bootstrap: list[tuple[int, dict[str, np.ndarray]]] = field(default_factory=list)
    """(env index, last observation) of episodes cut off by a time limit: their value is bootstrapped."""


@dataclass
class Rollout:
    """A sequence of sub-step records plus what is needed to bootstrap after the last one."""

    records: list[SubStepRecord]
    next_obs: dict[str, np.ndarray]
    next_key: StepKey
    first_key: StepKey
    n_envs: int

    @property
    def n_actions(self) -> int:
        """Agent actions (sub-steps) taken in all envs together."""
        return len(self.records) * self.n_envs


class RolloutGenerator:
    """Steps a vector env with a torch policy and records what the trainers need.

    :param env: a vector env (SequentialVectorEnv or SubprocVectorEnv).
    """

    def __init__(self, env: Any):
        self.env = env
        self._obs: dict[str, np.ndarray] | None = None
        self.first_key: StepKey | None = None
        self.env_steps = 0

    def reset(self, seed: int | None = None) -> None:
        """Reset the envs (env i with ``seed + i``)."""
        if seed is not None:
            self.env.seed(seed)
        self._obs = self.env.reset()
        self.first_key = self.env.actor_id().step_key

    def rollout(self, policy: Any, n_steps: int, epoch: int | None = None,
                sampler: Callable[[StepKey, int], dict[str, np.ndarray]] | None = None) -> Rollout:
        """Collect ``n_steps`` agent actions in every env, sampling from the policy.

        :param epoch: the epoch the rollout belongs to, named by the error on a NaN/inf observation.
        :param sampler: instead of the policy: ``sampler(policy key, n_envs)`` gives the stacked actions (e.g.
            uniform random actions to fill a replay buffer); the records' log-probabilities are then zero.
        """
        if self._obs is None:
            self.reset()
        env = self.env
        obs = self._obs
        records = []
        if n_steps:
            check_finite_observations(obs, env.actor_id().step_key, epoch)  # the first after a reset
        for _ in range(n_steps):
            give_way()  # a background run in a kernel makes room for a running cell
            key = env.actor_id().step_key
            if sampler is not None:
                actions, log_prob = sampler(key, env.n_envs), np.zeros(env.n_envs, np.float32)
            else:
                with torch.inference_mode():
                    out = policy.compute_substep_policy_output(policy.obs_to_torch(obs), key)
                    actions_t = out.prob_dist.sample()
                    log_prob = out.prob_dist.joint_log_prob(actions_t).cpu().numpy()
                actions = {k: v.cpu().numpy() for k, v in actions_t.items()}
            next_obs, reward, terminated, truncated, infos = env.step(actions)
            record = SubStepRecord(key, obs, actions, log_prob, reward, terminated, truncated)
            if truncated.any():
                for i in np.flatnonzero(truncated & ~terminated):
                    check_finite_observations(infos[i]["terminal_observation"], self.first_key, epoch,
                                              env_index=int(i), what="last observation (cut off by a time limit), ")
                    record.bootstrap.append((int(i), infos[i]["terminal_observation"]))
            records.append(record)
            # checked before the policy or the critic sees it: one np.isfinite per float key and step
            check_finite_observations(next_obs, env.actor_id().step_key, epoch)
            obs = next_obs
        self._obs = obs
        self.env_steps += n_steps * env.n_envs
        return Rollout(records, obs, env.actor_id().step_key, self.first_key, env.n_envs)


class NonFiniteObservationError(ValueError):
    """An env returned NaN or inf in an observation; the message names the key, the env index and the epoch."""


def check_finite_observations(obs: dict[str, np.ndarray], step_key: StepKey, epoch: int | None = None,
                              env_index: int | None = None, what: str = "") -> None:
    """Raise NonFiniteObservationError where a float observation holds NaN or inf.

    :param obs: observation key -> array, stacked over the envs of a vector env (or one env's, with ``env_index``).
    :param step_key: the policy key the observation is for.
    :param env_index: the env of an unstacked observation; None: the first axis is the env index.
    """
    for name, value in obs.items():
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
        if arr.dtype.kind not in "fc":  # integer and bool observations cannot hold NaN/inf
            continue
        finite = np.isfinite(arr)
        if finite.all():
            continue
        if env_index is None:
            bad_env = int(np.flatnonzero(~finite.reshape(len(arr), -1).all(axis=1))[0]) if arr.ndim else 0
            sample = arr[bad_env] if arr.ndim else arr
        else:
            bad_env, sample = env_index, arr
        bad_values = np.asarray(sample)[~np.isfinite(sample)]
        where = f"epoch {epoch}, " if epoch is not None else ""
        raise NonFiniteObservationError(
            f"{where}env {bad_env} of the vector env, policy key {step_key!r}: the {what}observation key "
            f"{name!r} holds {bad_values.size} non-finite value(s) ({bad_values[0]}); observations must be finite. "
            f"Fix the env (or its observation conversion), or clip/replace the value in a wrapper; training on it "
            f"would turn the losses into NaN"
        )
