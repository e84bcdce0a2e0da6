"""Evaluation of a policy by rollouts on a (vector) env."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from maze_lab.core.env.structured_env import ActorID
from maze_lab.core.log_stats.aggregation import StatKey
from maze_lab.core.log_stats.base_events import BaseEnvEvents
from maze_lab.core.utils.yielding import give_way
from maze_lab.train.trainers.common.model_selection import BestModelSelection
from maze_lab.train.trainers.common.rollout import check_finite_observations, env_agent_ids, separate_agent_keys


class RolloutEvaluator:
    """Runs ``n_episodes`` episodes with the policy and reports the mean episode reward.

    :param eval_env: a vector env (its statistics are written with its logging prefix, e.g. ``eval``).
    :param n_episodes: episodes per evaluation.
    :param model_selection: receives each evaluation's mean reward.
    :param deterministic: act with the most likely action instead of sampling.
    """

    def __init__(self, eval_env: Any, n_episodes: int = 8, model_selection: BestModelSelection | None = None,
                 deterministic: bool = False):
        if n_episodes < 1:
            raise ValueError(f"n_episodes must be >= 1, got {n_episodes}")
        self.eval_env = eval_env
        self.n_episodes = n_episodes
        self.model_selection = model_selection
        self.deterministic = deterministic
        self.last_stats: dict = {}

    def evaluate(self, policy: Any, epoch: int | None = None, seed: int | None = None) -> float:
        """Run the episodes; returns the mean episode reward (also written to the eval env's writers)."""
        env = self.eval_env
        if seed is not None:
            env.seed(seed)
        obs = env.reset()
        check_finite_observations(obs, env.actor_id().step_key, epoch, what="evaluation ")
        # the reset closed unfinished episodes of the last evaluation: they must not count now
        env.n_finished_episodes  # noqa: B018 - collects episodes from worker processes
        env.epoch_aggregator.reduce()
        finished = 0
        if hasattr(policy, "eval"):
            policy.eval()
        with torch.inference_mode():
            while finished < self.n_episodes:
                give_way()  # a background run in a kernel makes room for a running cell
                action = self._actions(policy, env, obs)
                obs, _, terminated, truncated, _ = env.step(action)
                check_finite_observations(obs, env.actor_id().step_key, epoch, what="evaluation ")
                finished += int((terminated | truncated).sum())
                if finished >= self.n_episodes:
                    break
        if hasattr(policy, "train"):
            policy.train()
        stats = env.write_epoch_stats(epoch)
        self.last_stats = stats
        reward = float(stats[StatKey(BaseEnvEvents.reward, "mean", None)])
        if self.model_selection is not None:
            self.model_selection.update(reward, epoch or 0)
        return reward

    def _actions(self, policy: Any, env: Any, obs: dict[str, Any]) -> dict[str, Any]:
        """The actions of all envs; for policy keys with separate agent networks each env's agent acts with its own
        network (the batch split by agent)."""
        actor = env.actor_id()
        agents = env_agent_ids(env) if actor.step_key in separate_agent_keys(policy) else None
        if agents is None or (agents == agents[0]).all():
            if agents is not None:
                actor = ActorID(actor.step_key, int(agents[0]))
            return policy.compute_action(obs, actor_id=actor, deterministic=self.deterministic)
        merged: dict[str, Any] = {}
        for agent in np.unique(agents):
            idx = np.flatnonzero(agents == agent)
            part = policy.compute_action({k: np.asarray(v)[idx] for k, v in obs.items()},
                                         actor_id=ActorID(actor.step_key, int(agent)), deterministic=self.deterministic)
            for name, value in part.items():
                value = np.asarray(value)
                if name not in merged:
                    merged[name] = np.empty((len(agents), *value.shape[1:]), dtype=value.dtype)
                merged[name][idx] = value
        return merged
