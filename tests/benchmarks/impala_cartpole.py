"""maze-lab IMPALA with 1 and 2 actor processes vs maze-lab PPO with the same number of env processes on
CartPole-v1: env steps per second and wall time to an evaluation of 475.

Both sides step 8 CartPole-v1 envs, 32 agent actions per env and rollout, with two 64-unit tanh layers for policy
and value, gamma 0.98, no entropy bonus, max grad norm 0.5:

- IMPALA: 8 actors split between 1 or 2 actor processes (``actor_processes``), a batch of 8 trajectories per update
  (the 256 steps of PPO's rollout), a queue of 8 trajectories (``queue_out_of_sync_factor`` 1), V-trace with the
  default clipping (rho-bar 1, pg-rho-bar 1), lr 3e-3 constant, one gradient step per update;
- PPO: the 8 envs in a SubprocVectorEnv with 1 or 2 worker processes, then the settings of
  ``ppo_cartpole.py``: batch 256, 20 optimization epochs, GAE 0.8, lr 1e-3 and clip range 0.2 linearly decayed over
  the budget.

Every 10 updates (2,560 env steps) the deterministic policy is evaluated on 8 episodes (8 envs in this process,
the same protocol for all); the evaluation time is not counted. The training clock starts with ``train()``; the
processes are started before it on both sides (PPO's when its vector env is built, IMPALA's actors until their
first trajectory is sent: a few seconds of spawning and importing torch that a long run hardly notices). Steps/s is
the env steps the learner trained on (IMPALA: consumed trajectories; PPO: its rollouts) divided by the training
time. IMPALA's actors go on stepping while the learner evaluates, until the queue is full: at most one batch of
steps is collected outside the clock. A run stops at the first evaluation >= 475 or at the budget; a seed that does
not reach 475 counts as inf in the medians.

Timings on a shared machine with few cores are noisy (other processes compete for the cores); compare the ratios.

Run: python tests/benchmarks/impala_cartpole.py [--seeds 3] [--budget 200000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET = 475.0
N_ENVS = 8
N_STEPS = 32
EPOCH_LENGTH = 10


class Result(NamedTuple):
    """One run: training steps per second, seconds and env steps to the target (None where not reached), and the
    best evaluation."""

    steps_per_s: float
    solved_s: float | None
    solved_steps: int | None
    best: float


def _run(trainer: Any, evaluator: Any) -> Result:
    """Train until the target or the budget; evaluation time is taken out of the clock."""
    eval_time = [0.0]
    evaluate = evaluator.evaluate

    def timed_evaluate(*args: Any, **kwargs: Any) -> float:
        t = time.perf_counter()
        result = evaluate(*args, **kwargs)
        eval_time[0] += time.perf_counter() - t
        return result

    evaluator.evaluate = timed_evaluate
    solved: list = [None, None]
    best = [-np.inf]
    start = time.perf_counter()

    def on_epoch(tr: Any, _stats: Any) -> None:
        best[0] = max(best[0], tr.last_eval_reward)
        if solved[0] is None and tr.last_eval_reward >= TARGET:
            solved[0] = time.perf_counter() - start - eval_time[0]
            solved[1] = tr.env_steps
            tr.request_stop()

    trainer.callbacks.append(on_epoch)
    try:
        trainer.train()
    finally:
        train_time = time.perf_counter() - start - eval_time[0]
        if hasattr(trainer, "close"):
            trainer.close()
    return Result(trainer.env_steps / train_time, solved[0], solved[1], best[0])


def _evaluator() -> Any:
    from training_utils import cartpole_factory

    from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
    from maze_lab.train.vector_env import SequentialVectorEnv

    return RolloutEvaluator(SequentialVectorEnv([cartpole_factory] * 8, logging_prefix="eval", writers=[]),
                            n_episodes=8, deterministic=True)


def run_impala(seed: int, processes: int, budget: int) -> Result:
    """IMPALA with 8 actors in ``processes`` actor processes."""
    from training_utils import cartpole_factory, flat_actor_critic

    from maze_lab.train.trainers.impala import IMPALA, ImpalaAlgorithmConfig

    torch.manual_seed(seed)
    n_epochs = budget // (EPOCH_LENGTH * N_STEPS * N_ENVS)
    config = ImpalaAlgorithmConfig(n_epochs=n_epochs, epoch_length=EPOCH_LENGTH, n_rollout_steps=N_STEPS,
                                   actors_batch_size=N_ENVS, num_actors=N_ENVS, actor_processes=processes, lr=3e-3,
                                   gamma=0.98, entropy_coef=0.0, max_grad_norm=0.5, seed=seed, patience=0)
    evaluator = _evaluator()
    trainer = IMPALA(config, flat_actor_critic(cartpole_factory()), env_factories=[cartpole_factory] * N_ENVS,
                     evaluator=evaluator, writers=[])
    # the actor processes start before the clock, as PPO's env processes do (the first train() would start them):
    # the clock starts once they have sent their first trajectory
    trainer._before_training(True)
    while trainer.actors.qsize() == 0:
        time.sleep(0.01)
    return _run(trainer, evaluator)


def run_ppo(seed: int, processes: int, budget: int) -> Result:
    """PPO with its 8 envs in a SubprocVectorEnv of ``processes`` worker processes."""
    from training_utils import cartpole_factory, flat_actor_critic

    from maze_lab.train.trainers.common.schedules import LinearSchedule
    from maze_lab.train.trainers.ppo import PPO, PPOAlgorithmConfig
    from maze_lab.train.vector_env import SubprocVectorEnv

    torch.manual_seed(seed)
    n_epochs = budget // (EPOCH_LENGTH * N_STEPS * N_ENVS)
    config = PPOAlgorithmConfig(n_epochs=n_epochs, epoch_length=EPOCH_LENGTH, n_rollout_steps=N_STEPS,
                                lr=LinearSchedule(1e-3, 0.0), gamma=0.98, gae_lambda=0.8, entropy_coef=0.0,
                                batch_size=256, n_optimization_epochs=20, clip_range=LinearSchedule(0.2, 0.0),
                                max_grad_norm=0.5, seed=seed, patience=0)
    evaluator = _evaluator()
    env = SubprocVectorEnv([cartpole_factory] * N_ENVS, logging_prefix="train", writers=[], n_workers=processes)
    try:
        trainer = PPO(config, flat_actor_critic(cartpole_factory()), env=env, evaluator=evaluator, writers=[])
        return _run(trainer, evaluator)
    finally:
        env.close()


def _fmt(value: float | None, fmt: str) -> str:
    return "not reached" if value is None else format(value, fmt)


def _spread(values: list[float], fmt: str) -> str:
    """median (min - max); inf shown as 'not reached'."""
    def f(v: float) -> str:
        return "not reached" if not np.isfinite(v) else format(v, fmt)
    return f"{f(statistics.median(values))} ({f(min(values))} - {f(max(values))})"


def main() -> None:
    """Run the four systems on several seeds, print the tables and the bench line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3, help="number of seeds (0 .. N-1); default 3")
    parser.add_argument("--budget", type=int, default=200_000, help="cap of env steps per run; default 200,000")
    args = parser.parse_args()
    torch.set_num_threads(1)
    seeds = list(range(args.seeds))
    systems = {"impala-1": (run_impala, 1), "impala-2": (run_impala, 2), "ppo-1": (run_ppo, 1),
               "ppo-2": (run_ppo, 2)}
    rows: dict[str, list[Result]] = {name: [] for name in systems}
    started = time.perf_counter()
    for seed in seeds:
        order = list(systems) if seed % 2 == 0 else list(systems)[::-1]  # alternate who runs first
        for name in order:
            run, processes = systems[name]
            result = run(seed, processes, args.budget)
            rows[name].append(result)
            print(f"  seed {seed} {name}: {result.steps_per_s:.0f} steps/s, to {TARGET:.0f}: "
                  f"{_fmt(result.solved_s, '.1f')} s / {_fmt(result.solved_steps, ',')} env steps, best "
                  f"{result.best:.1f}", flush=True)

    print(f"\nCartPole-v1, {N_ENVS} envs x {N_STEPS} steps per update, seeds {seeds}, cap {args.budget:,} env steps; "
          f"target: deterministic eval mean of 8 episodes >= {TARGET:.0f} every {EPOCH_LENGTH * N_STEPS * N_ENVS:,} "
          f"env steps; evaluation time not counted; one torch thread per process")
    print(f"{'seed':<6}{'system':<10}{'steps/s':>9}{'s to 475':>13}{'steps to 475':>14}{'best eval':>11}")
    for i, seed in enumerate(seeds):
        for name in systems:
            r = rows[name][i]
            print(f"{seed:<6}{name:<10}{r.steps_per_s:>9.0f}{_fmt(r.solved_s, '.1f'):>13}"
                  f"{_fmt(r.solved_steps, ','):>14}{r.best:>11.1f}")
    print("\nmedian (min - max); a seed that did not reach 475 counts as inf")
    print(f"{'system':<10}{'steps/s':>24}{'s to 475':>30}{'env steps to 475':>32}{'reached':>9}")
    summary = {}
    for name in systems:
        results = rows[name]
        sps = [r.steps_per_s for r in results]
        times = [r.solved_s if r.solved_s is not None else float("inf") for r in results]
        steps = [float(r.solved_steps) if r.solved_steps is not None else float("inf") for r in results]
        reached = sum(r.solved_s is not None for r in results)
        summary[name] = (statistics.median(sps), statistics.median(times))
        print(f"{name:<10}{_spread(sps, '.0f'):>24}{_spread(times, '.1f'):>30}{_spread(steps, ',.0f'):>32}"
              f"{reached:>7}/{len(results)}")
    print(f"total wall time {time.perf_counter() - started:.0f} s")
    sps_2_vs_1 = summary["impala-2"][0] / summary["impala-1"][0]
    # IMPALA vs PPO with the same number of processes: the 2-process setting (the brief's CI setting)
    sps_vs_ppo = summary["impala-2"][0] / summary["ppo-2"][0]
    t_impala, t_ppo = summary["impala-2"][1], summary["ppo-2"][1]
    time_ratio = t_impala / t_ppo if np.isfinite(t_ppo) and np.isfinite(t_impala) else float("nan")
    print(f"bench: impala_cartpole steps_per_s_2_vs_1={sps_2_vs_1:.2f} impala_vs_ppo_steps_per_s={sps_vs_ppo:.2f} "
          f"time_to_475_vs_ppo={time_ratio:.2f}")


if __name__ == "__main__":
    main()
