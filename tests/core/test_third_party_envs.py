"""Envs maze-lab does not own leave their declared bounds: a Gymnasium env's observation a little outside its Box
warns once per key with the value and trains (training and evaluation envs alike, one setting), where maze-lab's
own envs keep the strict check; LunarLander-v3, which does this, trains with the default config."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from maze_lab import GymMazeEnv, RunContext
from maze_lab.core.env.space_checks import ObservationBoundsWarning, SpaceMismatchError

TINY = {"n_epochs": 1, "algorithm.epoch_length": 2, "algorithm.n_rollout_steps": 32, "algorithm.eval_repeats": 2}


class OverhangEnv(gym.Env):
    """Declares positions in [-1, 1] but reports 1.004 now and then (as LunarLander reports 2.505 against 2.5)."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._t = 0

    def _obs(self) -> np.ndarray:
        return np.array([1.004 if self._t % 3 == 2 else 0.5, -0.5], np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._t += 1
        return self._obs(), float(action), False, self._t >= 10, {}


def test_gymnasium_env_outside_its_bounds_warns_once_per_key() -> None:
    env = GymMazeEnv(OverhangEnv())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env.reset(seed=0)
        for _ in range(9):
            env.step({"action": 1})
    bounds = [w for w in caught if issubclass(w.category, ObservationBoundsWarning)]
    assert len(bounds) == 1, [str(w.message) for w in caught]
    message = str(bounds[0].message)
    assert "observation['observation']" in message and "1.004" in message and "[1] " not in message.split(":")[0]
    assert "\n" not in message


def test_strict_bounds_for_maze_lab_envs_and_on_request() -> None:
    env = GymMazeEnv(OverhangEnv(), observation_bounds="error")
    env.reset(seed=0)
    env.step({"action": 0})
    with pytest.raises(SpaceMismatchError, match=r"outside the bounds.*1\.004"):
        env.step({"action": 0})
    with pytest.raises(ValueError, match="observation bounds must be one of"):
        GymMazeEnv(OverhangEnv(), observation_bounds="ignore")


def test_maze_lab_core_envs_keep_the_strict_check() -> None:
    from maze_lab.core.env.maze_env import MazeEnv
    from maze_lab.examples.cutting2d import maze_env_factory

    env = maze_env_factory()
    assert isinstance(env, MazeEnv) and env.observation_bounds == "error"


def test_an_env_outside_its_bounds_trains_and_evaluates(tmp_path: Path) -> None:
    rc = RunContext(env=lambda: GymMazeEnv(OverhangEnv()), overrides={**TINY, "log_base_dir": str(tmp_path)},
                    silent=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ObservationBoundsWarning)
        rc.train()
    from maze_lab import load_run

    summary = load_run(rc.run_dir).summary
    assert summary["status"] == "done", summary.get("error")
    evaluated = rc.stats[rc.stats.prefix == "eval"]
    assert len(evaluated), "the evaluation envs ran too"


@pytest.mark.skipif(importlib.util.find_spec("Box2D") is None, reason="needs Box2D (pip install box2d)")
def test_lunar_lander_trains_with_the_default_config(tmp_path: Path) -> None:
    rc = RunContext(overrides={**TINY, "env.name": "LunarLander-v3", "n_epochs": 2, "log_base_dir": str(tmp_path)},
                    silent=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ObservationBoundsWarning)
        rc.train()
    from maze_lab import load_run

    summary = load_run(rc.run_dir).summary
    assert summary["status"] == "done" and summary["epoch"] == 2, summary.get("error")
