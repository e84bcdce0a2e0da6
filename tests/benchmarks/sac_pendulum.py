"""maze-lab SAC vs Stable-Baselines3 SAC and a lean bare-PyTorch SAC loop on Pendulum-v1, all with the RL Zoo's
Pendulum-v1 settings.

The bare-PyTorch loop (``bare_torch_sac.py``) is what a user would write by hand for this one task in eager PyTorch
and raw Gymnasium: the ceiling that maze-lab's overhead is measured against (``steps_per_s_vs_bare_torch``).

The RL Zoo's ``Pendulum-v1`` entry of ``hyperparams/sac.yml`` sets only lr 1e-3; everything else is SB3's SAC
default, which both sides here set explicitly:

- one env; policy and two Q networks of 256x256 ReLU (the Q networks take observation and action side by side);
- batch 256, replay buffer 1,000,000, 100 uniformly random env steps before learning (SB3 ``learning_starts=100``,
  maze-lab ``initial_buffer_size=100``), then one env step and one gradient step at a time (SB3 ``train_freq=1``,
  ``gradient_steps=1``; maze-lab ``n_rollout_steps=1``, ``num_batches_per_iter=1``);
- tau 0.005, target update every gradient step, gamma 0.99, no gradient clipping, Adam (eps 1e-8);
- alpha tuned from 1.0 towards the target entropy -dim(A) = -1;
- learning rate 1e-3 for the policy, the Q networks and alpha. SB3 uses one lr for all three; maze-lab has its own
  ``entropy_coef_lr`` (0.0007 by default), set to 1e-3 here for the comparison.

maze-lab runs ``experiment=pendulum_sac`` through ``RunContext`` with ``algorithm.entropy_coef_lr=0.001`` and
nothing else changed that affects training; the run's statistics, TensorBoard files and checkpoints are written
as in any run and count as training time. SB3 runs ``SAC("MlpPolicy", ...)`` on ``make_vec_env("Pendulum-v1")``.
All use one torch thread. Per seed the systems run one after the other, the order rotating by seed.

Evaluation (the same code for both): the deterministic policy on 10 Pendulum-v1 episodes side by side, reset with
the fixed seeds 10,000 ... 10,009, after every 1,000 gradient steps, i.e. at 1,100, 2,100, ... env steps (the 100
random steps come first on both sides; maze-lab's epochs of 1,000 updates end there). The target is a mean reward
better than -250; a seed that does not reach it within the cap is reported as not reached and counts as inf in
the medians. A run stops at the first evaluation that reaches the target, or at the cap.

Timing: a wall clock starts when training starts (maze-lab: ``RunContext.train``, the trainer already built; SB3:
its ``_on_training_start`` callback) and is read when each evaluation begins; the time spent evaluating is
subtracted. Steps/s is the env steps at the last evaluation of the run divided by the training time up to it (so
the random steps, the gradient steps, the env steps and any per-epoch bookkeeping count; evaluation, model
construction and teardown do not). The time to -250 is the training time up to the evaluation that first reached
it.

Differences that remain (algorithmic, not settings): maze-lab's squashed Gaussian measures log-probabilities in
the env's action units ([-2, 2]; SB3 in [-1, 1]), so its target entropy is SB3's -1 moved by log 2 into those
units (the same target; checked below), its Q networks see the action
in env units (SB3: scaled to [-1, 1]), its networks start from normc initialisation (SB3: torch's default), and
its critic loss is the sum of the two MSEs (SB3: half of it; Adam makes this scale irrelevant).

Run: python tests/benchmarks/sac_pendulum.py [--seeds 3] [--max-steps 20000]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET = -250.0
EVAL_EPISODES = 10
EVAL_SEEDS = [10_000 + i for i in range(EVAL_EPISODES)]
EVAL_EVERY = 1_000
RANDOM_STEPS = 100
LR = 1e-3


class Result(NamedTuple):
    """One run: training steps per second, seconds and env steps to the target (None where not reached), the best
    evaluation and the number of evaluations."""

    steps_per_s: float
    solved_s: float | None
    solved_steps: int | None
    best: float
    evals: int


class EvalClock:
    """Training time with evaluations taken out, and the evaluations against the target."""

    def __init__(self) -> None:
        self.start: float | None = None
        self.eval_time = 0.0
        self.last: tuple[int, float] = (0, 0.0)  # (env steps, training seconds) at the latest evaluation
        self.solved: tuple[int, float] | None = None
        self.best = -np.inf
        self.evals = 0

    def evaluate(self, env_steps: int, act: Callable[[np.ndarray], np.ndarray]) -> float:
        """Stop the training clock, evaluate, note the result; returns the mean reward."""
        t = time.perf_counter()
        train_s = t - self.start - self.eval_time
        reward = evaluate(act)
        self.eval_time += time.perf_counter() - t
        self.last = (env_steps, train_s)
        self.evals += 1
        self.best = max(self.best, reward)
        if self.solved is None and reward > TARGET:
            self.solved = (env_steps, train_s)
        return reward

    def result(self) -> Result:
        steps, seconds = self.last
        solved_s, solved_steps = (None, None) if self.solved is None else (self.solved[1], self.solved[0])
        return Result(steps / seconds, solved_s, solved_steps, self.best, self.evals)


_EVAL_ENVS: list = []


def evaluate(act: Callable[[np.ndarray], np.ndarray]) -> float:
    """Mean reward of ``act`` (a batch of observations -> a batch of actions in env units) on the fixed evaluation
    episodes, all run side by side (Pendulum episodes all last 200 steps)."""
    import gymnasium as gym

    if not _EVAL_ENVS:
        _EVAL_ENVS.extend(gym.make("Pendulum-v1") for _ in EVAL_SEEDS)
    obs = np.stack([env.reset(seed=s)[0] for env, s in zip(_EVAL_ENVS, EVAL_SEEDS, strict=True)])
    totals = np.zeros(len(_EVAL_ENVS))
    done = np.zeros(len(_EVAL_ENVS), dtype=bool)
    while not done.all():
        actions = act(obs)
        for i, env in enumerate(_EVAL_ENVS):
            if not done[i]:
                obs[i], reward, terminated, truncated, _ = env.step(actions[i])
                totals[i] += reward
                done[i] = terminated or truncated
    return float(totals.mean())


def run_maze(seed: int, max_steps: int, out_dir: str) -> Result:
    """maze-lab SAC: experiment=pendulum_sac with alpha's lr set to the shared lr."""
    from maze_lab.run.run_context import RunContext

    rc = RunContext(experiment="pendulum_sac",
                    overrides={"seed": seed, "log_base_dir": out_dir, "algorithm.entropy_coef_lr": LR},
                    silent=True)
    trainer = rc.trainer
    cfg = trainer.config
    assert (cfg.lr, cfg.entropy_coef_lr, cfg.batch_size, cfg.initial_buffer_size, cfg.entropy_coef) == \
        (LR, LR, 256, RANDOM_STEPS, 1.0), cfg
    assert (cfg.n_rollout_steps, cfg.num_batches_per_iter, cfg.tau, cfg.gamma, cfg.replay_buffer_size) == \
        (1, 1, 0.005, 0.99, 1_000_000), cfg
    assert cfg.epoch_length == EVAL_EVERY and trainer.env.n_envs == 1, cfg
    assert abs(trainer.target_entropy - (-1.0 + math.log(2.0))) < 1e-9, trainer.target_entropy
    policy = trainer.policy
    clock = EvalClock()

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return policy.compute_action({"observation": obs}, deterministic=True)["action"]

    def evaluate_now(*_args: Any, epoch: int | None = None, **_kwargs: Any) -> float:
        # replaces the run's own evaluator: the protocol above, the same as SB3's
        reward = clock.evaluate(trainer.env_steps, act)
        trainer.model_selection.update(reward, epoch or 0)
        return reward

    trainer.evaluator.evaluate = evaluate_now

    def on_epoch(tr: Any, _stats: Any) -> None:
        if clock.solved is not None or tr.env_steps >= RANDOM_STEPS + max_steps:
            tr.request_stop()

    trainer.callbacks.append(on_epoch)
    clock.start = time.perf_counter()
    try:
        rc.train(n_epochs=0)
    finally:
        rc.close()
    return clock.result()


