"""Rollout throughput of runner=ray against SubprocVectorEnv (runner=local) on CartPole-v1, PPO's rollouts.

What is measured: env steps per second of the rollouts an A2C/PPO update makes (``n_rollout_steps`` agent actions in
every training env, with the policy's sampling), with 1 and 2 workers:

- ``ray``: :class:`maze_lab.train.ray_rollouts.RayRolloutGenerator`; each Ray actor holds ``--envs-per-worker`` envs
  and a copy of the policy, receives the weights once per update through the object store (``ray.put``) and rolls
  out locally; one Ray call per worker and update.
- ``subprocess``: the local RolloutGenerator over ``SubprocVectorEnv`` with the same number of processes and the same
  total number of envs; the policy runs in this process and every env step is a pipe round trip to each process.
- ``processes``: ``runner=processes`` (:mod:`maze_lab.train.process_rollouts`), the same design as the Ray workers
  (each process rolls out a whole update with its own policy copy) on local processes: what Ray itself costs.

Both use the same policy (flatten-concat 64x64 tanh, the PPO tests' model) and one torch thread per process. Each
configuration first makes one untimed rollout (actors and processes started, envs reset), then ``--updates`` timed
rollouts; the weights change before every update (as after an optimizer step), so the workers load new weights each
time. Steps/s = env steps of the timed rollouts / their wall time. The overhead of an update (ray, processes) is its
rollout time (the driver's wait) minus the slowest worker's own time inside its rollout call (weights loading
included): Ray's calls and object store, or the pipes and shared memory, and the transfer and concatenation of the
results. Every configuration is repeated
``--repeats`` times (fresh actors/processes each time); the table shows the median and the range.

The issue's targets: 2 Ray workers >= 1.5x one Ray worker; Ray within 20 % of the subprocess runner. On a machine
with fewer free cores than workers + 1 (the driver) neither can hold: the numbers then measure the contention.

Run: python tests/benchmarks/ray_scaling.py [--repeats 3] [--updates 10] [--steps 128] [--envs-per-worker 4]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training_utils import flat_actor_critic  # noqa: E402

from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv  # noqa: E402
from maze_lab.train.process_rollouts import ProcessEnvGroup, ProcessRolloutGenerator  # noqa: E402
from maze_lab.train.ray_rollouts import RayEnvGroup, RayRolloutGenerator  # noqa: E402
from maze_lab.train.trainers.common.rollout import RolloutGenerator  # noqa: E402
from maze_lab.train.vector_env import SubprocVectorEnv  # noqa: E402

CARTPOLE = functools.partial(GymMazeEnv, "CartPole-v1", render_mode=None)


def _nudge(policy) -> None:
    """Change the weights a little, as an optimizer step would (the workers must load new weights)."""
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 1e-4)


def measure(kind: str, n_workers: int, per_worker: int, steps: int, updates: int, seed: int) -> tuple[float, float]:
    """(env steps per second, mean Ray overhead per update in seconds; 0 for subprocess) of one configuration."""
    torch.manual_seed(seed)
    policy = flat_actor_critic(CARTPOLE()).policy
    n_envs = n_workers * per_worker
    if kind == "ray":
        generator = RayRolloutGenerator(RayEnvGroup([CARTPOLE] * n_envs, n_workers))
    elif kind == "processes":
        generator = ProcessRolloutGenerator(ProcessEnvGroup([CARTPOLE] * n_envs, n_workers))
    else:
        generator = RolloutGenerator(SubprocVectorEnv([CARTPOLE] * n_envs, n_workers=n_workers))
    overheads = []
    try:
        generator.reset(seed)
        generator.rollout(policy, steps)  # untimed: actors/processes started, envs reset
        start = time.perf_counter()
        for _ in range(updates):
            _nudge(policy)
            generator.rollout(policy, steps)
            if kind != "subprocess":
                overheads.append(generator.last_timing["overhead"])
        seconds = time.perf_counter() - start
    finally:
        generator.env.close()
    return updates * steps * n_envs / seconds, (statistics.mean(overheads) if overheads else 0.0)


def _spread(values: list[float], fmt: str) -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}} - {max(values):{fmt}})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--steps", type=int, default=128, help="n_rollout_steps per update")
    parser.add_argument("--envs-per-worker", type=int, default=4)
    args = parser.parse_args()
    import ray

    torch.set_num_threads(1)
    started = time.perf_counter()
    cpus = os.cpu_count() or 2
    ray.init(num_cpus=max(2, cpus), include_dashboard=False, log_to_driver=False)
    print(f"Ray {ray.__version__} started in {time.perf_counter() - started:.1f} s; {cpus} CPU cores, load average "
          f"{os.getloadavg()[0]:.1f}")
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    try:
        for repeat in range(args.repeats):
            for n in (1, 2):
                for kind in ("ray", "processes", "subprocess"):  # interleaved: a load change hits all alike
                    sps, overhead = measure(kind, n, args.envs_per_worker, args.steps, args.updates, seed=repeat)
                    results.setdefault((kind, n), []).append((sps, overhead))
                    print(f"  repeat {repeat} {kind:<10} {n} worker(s): {sps:,.0f} steps/s"
                          + (f", overhead {overhead * 1e3:.1f} ms/update" if kind != "subprocess" else ""), flush=True)
    finally:
        ray.shutdown()
    k = args.envs_per_worker
    print(f"\nPPO rollouts on CartPole-v1: {args.steps} steps x envs per update, {args.updates} timed updates, "
          f"{args.repeats} repeats; {k} envs per worker; median (min - max)")
    print(f"{'runner':<12}{'workers':>8}{'envs':>6}{'env steps/s':>28}{'overhead ms/update':>30}")
    for (kind, n), rows in sorted(results.items(), key=lambda item: (item[0][1], item[0][0])):
        sps = [r[0] for r in rows]
        over = _spread([r[1] * 1e3 for r in rows], ".1f") if kind != "subprocess" else "-"
        print(f"{kind:<12}{n:>8}{n * k:>6}{_spread(sps, ',.0f'):>28}{over:>30}")
    med = {key: statistics.median(r[0] for r in rows) for key, rows in results.items()}
    speedup = med[("ray", 2)] / med[("ray", 1)]
    vs_subproc = med[("ray", 2)] / med[("subprocess", 2)]
    print(f"Ray 2 vs 1 worker: {speedup:.2f}x (target >= 1.5); Ray vs subprocess with 2 workers: {vs_subproc:.2f} "
          f"(target >= 0.8); Ray vs subprocess with 1 worker: {med[('ray', 1)] / med[('subprocess', 1)]:.2f}; "
          f"Ray vs local processes of the same design: {med[('ray', 1)] / med[('processes', 1)]:.2f} (1 worker), "
          f"{med[('ray', 2)] / med[('processes', 2)]:.2f} (2 workers)")
    print(f"total wall time {time.perf_counter() - started:.0f} s")
    print(f"bench: ray_scaling speedup_2_vs_1={speedup:.2f} ray_vs_subproc={vs_subproc:.2f}")


if __name__ == "__main__":
    main()
