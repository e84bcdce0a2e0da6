"""A lean SAC loop in bare PyTorch and raw Gymnasium, written for ``sac_pendulum.py``: the eager-PyTorch ceiling for
its settings, measured in the same run as maze-lab and Stable-Baselines3.

The settings are the benchmark's (the RL Zoo's Pendulum-v1 entry): one env; a policy and two Q networks of 256x256
ReLU (the Q networks see the observation and the action in [-1, 1] side by side), a tanh-squashed Gaussian policy
whose log-probabilities are taken in [-1, 1] (target entropy -1, as SB3), alpha tuned from 1.0, batch 256, 100
uniformly random env steps first, then one env step and one gradient step at a time, tau 0.005 every step, gamma
0.99, Adam with lr 1e-3 for the policy, the Q networks and alpha, no gradient clipping. The replay buffer is a set of
preallocated arrays; the Gaussian's log-density is written out (no ``torch.distributions``). The evaluations are the
benchmark's own (its ``EvalClock``), at the same env steps.

Nothing here is shared with maze-lab: the loop is what a user would write by hand for this one task, with no
statistics, checkpoints, event logs or checks.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

_LOG_2PI = math.log(2 * math.pi)


def _mlp(n_in: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, n_out))


class _Actor(nn.Module):
    def __init__(self, n_obs: int, n_act: int):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_obs, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
        self.mean = nn.Linear(256, n_act)
        self.log_std = nn.Linear(256, n_act)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A sampled action in [-1, 1] and its log-probability there."""
        h = self.body(obs)
        mean, log_std = self.mean(h), self.log_std(h).clamp(-20.0, 2.0)
        noise = torch.randn_like(mean)
        pre = mean + noise * log_std.exp()
        action = torch.tanh(pre)
        log_prob = (-0.5 * noise.pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)
        log_prob = log_prob - torch.log(1.0 - action.pow(2) + 1e-6).sum(-1)
        return action, log_prob

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mean(self.body(obs)))


def run_bare_sac(seed: int, max_steps: int, clock: Any, random_steps: int = 100, eval_every: int = 1_000,
                 lr: float = 1e-3, batch_size: int = 256, tau: float = 0.005, gamma: float = 0.99) -> Any:
    """Train until ``clock`` (the benchmark's EvalClock, started here) has seen the target or the cap is reached;
    returns ``clock.result()``."""
    import time

    import gymnasium as gym

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    env = gym.make("Pendulum-v1")
    n_obs, n_act = env.observation_space.shape[0], env.action_space.shape[0]
    scale = float(env.action_space.high[0])
    actor = _Actor(n_obs, n_act)
    q1, q2 = _mlp(n_obs + n_act, 1), _mlp(n_obs + n_act, 1)
    q1_t, q2_t = _mlp(n_obs + n_act, 1), _mlp(n_obs + n_act, 1)
    q1_t.load_state_dict(q1.state_dict())
    q2_t.load_state_dict(q2.state_dict())
    q_params = [*q1.parameters(), *q2.parameters()]
    target_params = [*q1_t.parameters(), *q2_t.parameters()]
    log_alpha = torch.zeros(1, requires_grad=True)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=lr)
    q_opt = torch.optim.Adam(q_params, lr=lr)
    alpha_opt = torch.optim.Adam([log_alpha], lr=lr)
    target_entropy = -float(n_act)

    cap = random_steps + max_steps
    obs_buf = np.zeros((cap, n_obs), np.float32)
    next_buf = np.zeros((cap, n_obs), np.float32)
    act_buf = np.zeros((cap, n_act), np.float32)  # in [-1, 1]
    rew_buf = np.zeros(cap, np.float32)
    term_buf = np.zeros(cap, np.float32)

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return scale * actor.greedy(torch.as_tensor(obs, dtype=torch.float32)).numpy()

    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    clock.start = time.perf_counter()
    for step in range(cap):
        if step < random_steps:
            action = env.action_space.sample() / scale
        else:
            with torch.no_grad():
                action = actor(torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0))[0][0].numpy()
        next_obs, reward, terminated, truncated, _ = env.step(scale * action)
        obs_buf[step], act_buf[step], rew_buf[step] = obs, action, reward
        next_buf[step], term_buf[step] = next_obs, float(terminated)
        obs = env.reset()[0] if terminated or truncated else next_obs
        steps = step + 1
        if steps <= random_steps:
            continue

        idx = rng.integers(0, steps, size=batch_size)
        b_obs, b_next = torch.from_numpy(obs_buf[idx]), torch.from_numpy(next_buf[idx])
        b_act, b_rew, b_term = torch.from_numpy(act_buf[idx]), torch.from_numpy(rew_buf[idx]), \
            torch.from_numpy(term_buf[idx])

        new_act, log_prob = actor(b_obs)  # alpha first, from the current policy's samples
        alpha_loss = -(log_alpha * (log_prob.detach() + target_entropy)).mean()
        alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        alpha_opt.step()
        alpha = log_alpha.detach().exp()

        with torch.no_grad():
            next_act, next_log_prob = actor(b_next)
            pair = torch.cat([b_next, next_act], 1)
            next_q = torch.min(q1_t(pair), q2_t(pair)).squeeze(1) - alpha * next_log_prob
            target = b_rew + gamma * (1.0 - b_term) * next_q
        pair = torch.cat([b_obs, b_act], 1)
        q_loss = 0.5 * ((q1(pair).squeeze(1) - target).pow(2).mean() + (q2(pair).squeeze(1) - target).pow(2).mean())
        q_opt.zero_grad(set_to_none=True)
        q_loss.backward()
        q_opt.step()

        pair = torch.cat([b_obs, new_act], 1)
        actor_loss = (alpha * log_prob - torch.min(q1(pair), q2(pair)).squeeze(1)).mean()
        actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        actor_opt.step()

        with torch.no_grad():
            for p, t in zip(q_params, target_params, strict=True):
                t.lerp_(p, tau)

        if (steps - random_steps) % eval_every == 0:
            clock.evaluate(steps, act)
            if clock.solved is not None:
                break
    env.close()
    return clock.result()
