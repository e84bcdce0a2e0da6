"""A lean PPO loop in bare PyTorch and raw Gymnasium, written for ``ppo_cartpole.py``: the eager-PyTorch ceiling for
its settings, measured in the same run as maze-lab and Stable-Baselines3.

The settings are the benchmark's: CartPole-v1 in a ``SyncVectorEnv`` of 8 (same-step autoreset, so that a truncated
episode bootstraps from its final observation, as maze-lab and SB3 do), 32 steps per rollout, GAE (gamma 0.98,
lambda 0.8), 20 full-batch (256) Adam steps per rollout (eps 1e-5) with lr 1e-3 and clip range 0.2 both decayed
linearly to 0 over the budget, advantages normalised per batch, value loss coefficient 0.5, no entropy bonus,
gradient norm clipped at 0.5 (``torch.nn.utils.clip_grad_norm_``), two 64x64 tanh MLPs (policy and value). Actions
are sampled from the log-softmax with ``torch.multinomial`` (no ``torch.distributions``); one torch thread (the
caller sets it). Every 10 rollouts the greedy policy plays 8 evaluation episodes, not counted in the time.

Nothing here is shared with maze-lab: the loop is what a user would write by hand for this one task, with no
statistics, checkpoints, event logs or checks.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn


def _mlp(n_in: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, n_out))


def evaluate_cartpole(act: Callable[[np.ndarray], int], seed: int, episodes: int = 8) -> float:
    """Mean reward of ``episodes`` episodes of ``act`` (an observation -> an action) on CartPole-v1, reset with the
    seeds ``seed + 1_000_000 + i``: the evaluation of the SB3 and the bare-PyTorch columns of ``ppo_cartpole``."""
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    totals = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + 1_000_000 + ep)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            done = terminated or truncated
        totals.append(total)
    env.close()
    return float(np.mean(totals))


def _greedy(policy: nn.Module) -> Callable[[np.ndarray], int]:
    def act(obs: np.ndarray) -> int:
        with torch.no_grad():
            return int(policy(torch.as_tensor(obs, dtype=torch.float32)).argmax())

    return act


def run_bare(seed: int, budget: int, target: float, n_envs: int = 8, n_steps: int = 32, n_epochs: int = 20,
             gamma: float = 0.98, lam: float = 0.8, lr: float = 1e-3, clip: float = 0.2, vf_coef: float = 0.5,
             max_grad_norm: float = 0.5, eval_every: int = 10) -> tuple[float, float | None, int | None]:
    """(env steps per second of training, seconds to the target or None, env steps to the target or None)."""
    import gymnasium as gym

    torch.manual_seed(seed)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n_envs,
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    obs_np, _ = envs.reset(seed=seed)
    n_obs, n_act = envs.single_observation_space.shape[0], int(envs.single_action_space.n)
    policy, value = _mlp(n_obs, n_act), _mlp(n_obs, 1)
    params = [*policy.parameters(), *value.parameters()]
    optimizer = torch.optim.Adam(params, lr=lr, eps=1e-5)
    n_updates = budget // (n_envs * n_steps)

    obs_buf = torch.zeros(n_steps, n_envs, n_obs)
    act_buf = torch.zeros(n_steps, n_envs, dtype=torch.long)
    logp_buf = torch.zeros(n_steps, n_envs)
    rew_buf = torch.zeros(n_steps, n_envs)
    done_buf = torch.zeros(n_steps, n_envs)
    val_buf = torch.zeros(n_steps, n_envs)

    env_steps, eval_time, solved_s, solved_steps = 0, 0.0, None, None
    start = time.perf_counter()
    for update in range(n_updates):
        frac = 1.0 - update / n_updates
        for group in optimizer.param_groups:
            group["lr"] = lr * frac
        clip_now = clip * frac

        obs = torch.as_tensor(obs_np, dtype=torch.float32)
        for t in range(n_steps):
            with torch.no_grad():
                log_probs = torch.log_softmax(policy(obs), dim=-1)
                action = torch.multinomial(log_probs.exp(), 1).squeeze(1)
                val_buf[t] = value(obs).squeeze(1)
            obs_buf[t] = obs
            act_buf[t] = action
            logp_buf[t] = log_probs.gather(1, action.unsqueeze(1)).squeeze(1)
            obs_np, reward, terminated, truncated, info = envs.step(action.numpy())
            reward = torch.as_tensor(reward, dtype=torch.float32)
            cut = truncated & ~terminated
            if cut.any():  # a time limit is no failure: bootstrap from the final observation
                final = torch.as_tensor(np.stack([info["final_obs"][i] for i in np.flatnonzero(cut)]),
                                        dtype=torch.float32)
                with torch.no_grad():
                    reward[torch.as_tensor(cut)] += gamma * value(final).squeeze(1)
            rew_buf[t] = reward
            done_buf[t] = torch.as_tensor(terminated | truncated, dtype=torch.float32)
            obs = torch.as_tensor(obs_np, dtype=torch.float32)
        env_steps += n_envs * n_steps

        with torch.no_grad():  # generalised advantage estimation
            next_value = value(obs).squeeze(1)
            adv = torch.zeros(n_steps, n_envs)
            last = torch.zeros(n_envs)
            for t in reversed(range(n_steps)):
                following = next_value if t == n_steps - 1 else val_buf[t + 1]
                not_done = 1.0 - done_buf[t]
                delta = rew_buf[t] + gamma * following * not_done - val_buf[t]
                last = delta + gamma * lam * not_done * last
                adv[t] = last
            returns = (adv + val_buf).reshape(-1)
        b_obs, b_act, b_logp = obs_buf.reshape(-1, n_obs), act_buf.reshape(-1), logp_buf.reshape(-1)
        b_adv = adv.reshape(-1)
        b_adv = (b_adv - b_adv.mean()) / (b_adv.std() + 1e-8)
        for _ in range(n_epochs):  # full batch: one Adam step per epoch
            log_prob = torch.log_softmax(policy(b_obs), dim=-1).gather(1, b_act.unsqueeze(1)).squeeze(1)
            ratio = (log_prob - b_logp).exp()
            policy_loss = -torch.min(ratio * b_adv, ratio.clamp(1 - clip_now, 1 + clip_now) * b_adv).mean()
            value_loss = (returns - value(b_obs).squeeze(1)).pow(2).mean()
            loss = policy_loss + vf_coef * value_loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(params, max_grad_norm)
            optimizer.step()

        if (update + 1) % eval_every == 0:
            t0 = time.perf_counter()
            reward_mean = evaluate_cartpole(_greedy(policy), seed)
            eval_time += time.perf_counter() - t0
            if reward_mean >= target:
                solved_s, solved_steps = time.perf_counter() - start - eval_time, env_steps
                break
    train_time = time.perf_counter() - start - eval_time
    envs.close()
    return env_steps / train_time, solved_s, solved_steps
