"""Sub-steps per second of the Cutting-2D envs: bare core env vs flat, structured and masked env stacks.

Every variant replays the same greedy episode of the simple problem (raw piece 4x3, six orders in turn,
180 steps), recorded once, so that all do identical work and no policy time is measured. A "stack" is
the env under MazeEnvMonitoringWrapper + LogStatsWrapper, with epoch statistics reduced every 20 episodes.
Structured envs take two sub-steps per flat step; the table counts sub-steps (agent decisions).
Times are process CPU times (time.process_time), which other processes on a shared machine disturb far
less than wall-clock times; every variant is measured in turn, repeatedly, and the best run counts.

Run: python tests/benchmarks/cutting2d_steps.py [--episodes N] [--repeats R]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.core.wrappers.monitoring_wrapper import MazeEnvMonitoringWrapper
from maze_lab.examples.cutting2d import (
    SIMPLE_PROBLEM,
    Cutting2DCoreEnvironment,
    Cutting2DMazeAction,
    GreedyPolicy,
    InventoryEvents,
    make_masked_env,
    make_struct_env,
    maze_env_factory,
)


def greedy_episode() -> tuple[list[dict[str, int]], int]:
    """Flat actions of one greedy episode of the simple problem and the raw pieces it used."""
    env = LogStatsWrapper(maze_env_factory(**SIMPLE_PROBLEM))
    policy = GreedyPolicy()
    obs, _ = env.reset(seed=0)
    actions = []
    while True:
        action = policy.compute_action(obs, env.actor_id(), env=env)
        actions.append(action)
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    env.reset()  # closes the episode so that its statistics exist
    raw_pieces = env.get_stats_value(InventoryEvents.piece_replenished, "episode")
    return actions, int(raw_pieces)


def run_core(actions: list[dict[str, int]], episodes: int) -> float:
    """Steps per second of the bare core env fed with MazeActions."""
    env = Cutting2DCoreEnvironment(**SIMPLE_PROBLEM)
    maze_actions = [Cutting2DMazeAction(a["piece_idx"], bool(a["cut_rotation"]), bool(a["cut_order"]))
                    for a in actions]
    start = time.process_time()
    for _ in range(episodes):
        env.reset()
        for ma in maze_actions:
            env.step(ma)
    return episodes * len(maze_actions) / (time.process_time() - start)


def run_env(make: Callable[[], Any], sub_actions: list[dict[str, int]], episodes: int, epoch_every: int = 20) -> float:
    """Sub-steps per second of an env (stack) replaying the given sub-step actions each episode."""
    env = make()
    log_stats = env if isinstance(env, LogStatsWrapper) else None
    start = time.process_time()
    for ep in range(episodes):
        env.reset()
        for a in sub_actions:
            env.step(a)
        if log_stats is not None and (ep + 1) % epoch_every == 0:
            log_stats.write_epoch_stats()
    return episodes * len(sub_actions) / (time.process_time() - start)


def stack(make: Callable[[], Any]) -> Callable[[], LogStatsWrapper]:
    """The env under the full statistics stack."""
    return lambda: LogStatsWrapper(MazeEnvMonitoringWrapper(make()), logging_prefix="train")


def main() -> None:
    """Measure and print the table and the bench line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=30, help="episodes (of 180 flat steps) per measurement")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    flat_actions, raw_pieces = greedy_episode()
    struct_actions = []
    for a in flat_actions:
        struct_actions.append({"piece_idx": a["piece_idx"]})
        struct_actions.append({"cut_rotation": a["cut_rotation"], "cut_order": a["cut_order"]})

    def flat() -> Any:
        return maze_env_factory(**SIMPLE_PROBLEM)

    def struct() -> Any:
        return make_struct_env(**SIMPLE_PROBLEM)

    def masked() -> Any:
        return make_masked_env(**SIMPLE_PROBLEM)

    variants: dict[str, Callable[[], float]] = {
        "core env (MazeActions)": lambda: run_core(flat_actions, args.episodes),
        "flat MazeEnv": lambda: run_env(flat, flat_actions, args.episodes),
        "flat + monitoring + LogStats": lambda: run_env(stack(flat), flat_actions, args.episodes),
        "structured": lambda: run_env(struct, struct_actions, args.episodes),
        "structured + monitoring + LogStats": lambda: run_env(stack(struct), struct_actions, args.episodes),
        "masked": lambda: run_env(masked, struct_actions, args.episodes),
        "masked + monitoring + LogStats": lambda: run_env(stack(masked), struct_actions, args.episodes),
    }
    results: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.repeats):  # interleaved so that machine noise hits all variants alike
        for name, fn in variants.items():
            results[name].append(fn())

    best = {k: max(v) for k, v in results.items()}
    core = best["core env (MazeActions)"]
    print(f"Cutting-2D simple problem, greedy replay, {args.episodes} episodes x 180 steps, best of {args.repeats}")
    print(f"{'variant':<38}{'sub-steps/s':>14}{'vs core':>10}")
    for name, sps in best.items():
        print(f"{name:<38}{sps:>14,.0f}{sps / core:>10.3f}")
    ratio = best["masked + monitoring + LogStats"] / core
    print(f"bench: cutting2d_steps masked_stack_vs_core={ratio:.3f} greedy_raw_pieces={raw_pieces}")


if __name__ == "__main__":
    main()
