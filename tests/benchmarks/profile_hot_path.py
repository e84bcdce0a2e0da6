"""Where the time of the hot path goes: one profile of the monitored CartPole env stack (random actions, as
``env_overhead.py`` steps it) and one of maze-lab PPO training on CartPole with ``ppo_cartpole.py``'s settings.

Each is run under ``cProfile``; the own time (``tottime``) of every function is added up by where the function
lives: raw Gymnasium, the parts of maze-lab (space checks, the env and its wrappers, monitoring, statistics and event
logs, the rollout and the trainer), torch (its Python code and its C operations), numpy and the rest. The profiler
slows Python-heavy code more than C code, so the shares are what to read, not the absolute times; steps/s are
printed without the profiler for reference.

Run: python tests/benchmarks/profile_hot_path.py [--steps 50000] [--updates 40]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

BUCKETS = [  # (label, a test on (file, function name)); the first that matches takes the function
    ("space checks", lambda f, n: "core/env/space_checks" in f or "core.env.space_checks" in f),
    ("statistics and event logs", lambda f, n: "core/log_stats" in f or "log_stats_wrapper" in f),
    ("monitoring", lambda f, n: "monitoring_wrapper" in f),
    ("GymMazeEnv and wrappers", lambda f, n: "maze_lab/core/wrappers" in f or "maze_lab/core/env" in f),
    ("events", lambda f, n: "maze_lab/core/events" in f),
    ("rollout and vector env", lambda f, n: "trainers/common/rollout" in f or "train/vector_env" in f),
    ("trainer (PPO, batches, statistics)", lambda f, n: "maze_lab/train" in f),
    ("policy, distributions, perception", lambda f, n: any(k in f for k in ("maze_lab/agent", "maze_lab/perception",
                                                                            "maze_lab/distributions",
                                                                            "maze_lab/core/policy"))),
    ("other maze-lab", lambda f, n: "maze_lab" in f),
    ("raw Gymnasium", lambda f, n: "gymnasium" in f),
    ("torch (Python)", lambda f, n: "/torch/" in f),
    ("torch (C operations)", lambda f, n: f == "~" and "torch" in n),
    ("numpy", lambda f, n: "numpy" in f or (f == "~" and "numpy" in n)),
]


def shares(profile: cProfile.Profile) -> tuple[dict[str, float], float]:
    """Own time per bucket and the total own time."""
    stats = pstats.Stats(profile)
    out: dict[str, float] = {}
    total = 0.0
    for (file, _line, name), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        total += tottime
        label = next((label for label, test in BUCKETS if test(file, name)), "Python built-ins and the rest")
        out[label] = out.get(label, 0.0) + tottime
    return out, total


def env_stack(n_steps: int) -> tuple[cProfile.Profile, float]:
    """The profile of ``n_steps`` random steps of the monitored stack, and its steps/s without the profiler."""
    from env_overhead import make_stack, run_maze

    sps = run_maze(make_stack, n_steps, 0, epoch_every=10_000)
    profile = cProfile.Profile()
    profile.enable()
    run_maze(make_stack, n_steps, 0, epoch_every=10_000)
    profile.disable()
    return profile, sps


def ppo_training(n_updates: int) -> tuple[cProfile.Profile, float]:
    """The profile of ``n_updates`` PPO updates with ppo_cartpole.py's settings (evaluation included, once per 10
    updates), and the env steps/s of the same training without the profiler."""
    import torch
    from training_utils import cartpole_factory, flat_actor_critic

    from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
    from maze_lab.train.trainers.common.schedules import LinearSchedule
    from maze_lab.train.trainers.ppo import PPO, PPOAlgorithmConfig
    from maze_lab.train.vector_env import SequentialVectorEnv

    def trainer() -> PPO:
        torch.manual_seed(0)
        config = PPOAlgorithmConfig(n_epochs=max(1, n_updates // 10), epoch_length=10, n_rollout_steps=32,
                                    lr=LinearSchedule(1e-3, 0.0), gamma=0.98, gae_lambda=0.8, entropy_coef=0.0,
                                    batch_size=256, n_optimization_epochs=20, clip_range=LinearSchedule(0.2, 0.0),
                                    max_grad_norm=0.5, seed=0, patience=0)
        evaluator = RolloutEvaluator(SequentialVectorEnv([cartpole_factory] * 8, logging_prefix="eval"),
                                     n_episodes=8, deterministic=True)
        return PPO(config, flat_actor_critic(cartpole_factory()),
                   env=SequentialVectorEnv([cartpole_factory] * 8, logging_prefix="train"), evaluator=evaluator)

    plain = trainer()
    start = time.perf_counter()
    plain.train()
    sps = plain.env_steps / (time.perf_counter() - start)
    profiled = trainer()
    profile = cProfile.Profile()
    profile.enable()
    profiled.train()
    profile.disable()
    return profile, sps


def _table(title: str, profile: cProfile.Profile, sps: float, unit: str) -> dict[str, float]:
    """Print the shares of a profile; returns them (fractions of the profiled time) by part."""
    buckets, total = shares(profile)
    print(f"\n{title}: {sps:,.0f} {unit} without the profiler; own time under the profiler {total:.2f} s")
    for label, seconds in sorted(buckets.items(), key=lambda kv: -kv[1]):
        print(f"  {label:<38}{100 * seconds / total:>6.1f} %")
    return {label: seconds / total for label, seconds in buckets.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50_000, help="env steps of the env-stack profile")
    parser.add_argument("--updates", type=int, default=40, help="PPO updates of the training profile")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    profile, sps = env_stack(args.steps)
    stack = _table("monitored CartPole env stack (GymMazeEnv + monitoring + LogStats)", profile, sps, "steps/s")
    stack_share = 1.0 - stack.get("raw Gymnasium", 0.0)
    profile, sps = ppo_training(args.updates)
    ppo = _table("PPO on CartPole (ppo_cartpole.py settings)", profile, sps, "env steps/s")
    torch_share = ppo.get("torch (Python)", 0.0) + ppo.get("torch (C operations)", 0.0)
    print(f"bench: profile_hot_path env_stack_not_gymnasium={stack_share:.2f} ppo_torch_share={torch_share:.2f}")


if __name__ == "__main__":
    main()
