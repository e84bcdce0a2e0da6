"""PPO on the masked structured Cutting-2D env: agent actions (sub-steps) and wall time until the deterministic
evaluation reaches the optimum of the simple problem: 31 raw pieces in 180 steps, which is an episode reward of
-30 in maze-lab (the starting piece is free; the seed's "-31" counts it too).

Two models: the task-specific one (as in the seed's tutorial: the selection policy scores every inventory slot
with one shared network; examples/cutting2d/models.py) gives the headline figures; the generic template model
(flatten-concat of all observations) is shown for comparison.

Reference: the seed system needs about 10,000 sub-steps (two of its PPO epochs, about 66 s on this machine).
8 envs, 64 sub-steps per env and update, evaluation (1 deterministic episode) after every update; evaluation
time is counted in the wall time. A seed that has not reached the optimum within the budget (100 updates,
51,200 sub-steps) counts as never (inf) in the median.

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


MODELS = {"task-specific (slot scores)": "cutting2d_struct_masked_slots",
          "template (flatten-concat)": "cutting2d_struct_masked"}


def run(seed: int, model: str) -> tuple[int | None, float | None, float]:
    """(sub-steps to optimum, seconds to optimum, reward of the untrained deterministic policy)."""
    from cutting2d_training import OPTIMUM_REWARD, masked_ppo

    trainer = masked_ppo(seed, model=model)
    untrained = trainer.evaluator.evaluate(trainer.policy, seed=seed + 1_000_000)
    result: list = [None, None]
    start = time.perf_counter()

    def on_epoch(tr, _stats):
        if tr.last_eval_reward >= OPTIMUM_REWARD:
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
    print("PPO, masked structured Cutting-2D, simple problem (optimum: 31 raw pieces = reward -30)")
    print(f"{'model':<28}{'seed':>6}{'untrained reward':>18}{'sub-steps to optimum':>22}{'seconds':>10}")
    headline = None
    inf = float("inf")
    for label, model in MODELS.items():
        rows = [(seed, *run(seed, model)) for seed in args.seeds]
        for seed, steps, seconds, untrained in rows:
            print(f"{label:<28}{seed:>6}{untrained:>18.0f}{steps if steps is not None else 'not reached':>22}"
                  f"{seconds if seconds is not None else float('nan'):>10.2f}")
        steps = statistics.median(r[1] if r[1] is not None else inf for r in rows)
        seconds = statistics.median(r[2] if r[2] is not None else inf for r in rows)
        solved = sum(r[1] is not None for r in rows)
        print(f"{label + ' median':<28}{'':>6}{'':>18}{steps:>22,.0f}{seconds:>10.2f}   "
              f"({solved}/{len(rows)} seeds reached the optimum)")
        if headline is None:
            headline = (steps, seconds)
    print(f"{'seed system (reference)':<52}{SEED_SYSTEM_STEPS:>22,}{SEED_SYSTEM_SECONDS:>10.1f}")
    print(f"bench: cutting2d_masked steps_to_optimum={headline[0]:.0f} seconds_to_optimum={headline[1]:.2f}")


if __name__ == "__main__":
    main()
