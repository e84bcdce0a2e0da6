"""Cores that pay off: training throughput against the number of workers for an env whose step costs a fixed amount
of CPU, so that env work dominates (the case where more workers must help).

The env is CartPole-v1 whose every step first burns ``--step-ms`` milliseconds of the stepping thread's CPU time
(``time.thread_time``: a busy loop, so that contention for cores shows as it would with a real simulator). Three
ways to spread the envs over cores, each trained with RunContext as a user would:

- ``processes``: PPO with ``runner=processes`` and ``runner.n_workers=N`` (each worker process holds
  ``--envs-per-worker`` envs and a policy copy and rolls out a whole update);
- ``impala``: IMPALA with ``algorithm.actor_processes=N`` and ``--envs-per-worker`` actors per process;
- ``ray``: PPO with ``runner=ray`` and ``runner.n_workers=N`` on a local Ray (skipped where Ray is not installed).

Every configuration trains ``--epochs`` epochs of ``--epoch-length`` updates of ``--steps`` env steps per env; the
first epoch (start-up: processes, Ray, the first weights) is not counted: steps/s is the env steps of the later
epochs over their wall time, less the one evaluation episode of each epoch. The reference is the same
configuration with one worker, measured in the same run; the speed-up is N workers' steps/s over one worker's. Each
configuration runs ``--repeats`` times; the table shows the median and the range.

On a machine with C cores the speed-up of N workers cannot pass about min(N, C - 1) (the learner needs a core too).
The issue's target is for 16 cores: 8 workers at least 6x one worker for a step of 1 ms or more.

Run: python tests/benchmarks/cpu_env_scaling.py [--workers 1 2] [--step-ms 1.0] [--repeats 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make_env_factory(step_ms: float):
    """A factory of a GymMazeEnv over CartPole-v1 whose steps each burn ``step_ms`` ms of CPU."""

    def make():
        import gymnasium as gym

        from maze_lab import GymMazeEnv

        class CpuCost(gym.Wrapper):
            def step(self, action):
                end = time.thread_time() + step_ms / 1000.0
                while time.thread_time() < end:
                    pass
                return self.env.step(action)

        return GymMazeEnv(CpuCost(gym.make("CartPole-v1")))

    return make


def measure(kind: str, n_workers: int, args: argparse.Namespace, out_dir: str, seed: int) -> float:
    """Env steps per second of the epochs after the first."""
    from maze_lab.run.run_context import RunContext

    common = {"seed": seed, "log_base_dir": out_dir, "algorithm.epoch_length": args.epoch_length,
              "algorithm.n_rollout_steps": args.steps, "algorithm.eval_repeats": 1, "algorithm.patience": 0}
    if kind == "impala":
        n_actors = n_workers * args.envs_per_worker
        overrides = {**common, "algorithm.actor_processes": n_workers, "algorithm.num_actors": n_actors,
                     "algorithm.actors_batch_size": n_actors}
        algorithm = "impala"
    else:
        overrides = {**common, "runner": kind, "runner.n_workers": n_workers,
                     "runner.envs_per_worker": args.envs_per_worker}
        algorithm = "ppo"
    rc = RunContext(env=make_env_factory(args.step_ms), algorithm=algorithm, overrides=overrides, silent=True)
    marks: list[tuple[float, int]] = []
    eval_time = [0.0]

    def on_epoch(trainer, _stats) -> None:
        marks.append((time.perf_counter() - eval_time[0], trainer.env_steps))

    try:
        trainer = rc.trainer
        evaluate = trainer.evaluator.evaluate

        def timed_evaluate(*a, **k):  # one episode per epoch, taken out of the time
            start = time.perf_counter()
            try:
                return evaluate(*a, **k)
            finally:
                eval_time[0] += time.perf_counter() - start

        trainer.evaluator.evaluate = timed_evaluate
        trainer.callbacks.append(on_epoch)
        rc.train(n_epochs=args.epochs)
    finally:
        rc.close()
    (t0, s0), (t1, s1) = marks[0], marks[-1]
    return (s1 - s0) / (t1 - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--kinds", nargs="+", default=["processes", "impala", "ray"],
                        choices=["processes", "impala", "ray"])
    parser.add_argument("--step-ms", type=float, default=1.0, help="CPU milliseconds per env step (default 1)")
    parser.add_argument("--envs-per-worker", type=int, default=2)
    parser.add_argument("--steps", type=int, default=32, help="env steps per env and update (default 32)")
    parser.add_argument("--epoch-length", type=int, default=4, help="updates per epoch (default 4)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per run; the first is not counted")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the first is not counted)")
    kinds = [k for k in args.kinds if k != "ray" or importlib.util.find_spec("ray") is not None]
    workers = sorted(set(args.workers) | {1})
    results: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="cpu_env_scaling_") as out_dir:
        for repeat in range(args.repeats):
            for kind in kinds:
                for n in workers:
                    sps = measure(kind, n, args, out_dir, seed=repeat)
                    results.setdefault((kind, n), []).append(sps)
                    print(f"  repeat {repeat} {kind} {n} workers: {sps:,.0f} env steps/s", flush=True)

    print(f"\nenv step {args.step_ms} ms of CPU, {args.envs_per_worker} envs per worker, {args.steps} steps per env "
          f"and update, {os.cpu_count()} cores; median (min - max) of {args.repeats}")
    print(f"{'kind':<11}{'workers':>8}{'env steps/s':>28}{'speed-up vs 1':>16}")
    speedups = {}
    for kind in kinds:
        one = statistics.median(results[(kind, 1)])
        for n in workers:
            values = results[(kind, n)]
            med = statistics.median(values)
            speedups[(kind, n)] = med / one
            spread = f"{med:,.0f} ({min(values):,.0f} - {max(values):,.0f})"
            print(f"{kind:<11}{n:>8}{spread:>28}{med / one:>15.2f}x")
    top = max(workers)
    line = " ".join(f"{kind}_{top}_vs_1={speedups[(kind, top)]:.2f}" for kind in kinds)
    print(f"bench: cpu_env_scaling step_ms={args.step_ms:g} cores={os.cpu_count()} {line}")


if __name__ == "__main__":
    main()
