"""maze-lab PPO vs Stable-Baselines3 PPO and a lean bare-PyTorch PPO loop on CartPole-v1 with the same
hyperparameters.

All three: 8 envs (in process), 32 steps per rollout, batch 256, 20 optimization epochs, gamma 0.98, GAE 0.8,
lr 1e-3 and clip range 0.2 linearly decayed over the budget, no entropy bonus, max grad norm 0.5, two
64-unit tanh layers for policy and value. Every 10 rollouts (2,560 env steps) the deterministic policy is
evaluated on 8 episodes; evaluation time is not counted. Reports env steps per second of training and the
wall-clock training time until the evaluation mean reaches 475.

The bare-PyTorch loop (``bare_torch_ppo.py``) is what a user would write by hand for this one task in eager
PyTorch and raw Gymnasium (no statistics, checkpoints or checks): the ceiling that maze-lab's overhead is measured
against. Per seed the three run one after the other in the same process.

Five seeds by default; the table shows min / median / max for each (steps per second, seconds and env steps
to solve; an unsolved seed counts as never).

Run: python tests/benchmarks/ppo_cartpole.py [--seeds 0 1 2 3 4] [--budget 102400]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET = 475.0


def run_maze(seed: int, budget: int) -> tuple[float, float | None, int | None]:
    """(steps per second, seconds to solve or None, env steps to solve or None) for maze-lab."""
    from training_utils import cartpole_factory, flat_actor_critic

    from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
    from maze_lab.train.trainers.common.schedules import LinearSchedule
    from maze_lab.train.trainers.ppo import PPO, PPOAlgorithmConfig
    from maze_lab.train.vector_env import SequentialVectorEnv

    torch.manual_seed(seed)
    n_epochs = budget // (10 * 32 * 8)
    config = PPOAlgorithmConfig(n_epochs=n_epochs, epoch_length=10, n_rollout_steps=32, lr=LinearSchedule(1e-3, 0.0),
                                gamma=0.98, gae_lambda=0.8, entropy_coef=0.0, batch_size=256, n_optimization_epochs=20,
                                clip_range=LinearSchedule(0.2, 0.0), max_grad_norm=0.5, seed=seed, patience=0)
    model = flat_actor_critic(cartpole_factory())
    evaluator = RolloutEvaluator(SequentialVectorEnv([cartpole_factory] * 8, logging_prefix="eval"), n_episodes=8,
                                 deterministic=True)
    trainer = PPO(config, model, env=SequentialVectorEnv([cartpole_factory] * 8, logging_prefix="train"),
                  evaluator=evaluator)
    eval_time = [0.0]
    evaluate = evaluator.evaluate

    def timed_evaluate(*args, **kwargs):
        t = time.perf_counter()
        result = evaluate(*args, **kwargs)
        eval_time[0] += time.perf_counter() - t
        return result

    evaluator.evaluate = timed_evaluate
    solved: list = [None, None]
    start = time.perf_counter()

    def on_epoch(tr, _stats):
        if solved[0] is None and tr.last_eval_reward >= TARGET:
            solved[0] = time.perf_counter() - start - eval_time[0]
            solved[1] = tr.env_steps
            tr.request_stop()

    trainer.callbacks.append(on_epoch)
    trainer.train()
    train_time = time.perf_counter() - start - eval_time[0]
    return trainer.env_steps / train_time, solved[0], solved[1]


def run_sb3(seed: int, budget: int) -> tuple[float, float | None, int | None]:
    """The same for Stable-Baselines3."""
    from bare_torch_ppo import evaluate_cartpole
    from sb3_reference import learn_until_solved
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.env_util import make_vec_env

    def linear(start: float):
        return lambda remaining: remaining * start

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = SB3PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                   ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), max_grad_norm=0.5, seed=seed,
                   policy_kwargs={"net_arch": [64, 64], "activation_fn": torch.nn.Tanh}, device="cpu", verbose=0)

    def evaluate(m) -> float:
        """8 deterministic episodes, as the bare-PyTorch column evaluates."""
        return evaluate_cartpole(lambda obs: int(m.predict(obs, deterministic=True)[0]), seed)

    r = learn_until_solved(model, budget, evaluate, TARGET, every=10)  # evaluated after every 10 updates
    return r.steps_per_s, r.solved_s, r.solved_steps


def _spread(values: list[float], fmt: str) -> str:
    """``min / median / max`` of ``values`` (inf printed as 'never')."""
    def f(v: float) -> str:
        return "never" if v == float("inf") else fmt.format(v)

    return f"{f(min(values))} / {f(statistics.median(values))} / {f(max(values))}"


def main() -> None:
    """Run the three on several seeds and print the table and the bench line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget", type=int, default=102_400)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from bare_torch_ppo import run_bare

    rows = {"maze-lab": [], "Stable-Baselines3": [], "bare PyTorch": []}
    for seed in args.seeds:
        rows["maze-lab"].append(run_maze(seed, args.budget))
        rows["Stable-Baselines3"].append(run_sb3(seed, args.budget))
        rows["bare PyTorch"].append(run_bare(seed, args.budget, TARGET))

    print(f"PPO on CartPole-v1, seeds {args.seeds}, budget {args.budget} env steps, target eval mean {TARGET}")
    print(f"{'':<19}{'solved':>7}  {'steps/s min / median / max':>28}  {'s to solve min / median / max':>30}  "
          f"{'steps to solve min / median / max':>36}")
    summary = {}
    for name, results in rows.items():
        sps = [r[0] for r in results]
        times = [r[1] if r[1] is not None else float("inf") for r in results]
        steps = [r[2] if r[2] is not None else float("inf") for r in results]
        solved = sum(r[1] is not None for r in results)
        summary[name] = (statistics.median(sps), statistics.median(times))
        print(f"{name:<19}{solved:>4}/{len(results):<2}  {_spread(sps, '{:,.0f}'):>28}  "
              f"{_spread(times, '{:.1f}'):>30}  {_spread(steps, '{:,.0f}'):>36}")
        for seed, r in zip(args.seeds, results, strict=True):
            done = "-" if r[1] is None else f"{r[1]:.1f}s / {r[2]:,} steps"
            print(f"    seed {seed}: {r[0]:,.0f} steps/s, solved: {done}")
    sps_ratio = summary["maze-lab"][0] / summary["Stable-Baselines3"][0]
    t_maze, t_sb3 = summary["maze-lab"][1], summary["Stable-Baselines3"][1]
    time_ratio = t_maze / t_sb3 if np.isfinite(t_sb3) else float("nan")
    bare_ratio = summary["maze-lab"][0] / summary["bare PyTorch"][0]
    print(f"bench: ppo_cartpole steps_per_s_vs_sb3={sps_ratio:.2f} time_to_solve_vs_sb3={time_ratio:.2f} "
          f"steps_per_s_vs_bare_torch={bare_ratio:.2f}")


if __name__ == "__main__":
    main()