def run_sb3(seed: int, max_steps: int) -> Result:
    """Stable-Baselines3 SAC with the RL Zoo's Pendulum-v1 settings, each written out."""
    from stable_baselines3 import SAC as SB3SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("Pendulum-v1", n_envs=1, seed=seed)
    model = SB3SAC("MlpPolicy", env, learning_rate=LR, buffer_size=1_000_000, learning_starts=RANDOM_STEPS,
                   batch_size=256, tau=0.005, gamma=0.99, train_freq=1, gradient_steps=1, ent_coef="auto_1.0",
                   target_update_interval=1, target_entropy="auto",
                   policy_kwargs={"net_arch": [256, 256], "activation_fn": torch.nn.ReLU, "n_critics": 2},
                   seed=seed, device="cpu", verbose=0)
    clock = EvalClock()

    def act(obs: np.ndarray) -> np.ndarray:
        return model.predict(obs, deterministic=True)[0]

    def due(steps: int) -> bool:
        return steps > RANDOM_STEPS and (steps - RANDOM_STEPS) % EVAL_EVERY == 0

    class EvalAndStop(BaseCallback):
        def _on_training_start(self) -> None:
            clock.start = time.perf_counter()

        def _on_rollout_start(self) -> None:
            # one env step per rollout: here the gradient step of the previous one is done
            steps = self.model.num_timesteps
            if due(steps) and clock.solved is None:
                clock.evaluate(steps, act)

        def _on_step(self) -> bool:
            return clock.solved is None

    model.learn(total_timesteps=RANDOM_STEPS + max_steps, callback=EvalAndStop())
    if clock.solved is None and due(model.num_timesteps) and clock.last[0] < model.num_timesteps:
        clock.evaluate(model.num_timesteps, act)  # the last step's gradient step ends learn(): no rollout follows
    env.close()
    return clock.result()


