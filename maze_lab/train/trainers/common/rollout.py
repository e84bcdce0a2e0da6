"""Rollouts of a policy on a vector env into per-sub-step records (policy key, obs, actions, log-probs...)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from maze_lab.core.env.structured_env import ActorID, StepKey
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
    agent_ids: np.ndarray | None = None
    """The acting agent (of policy key ``key``) in every env, (n_envs,) ints; None where not recorded (then the
    policy key's network is looked up by the key alone)."""
    step_end: np.ndarray | None = None
    """(n_envs,) bools: whether this sub-step completed a full env step in that env (the next actor already acted in
    it, or the episode ended), for envs with several agents on a policy key; None: a full step ends where the next
    policy key is the first one again (the rule for envs with one agent per policy key)."""


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
        counts = getattr(env, "agent_counts_dict", None) or {}
        self._track_full_steps = any(c != 1 for c in counts.values())
        """Several (or a varying number of) agents on a policy key: full env steps are told by the actors that
        acted in them (FullStepTracker's rule), not by the policy key alone."""
        self._acted: list[set] = []

    def reset(self, seed: int | None = None) -> None:
        """Reset the envs (env i with ``seed + i``)."""
        if seed is not None:
            self.env.seed(seed)
        self._obs = self.env.reset()
        self.first_key = self.env.actor_id().step_key
        self._acted = [set() for _ in range(self.env.n_envs)]

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
        track = self._track_full_steps
        if track and len(self._acted) != env.n_envs:
            self._acted = [set() for _ in range(env.n_envs)]
        key, agent_ids = env.actor_id().step_key, env_agent_ids(env)
        for _ in range(n_steps):
            give_way()  # a background run in a kernel makes room for a running cell
            if sampler is not None:
                actions, log_prob = sampler(key, env.n_envs), np.zeros(env.n_envs, np.float32)
            else:
                with torch.inference_mode():
                    out = substep_policy_output(policy, policy.obs_to_torch(obs), key, agent_ids)
                    actions_t = out.prob_dist.sample()
                    log_prob = out.prob_dist.joint_log_prob(actions_t).cpu().numpy()
                actions = {k: v.cpu().numpy() for k, v in actions_t.items()}
            next_obs, reward, terminated, truncated, infos = env.step(actions)
            record = SubStepRecord(key, obs, actions, log_prob, reward, terminated, truncated, agent_ids=agent_ids)
            if truncated.any():
                for i in np.flatnonzero(truncated & ~terminated):
                    check_finite_observations(infos[i]["terminal_observation"], self.first_key, epoch,
                                              env_index=int(i), what="last observation (cut off by a time limit), ")
                    record.bootstrap.append((int(i), infos[i]["terminal_observation"]))
            records.append(record)
            key, agent_ids = env.actor_id().step_key, env_agent_ids(env)  # the next actors
            if track:
                record.step_end = self._full_steps_ended(record, key, agent_ids)
            # checked before the policy or the critic sees it: one np.isfinite per float key and step
            check_finite_observations(next_obs, key, epoch)
            obs = next_obs
        self._obs = obs
        self.env_steps += n_steps * env.n_envs
        return Rollout(records, obs, env.actor_id().step_key, self.first_key, env.n_envs)

    def _full_steps_ended(self, record: SubStepRecord, next_key: StepKey, next_agents: np.ndarray | None) -> np.ndarray:
        """Per env: whether the sub-step of ``record`` completed a full env step (FullStepTracker's rule: the next
        actor already acted in this step, or the episode ended)."""
        done = record.terminated | record.truncated
        ended = np.empty(len(done), dtype=bool)
        for i, acted in enumerate(self._acted):
            acted.add((record.key, None if record.agent_ids is None else int(record.agent_ids[i])))
            nxt = (next_key, None if next_agents is None else int(next_agents[i]))
            ended[i] = bool(done[i]) or nxt in acted
            if ended[i]:
                acted.clear()
        return ended


def env_agent_ids(env: Any) -> np.ndarray | None:
    """The agent that acts next in every env of a vector env ((n_envs,) ints), or None where the vector env cannot
    tell (one without ``agent_ids``)."""
    getter = getattr(env, "agent_ids", None)
    return None if getter is None else getter()


def separate_agent_keys(policy: Any) -> set:
    """The policy keys whose agents act with a network each (``substeps_with_separate_agent_nets``)."""
    return getattr(policy, "substeps_with_separate_agent_nets", None) or set()


def substep_policy_output(policy: Any, obs: dict[str, torch.Tensor], key: StepKey,
                          agent_ids: np.ndarray | None) -> Any:
    """The policy's output for a batch of observations of policy key ``key``, each by the network of its agent.

    For keys without separate agent networks (or without recorded agents) this is one
    ``compute_substep_policy_output(obs, key)``. For keys in ``substeps_with_separate_agent_nets`` the batch is
    split by agent id, each part goes through its agent's network (``ActorID(key, agent)``) and the logits (and
    embeddings) are merged back in batch order, so that the distribution, log-probabilities and entropies are those
    of each sample's own network (with gradients to each of them).
    """
    if agent_ids is None or key not in separate_agent_keys(policy):
        return policy.compute_substep_policy_output(obs, key)
    agent_ids = np.asarray(agent_ids)
    agents = np.unique(agent_ids)
    if len(agents) == 1:
        return policy.compute_substep_policy_output(obs, ActorID(key, int(agents[0])))
    from maze_lab.agent.torch_policy import PolicySubStepOutput

    device = next(iter(obs.values())).device
    outs, positions = [], []
    for agent in agents:
        idx = torch.as_tensor(np.flatnonzero(agent_ids == agent), device=device)
        outs.append(policy.compute_substep_policy_output({k: v[idx] for k, v in obs.items()},
                                                         ActorID(key, int(agent))))
        positions.append(idx)
    order = torch.argsort(torch.cat(positions))  # back to batch order

    def merged(dicts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return {name: torch.cat([d[name] for d in dicts])[order] for name in dicts[0]}

    logits = merged([o.action_logits for o in outs])
    embeddings = None if outs[0].embedding_logits is None else merged([o.embedding_logits for o in outs])
    return PolicySubStepOutput(action_logits=logits,
                               prob_dist=policy.logits_dict_to_distribution(logits),
                               embedding_logits=embeddings, actor_id=ActorID(key, int(agents[0])))


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
