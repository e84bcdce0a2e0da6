"""PPO on the masked structured Cutting-2D env: agent actions (sub-steps) and wall time until the deterministic
evaluation reaches the optimum of the simple problem (reward -31, i.e. 31 raw pieces in 180 steps).

Reference: the seed system needs about 10,000 sub-steps (two of its PPO epochs, about 66 s on this machine).
8 envs, 64 sub-steps per env and update, evaluation (1 deterministic episode) after every update; evaluation
time is counted in the wall time.

Run: python tests/benchmarks/cutting2d_masked.py [--seeds 0 1 2 3 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SEED_SYSTEM_STEPS, SEED_SYSTEM_SECONDS = 10_000, 66.0


def run(seed: int) -> tuple[int | None, float | None, float]:
    """(sub-steps to optimum, seconds to optimum, reward of the untrained deterministic policy)."""
    from cutting2d_training import masked_ppo

    from maze_lab.examples.cutting2d import SIMPLE_PROBLEM_OPTIMUM

    trainer = masked_ppo(seed)
    untrained = trainer.evaluator.evaluate(trainer.policy, seed=seed + 1_000_000)
    result: list = [None, None]
    start = time.perf_counter()

    def on_epoch(tr, _stats):
        if tr.last_eval_reward >= -SIMPLE_PROBLEM_OPTIMUM:
            result[:] = [tr.env_steps, time.perf_counter() - start]
            tr.request_stop()

    trainer.callbacks.append(on_epoch)
    trainer.train()
    return result[0], result[1], untrained


def main() -> None:
    """Run the seeds and print the table and the bench line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [(seed, *run(seed)) for seed in args.seeds]
    print("PPO, masked structured Cutting-2D, simple problem (optimum: reward -31)")
    print(f"{'seed':>6}{'untrained reward':>18}{'sub-steps to -31':>18}{'seconds':>10}")
    for seed, steps, seconds, untrained in rows:
        print(f"{seed:>6}{untrained:>18.0f}{steps if steps is not None else '-':>18}"
              f"{seconds if seconds is not None else float('nan'):>10.2f}")
    solved = [r for r in rows if r[1] is not None]
    steps = statistics.median(r[1] for r in solved) if len(solved) == len(rows) else float("inf")
    seconds = statistics.median(r[2] for r in solved) if len(solved) == len(rows) else float("inf")
    print(f"{'median':>6}{'':>18}{steps:>18,.0f}{seconds:>10.2f}")
    print(f"{'seed system (reference)':<24}{SEED_SYSTEM_STEPS:>18,}{SEED_SYSTEM_SECONDS:>10.1f}")
    print(f"bench: cutting2d_masked steps_to_optimum={steps:.0f} seconds_to_optimum={seconds:.2f}")


if __name__ == "__main__":
    main()