def _fmt_s(r: Result) -> str:
    return "not reached" if r.solved_s is None else f"{r.solved_s:.1f}"


def _fmt_steps(r: Result) -> str:
    return "not reached" if r.solved_steps is None else f"{r.solved_steps:,}"


def _spread(values: list[float], fmt: str) -> str:
    """median (min-max), inf shown as 'not reached'."""
    if not any(np.isfinite(v) for v in values):
        return "not reached"

    def f(v: float) -> str:
        return "not reached" if not np.isfinite(v) else format(v, fmt)
    return f"{f(statistics.median(values))} ({f(min(values))} - {f(max(values))})"


def main() -> None:
    """Run the three on several seeds, print the tables and the bench line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3, help="number of seeds (0 .. N-1); default 3")
    parser.add_argument("--max-steps", type=int, default=20_000,
                        help="cap of learning env steps after the 100 random ones; default 20,000")
    args = parser.parse_args()
    if args.max_steps < EVAL_EVERY:
        parser.error(f"--max-steps must be at least {EVAL_EVERY} (one evaluation)")
    max_steps = args.max_steps // EVAL_EVERY * EVAL_EVERY
    seeds = list(range(args.seeds))
    torch.set_num_threads(1)
    from bare_torch_sac import run_bare_sac

    names = ("maze-lab", "SB3", "bare")
    rows: dict[str, list[Result]] = {name: [] for name in names}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sac_pendulum_") as out_dir:
        runs = {"maze-lab": lambda seed: run_maze(seed, max_steps, out_dir),
                "SB3": lambda seed: run_sb3(seed, max_steps),
                "bare": lambda seed: run_bare_sac(seed, max_steps, EvalClock(), RANDOM_STEPS, EVAL_EVERY, LR)}
        for seed in seeds:
            order = names[seed % 3:] + names[:seed % 3]
            for name in order:
                result = runs[name](seed)
                rows[name].append(result)
                print(f"  seed {seed} {name}: {result.steps_per_s:.0f} steps/s, to {TARGET:.0f}: {_fmt_s(result)} s"
                      f" / {_fmt_steps(result)} env steps", flush=True)

    print(f"\nSAC on Pendulum-v1 (RL Zoo settings, lr 1e-3 for policy, Q and alpha), seeds {seeds}, cap "
          f"{RANDOM_STEPS + max_steps:,} env steps ({RANDOM_STEPS} random + {max_steps:,}), one torch thread")
    print(f"target: deterministic eval mean of {EVAL_EPISODES} fixed episodes > {TARGET:.0f}, evaluated every "
          f"{EVAL_EVERY:,} env steps from {RANDOM_STEPS + EVAL_EVERY:,}; evaluation time not counted")
    print(f"{'seed':<6}{'system':<10}{'steps/s':>9}{'s to -250':>13}{'steps to -250':>15}{'best eval':>11}"
          f"{'evals':>7}")
    for i, seed in enumerate(seeds):
        for name in names:
            r = rows[name][i]
            print(f"{seed:<6}{name:<10}{r.steps_per_s:>9.1f}{_fmt_s(r):>13}{_fmt_steps(r):>15}{r.best:>11.1f}"
                  f"{r.evals:>7}")
    print("\nmedian (min - max); a seed that did not reach -250 counts as inf")
    print(f"{'system':<10}{'steps/s':>24}{'s to -250':>30}{'env steps to -250':>32}{'reached':>9}")
    summary = {}
    for name in names:
        results = rows[name]
        sps = [r.steps_per_s for r in results]
        times = [r.solved_s if r.solved_s is not None else float("inf") for r in results]
        steps = [float(r.solved_steps) if r.solved_steps is not None else float("inf") for r in results]
        reached = sum(r.solved_s is not None for r in results)
        summary[name] = (statistics.median(sps), statistics.median(times))
        print(f"{name:<10}{_spread(sps, '.1f'):>24}{_spread(times, '.1f'):>30}{_spread(steps, ',.0f'):>32}"
              f"{reached:>7}/{len(results)}")
    print(f"total wall time {time.perf_counter() - started:.0f} s")
    (maze_sps, maze_t), (sb3_sps, sb3_t) = summary["maze-lab"], summary["SB3"]
    time_ratio = maze_t / sb3_t if np.isfinite(sb3_t) else float("nan")
    print(f"bench: sac_pendulum steps_per_s_vs_sb3={maze_sps / sb3_sps:.2f} time_to_solve_vs_sb3={time_ratio:.2f} "
          f"steps_per_s_vs_bare_torch={maze_sps / summary['bare'][0]:.2f}")


if __name__ == "__main__":
    main()
