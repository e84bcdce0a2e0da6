"""Soft Actor-Critic (and SAC from demonstrations) for envs with one policy key and Box or Discrete actions.

Each update collects a few env steps with the current policy into the replay buffer, then takes gradient steps on
sampled batches: the Q networks regress on the soft Bellman target of the target networks, the policy maximises
``min Q - alpha * log pi``, alpha follows the target entropy, and the target networks trail the online ones.
Discrete action heads use the exact expectations over their options (Christodoulou, 2019).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from maze_lab.core.log_stats.writers import LogStatsWriter
from maze_lab.core.utils.yielding import give_way
from maze_lab.train.trainers.common.base import Trainer, adam, grad_norm
from maze_lab.train.trainers.common.model_selection import BestModelSelection
from maze_lab.train.trainers.common.rollout import RolloutGenerator
from maze_lab.train.trainers.sac.config import SACAlgorithmConfig
from maze_lab.train.trainers.sac.events import SACEvents
from maze_lab.train.trainers.sac.replay_buffer import ReplayBuffer, TransitionBatch, load_demonstrations

__all__ = ["SAC", "SACAlgorithmConfig"]


class SAC(Trainer):
    """Soft Actor-Critic.

    :param algorithm_config: the algorithm parameters.
    :param model: a TorchActorCritic whose critic is a state-action critic (``critic=state_action``).
    :param env: the training vector env (one policy key).
    :param evaluator: run after each epoch; it keeps the best weights.
    :param model_selection: keeps the best weights (default: the evaluator's, else a new one).
    :param writers: writers of the trainer statistics (default: the training env's writers).
    :param checkpoint_dir: where ``state_dict_last.pt`` and ``state_dict_best.pt`` are written; None for no files.
    :param allowed_classes: classes (or dotted paths) besides maze-lab's own that may be rebuilt from the
        demonstration files.
    """

    events = SACEvents

    def __init__(self, algorithm_config: SACAlgorithmConfig, model: Any, env: Any, evaluator: Any = None,
                 model_selection: BestModelSelection | None = None, writers: list[LogStatsWriter] | None = None,
                 checkpoint_dir: str | Path | None = None, allowed_classes: tuple = ()):
        self.env = env
        self.rollout_generator = RolloutGenerator(env)
        self.key, self.action_space = _one_policy_key(env)
        self.discrete = _discrete_heads(self.action_space)
        critic = getattr(model, "critic", None)
        if critic is None or not hasattr(critic, "predict_next_q_values"):
            raise ValueError(f"SAC needs a state-action critic (Q networks); the model's critic is "
                             f"{type(critic).__name__}. Compose the model with critic=state_action (a "
                             "SharedStateActionCriticComposer) instead of a state-value critic")
        super().__init__(algorithm_config, model, evaluator, model_selection, writers, checkpoint_dir)
        cfg = self.config
        self.policy, self.critic = model.policy, model.critic
        self.optimizer = adam(list(self.policy.parameters()), cfg.lr, eps=1e-8)
        self._critic_params = list(self.critic.parameters())
        self.critic_optimizer = adam(self._critic_params, cfg.lr, eps=1e-8)
        self.log_alpha = torch.tensor(math.log(max(cfg.entropy_coef, 1e-8)), device=self.device,
                                      requires_grad=cfg.entropy_tuning)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.entropy_coef_lr)
        self.target_entropy = _target_entropy(self.action_space, self.discrete, cfg.target_entropy_multiplier)
        self.replay_buffer = ReplayBuffer(cfg.replay_buffer_size, seed=cfg.seed)
        self.allowed_classes = tuple(allowed_classes)
        self.demonstration_transitions = 0
        self._gradient_steps = 0

    # ---- filling the buffer ----------------------------------------------------------------------------------
    def _before_training(self, has_target: bool) -> None:
        if self.rollout_generator._obs is None:
            self.rollout_generator.reset(self.config.seed)
        if self.config.demonstrations and not self.demonstration_transitions:
            self.demonstration_transitions = load_demonstrations(self.replay_buffer, self.config.demonstrations,
                                                                 self.allowed_classes)
        # what is missing: uniformly random actions at the start, the resumed policy's own after a checkpoint
        sampler = _uniform_sampler(self.action_space, self.config.seed) if self.epoch == 0 else None
        while len(self.replay_buffer) < self.config.initial_buffer_size:
            rollout = self._rollout(1, sampler)
            self.replay_buffer.add_rollout(rollout)
            self.env_steps += rollout.n_actions

    # ---- the epoch ---------------------------------------------------------------------------------------------
    def _epoch_updates(self) -> Iterator[None]:
        for _ in range(self.config.epoch_length):
            yield
            self._one_update()

    def _one_update(self) -> None:
        cfg = self.config
        t0 = time.perf_counter()
        rollout = self._rollout(cfg.n_rollout_steps)
        self.replay_buffer.add_rollout(rollout)
        self.env_steps += rollout.n_actions
        t1 = time.perf_counter()
        self._new_update()
        for _ in range(cfg.num_batches_per_iter):
            give_way()  # a background run in a kernel makes room for a running cell
            self._learn(self.replay_buffer.sample(cfg.batch_size, self.device))
        self.updates += 1
        self._record(SACEvents.learning_rate, cfg.lr)
        self._record(SACEvents.buffer_size, len(self.replay_buffer))
        self._record(SACEvents.time_rollout, t1 - t0)
        self._record(SACEvents.time_update, time.perf_counter() - t1)

    # ---- one gradient step -----------------------------------------------------------------------------------------
    def _learn(self, batch: TransitionBatch) -> None:
        cfg, key = self.config, self.key
        obs, next_obs, actions = batch.obs, batch.next_obs, batch.action
        not_done = 1.0 - batch.terminated
        alpha = self.log_alpha.detach().exp()

        # 1. the soft Bellman target: r + gamma * (min of the target Qs - alpha * log pi) at the next state
        with torch.no_grad():
            next_dist = self.policy.compute_substep_policy_output(next_obs, key).prob_dist
            if self.discrete:
                q_next = self.critic.predict_next_q_values({key: next_obs}, {key: {}}, gather_output=False)[key]
                targets = {}
                for head in self.action_space.spaces:
                    probs, log_probs = _probs(next_dist[head])
                    q_min = torch.min(torch.stack([q[head] for q in q_next]), dim=0).values
                    next_value = (probs * (q_min - alpha * log_probs)).sum(-1)
                    targets[head] = batch.reward + cfg.gamma * not_done * next_value
            else:
                next_actions, next_log_prob = next_dist.rsample_with_log_prob()
                q_next = self.critic.predict_next_q_values({key: next_obs}, {key: next_actions})[key]
                next_value = torch.min(torch.stack(q_next), dim=0).values - alpha * next_log_prob
                target = batch.reward + cfg.gamma * not_done * next_value

        # 2. the Q networks regress on it
        q_taken = self.critic.predict_q_values({key: obs}, {key: actions})[key]
        if self.discrete:
            critic_loss = sum(F.mse_loss(q[head], targets[head]) for q in q_taken for head in targets)
            q_mean = torch.stack([q_taken[0][h] for h in targets]).mean()
        else:
            critic_loss = sum(F.mse_loss(q, target) for q in q_taken)
            q_mean = q_taken[0].mean()
        self._check_finite({"critic_value_loss": critic_loss})
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        critic_norm = self._clip(self._critic_params)
        self.critic_optimizer.step()

        # 3. the policy: maximise min Q - alpha * log pi (the Q networks are held fixed for this step)
        dist = self.policy.compute_substep_policy_output(obs, key).prob_dist
        with _frozen(self._critic_params):
            if self.discrete:
                q_all = self.critic.predict_q_values({key: obs}, {key: {}}, gather_output=False)[key]
                policy_loss, entropy = 0.0, 0.0
                for head in self.action_space.spaces:
                    probs, log_probs = _probs(dist[head])
                    q_min = torch.min(torch.stack([q[head] for q in q_all]), dim=0).values
                    policy_loss = policy_loss + (probs * (alpha * log_probs - q_min)).sum(-1).mean()
                    entropy = entropy - (probs * log_probs).sum(-1)
            else:
                new_actions, log_prob = dist.rsample_with_log_prob()
                q_new = self.critic.predict_q_values({key: obs}, {key: new_actions})[key]
                policy_loss = (alpha * log_prob - torch.min(torch.stack(q_new), dim=0).values).mean()
                entropy = -log_prob
        self._check_finite({"policy_loss": policy_loss})
        self.optimizer.zero_grad(set_to_none=True)
        policy_loss.backward()
        policy_norm = self._clip(self.policy.parameters())
        self.optimizer.step()

        # 4. alpha: raised while the entropy is below its target, lowered while above
        entropy = entropy.detach()
        if cfg.entropy_tuning:
            alpha_loss = (self.log_alpha * (entropy - self.target_entropy)).mean()
            self.alpha_optimizer.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_optimizer.step()
            self._record(SACEvents.entropy_coef_loss, alpha_loss.item())

        # 5. the target networks trail the online ones
        self._gradient_steps += 1
        if self._gradient_steps % cfg.target_update_interval == 0:
            self.critic.update_target_weights(cfg.tau)

        self._record(SACEvents.entropy_coef, alpha.item())
        self._record(SACEvents.policy_loss, policy_loss.item(), key)
        self._record(SACEvents.policy_entropy, entropy.mean().item(), key)
        self._record(SACEvents.policy_grad_norm, policy_norm, key)
        self._record(SACEvents.critic_value, q_mean.item(), key)
        self._record(SACEvents.critic_value_loss, critic_loss.item(), key)
        self._record(SACEvents.critic_grad_norm, critic_norm, key)

    def _clip(self, params: list[torch.nn.Parameter]) -> float:
        """The gradient norm (before clipping), clipped to ``max_grad_norm`` where that is set."""
        params = list(params)
        norm = grad_norm(params)
        if self.config.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm)
        return norm

    # ---- checkpoints -----------------------------------------------------------------------------------------------
    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer, "critic_optimizer": self.critic_optimizer,
                "alpha_optimizer": self.alpha_optimizer}

    def _extra_state(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"log_alpha": self.log_alpha.detach().cpu(),
                                 "demonstration_transitions": self.demonstration_transitions}
        if self.config.checkpoint_replay_buffer:
            extra["replay_buffer"] = self.replay_buffer.state_dict()
        return extra

    def _load_extra_state(self, state: dict[str, Any], weights_only: bool) -> None:
        if weights_only:
            return
        if "log_alpha" in state:
            with torch.no_grad():
                self.log_alpha.copy_(torch.as_tensor(state["log_alpha"]))
        if "replay_buffer" in state:
            self.replay_buffer.load_state_dict(state["replay_buffer"])
            # the demonstrations are in the restored buffer already: not loaded a second time
            self.demonstration_transitions = int(state.get("demonstration_transitions", 0))


@contextmanager
def _frozen(params: list[torch.nn.Parameter]) -> Iterator[None]:
    """No gradients for ``params`` inside (the policy loss differentiates through the Q networks, not into them)."""
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


def _one_policy_key(env: Any) -> tuple[Any, gym.spaces.Dict]:
    spaces = dict(env.action_spaces_dict)
    if len(spaces) != 1:
        raise ValueError(f"SAC in maze-lab trains envs with one policy key; this env has {len(spaces)} "
                         f"({list(spaces)}). Train structured envs with PPO or A2C")
    key, space = next(iter(spaces.items()))
    return key, space


def _discrete_heads(space: gym.spaces.Dict) -> bool:
    kinds = {type(s) for s in space.spaces.values()}
    if kinds <= {gym.spaces.Discrete}:
        return True
    if kinds <= {gym.spaces.Box}:
        return False
    listed = ", ".join(f"{k}: {type(s).__name__}" for k, s in space.spaces.items())
    raise ValueError(f"SAC trains either all-Box or all-Discrete action heads; this env has {listed}. Split the "
                     "heads into Box and Discrete ones, or train with PPO")


def _target_entropy(space: gym.spaces.Dict, discrete: bool, multiplier: float) -> float:
    """Discrete heads: 98 % of the uniform distribution's entropy, summed. Box heads: the usual -dim(A) for actions
    scaled to [-1, 1], times the multiplier, in the env's own action units (the policy's log-probabilities are):
    a bounded dimension adds log((high - low) / 2), as the entropy of an action rescaled by that factor does."""
    if discrete:
        return multiplier * sum(0.98 * math.log(int(s.n)) for s in space.spaces.values())
    target = 0.0
    for s in space.spaces.values():
        half_range = (np.asarray(s.high, np.float64) - np.asarray(s.low, np.float64)) / 2.0
        target += float(np.sum(np.where(np.isfinite(half_range), np.log(half_range), 0.0))) \
            - multiplier * float(np.prod(s.shape))
    return target


def _probs(dist: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Probabilities and log-probabilities of a categorical head; masked options (log 0) weigh zero."""
    log_probs = dist.log_probs.clamp(min=-1e8)
    return log_probs.exp(), log_probs


def _uniform_sampler(space: gym.spaces.Dict, seed: int | None) -> Any:
    """Uniformly random actions for every env, as a rollout sampler (the seeded initial sampling policy)."""
    space = gym.spaces.Dict(dict(space.spaces))  # an own copy: seeding it touches nothing of the env's
    space.seed(seed)

    def sample(key: Any, n_envs: int) -> dict[str, np.ndarray]:
        draws = [space.sample() for _ in range(n_envs)]
        return {k: np.stack([d[k] for d in draws]) for k in space.spaces}

    return sample
