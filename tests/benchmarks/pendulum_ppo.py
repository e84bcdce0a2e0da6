"""maze-lab PPO with its default config on Pendulum-v1 (bounded Box actions) vs Stable-Baselines3 PPO with the
RL Zoo's Pendulum-v1 hyperparameters.

maze-lab: ``RunContext(overrides={"env.name": "Pendulum-v1"})``, nothing else changed that affects training: the
default runner (2 in-process envs), the tanh-squashed Gaussian the distribution mapper gives a bounded Box, and
PPO's ``bounded_box`` values from ``conf/algorithm/ppo.yaml``. Checkpoints, TensorBoard and statistics are written
as in any run and count as training time.

Stable-Baselines3: the RL Zoo's ``Pendulum-v1`` entry of ``hyperparams/ppo.yml``: 4 envs, n_steps 1024, batch 64
(SB3's default), gae_lambda 0.95, gamma 0.9, 10 epochs, ent_coef 0.0, lr 1e-3, clip 0.2, gSDE with
sde_sample_freq 4, default MlpPolicy (two 64-unit tanh layers for policy and value).

Both evaluate the deterministic policy on 8 episodes every 4,096 env steps (after an update); evaluation time is
not counted. Reported: env steps per second of training and the wall-clock training time until the evaluation mean
is better than -300 (a seed that never gets there within the budget counts as inf in the median). Both run in the
same process, one torch thread, seeds interleaved.

Run: python tests/benchmarks/pendulum_ppo.py [--seeds 0 1 2 3 4] [--budget 100000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET = -300.0
EVAL_EPISODES = 8
Result = tuple[float, float | None, int | None, float]
"""(training steps per second, seconds to the target or None, env steps to the target or None, best eval)."""


def run_maze(seed: int, budget: int, out_dir: str) -> Result:
    """maze-lab PPO with the default config."""
    from maze_lab.run.run_context import RunContext

    rc = RunContext(overrides={"env.name": "Pendulum-v1", "seed": seed, "log_base_dir": out_dir,
                               # evaluation and stopping only: deterministic, 8 episodes side by side, no early stop
                               "algorithm.deterministic_eval": True, "algorithm.eval_repeats": EVAL_EPISODES,
                               "runner.eval_concurrency": EVAL_EPISODES, "algorithm.patience": 0},
                    silent=True)
    trainer = rc.trainer
    steps_per_eval = trainer.config.epoch_length * trainer.config.n_rollout_steps * trainer.env.n_envs
    if steps_per_eval != 4096:
        print(f"note: maze-lab evaluates every {steps_per_eval} env steps (SB3: 4096)")
    evaluator = trainer.evaluator
    eval_time = [0.0]
    evaluate = evaluator.evaluate

    def timed_evaluate(*args, **kwargs):
        t = time.perf_counter()
        result = evaluate(*args, **kwargs)
        eval_time[0] += time.perf_counter() - t
        return result

    evaluator.evaluate = timed_evaluate
    state: dict = {"solved": None, "steps": None, "best": -np.inf}
    start = time.perf_counter()

    def on_epoch(tr, _stats):
        state["best"] = max(state["best"], tr.last_eval_reward)
        if state["solved"] is None and tr.last_eval_reward > TARGET:
            state["solved"] = time.perf_counter() - start - eval_time[0]
            state["steps"] = tr.env_steps
        if state["solved"] is not None or tr.env_steps >= budget:
            tr.request_stop()

    trainer.callbacks.append(on_epoch)
    try:
        rc.train(n_epochs=0)
    finally:
        rc.close()
    train_time = time.perf_counter() - start - eval_time[0]
    return trainer.env_steps / train_time, state["solved"], state["steps"], state["best"]


def run_sb3(seed: int, budget: int) -> Result:
    """Stable-Baselines3 PPO with the RL Zoo's Pendulum-v1 hyperparameters."""
    import gymnasium as gym
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("Pendulum-v1", n_envs=4, seed=seed)
    model = SB3PPO("MlpPolicy", env, n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0,
                   learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4, seed=seed, device="cpu",
                   verbose=0)
    eval_envs = [gym.make("Pendulum-v1") for _ in range(EVAL_EPISODES)]

    def evaluate(policy: Callable) -> float:
        """8 deterministic episodes side by side."""
        obs = np.stack([e.reset(seed=seed + 1_000_000 + i)[0] for i, e in enumerate(eval_envs)])
        totals, done = np.zeros(len(eval_envs)), np.zeros(len(eval_envs), dtype=bool)
        while not done.all():
            actions = policy(obs)
            for i, e in enumerate(eval_envs):
                if not done[i]:
                    obs[i], r, te, tr, _ = e.step(actions[i])
                    totals[i] += r
                    done[i] = te or tr
        return float(totals.mean())

    from sb3_reference import learn_until_solved

    # strictly better than the target, as maze-lab's side counts it
    r = learn_until_solved(model, budget, lambda m: evaluate(lambda o: m.predict(o, deterministic=True)[0]),
                           np.nextafter(TARGET, np.inf))
    return r.steps_per_s, r.solved_s, r.solved_steps, r.best


def main() -> None:
    """Run both on several seeds and print the table and the bench line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget", type=int, default=100_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows: dict[str, list[Result]] = {"maze-lab (default)": [], "SB3 (RL Zoo, gSDE)": []}
    with tempfile.TemporaryDirectory(prefix="pendulum_ppo_") as out_dir:
        for seed in args.seeds:
            rows["maze-lab (default)"].append(run_maze(seed, args.budget, out_dir))
            rows["SB3 (RL Zoo, gSDE)"].append(run_sb3(seed, args.budget))

    print(f"PPO on Pendulum-v1, seeds {args.seeds}, budget {args.budget:,} env steps, target: deterministic eval "
          f"mean of {EVAL_EPISODES} episodes > {TARGET:.0f}")
    print(f"{'':<20}{'steps/s':>10}{'solved':>8}{'median s to -300':>18}{'median steps':>14}")
    summary = {}
    for name, results in rows.items():
        sps = statistics.median(r[0] for r in results)
        times = [r[1] if r[1] is not None else float("inf") for r in results]
        steps = [r[2] if r[2] is not None else float("inf") for r in results]
        t_med, s_med = statistics.median(times), statistics.median(steps)
        solved = sum(r[1] is not None for r in results)
        summary[name] = (sps, t_med)
        print(f"{name:<20}{sps:>10,.0f}{solved:>5}/{len(results):<2}{t_med:>18.1f}{s_med:>14,.0f}")
        for seed, r in zip(args.seeds, results, strict=True):
            reached = "-" if r[1] is None else f"{r[1]:.1f}s / {r[2]:,} steps"
            print(f"    seed {seed}: {r[0]:,.0f} steps/s, to -300: {reached}, best eval {r[3]:.0f}")
    (maze_sps, maze_t), (sb3_sps, sb3_t) = summary.values()
    time_ratio = maze_t / sb3_t if np.isfinite(sb3_t) else float("nan")
    print(f"bench: pendulum_ppo steps_per_s_vs_sb3={maze_sps / sb3_sps:.2f} time_to_solve_vs_sb3={time_ratio:.2f}")


if __name__ == "__main__":
    main()
