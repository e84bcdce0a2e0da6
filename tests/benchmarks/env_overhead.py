"""Random-policy steps per second on CartPole-v1: raw Gymnasium vs GymMazeEnv vs the full logging stack.

Run: python tests/benchmarks/env_overhead.py [--steps N] [--repeats R]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np

from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.core.wrappers.monitoring_wrapper import MazeEnvMonitoringWrapper


def run_raw(n_steps: int, seed: int) -> float:
    """Steps per second of gymnasium.make('CartPole-v1') with random actions."""
    env = gym.make("CartPole-v1")
    env.reset(seed=seed)
    actions = np.random.default_rng(seed).integers(0, 2, size=n_steps).tolist()
    start = time.perf_counter()
    for a in actions:
        _, _, terminated, truncated, _ = env.step(a)
        if terminated or truncated:
            env.reset()
    return n_steps / (time.perf_counter() - start)


def run_maze(make: Callable[[], object], n_steps: int, seed: int, epoch_every: int = 0) -> float:
    """Steps per second of a maze-lab env stack with the same random actions wrapped in dicts."""
    env = make()
    env.reset(seed=seed)
    actions = [{"action": a} for a in np.random.default_rng(seed).integers(0, 2, size=n_steps).tolist()]
    start = time.perf_counter()
    for i, a in enumerate(actions):
        _, _, terminated, truncated, _ = env.step(a)
        if terminated or truncated:
            env.reset()
        if epoch_every and (i + 1) % epoch_every == 0:
            env.write_epoch_stats()
    return n_steps / (time.perf_counter() - start)


def make_stack() -> LogStatsWrapper:
    """GymMazeEnv + MazeEnvMonitoringWrapper (observations, actions, rewards) + LogStatsWrapper."""
    env = MazeEnvMonitoringWrapper.wrap(GymMazeEnv("CartPole-v1", render_mode=None))
    return LogStatsWrapper.wrap(env, logging_prefix="train")


def main() -> None:
    """Measure and print the table and the bench line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    results: dict[str, list[float]] = {"raw Gymnasium": [], "GymMazeEnv": [], "GymMazeEnv + monitoring + LogStats": []}
    for r in range(args.repeats):  # interleave so that machine noise hits all variants alike
        results["raw Gymnasium"].append(run_raw(args.steps, r))
        results["GymMazeEnv"].append(run_maze(lambda: GymMazeEnv("CartPole-v1", render_mode=None), args.steps, r))
        results["GymMazeEnv + monitoring + LogStats"].append(run_maze(make_stack, args.steps, r, epoch_every=10_000))

    best = {k: max(v) for k, v in results.items()}
    raw = best["raw Gymnasium"]
    print(f"CartPole-v1, random actions, {args.steps} steps, best of {args.repeats}")
    print(f"{'variant':<40}{'steps/s':>12}{'vs raw':>10}")
    for name, sps in best.items():
        print(f"{name:<40}{sps:>12,.0f}{sps / raw:>10.2f}")
    stack = best["GymMazeEnv + monitoring + LogStats"] / raw
    gme = best["GymMazeEnv"] / raw
    print(f"bench: env_overhead stack_vs_raw={stack:.3f} gym_maze_env_vs_raw={gme:.3f}")


if __name__ == "__main__":
    main()
