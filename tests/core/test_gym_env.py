"""GymMazeEnv (Gymnasium env as MazeEnv) and GymnasiumEnvAdapter (maze-lab env as Gymnasium env)."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from dict_env import DictImageEnv
from gymnasium.utils.env_checker import check_env

from maze_lab.core.env.structured_env import ActorID
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv, GymnasiumEnvAdapter
from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.core.wrappers.monitoring_wrapper import MazeEnvMonitoringWrapper


def _check(env):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)


def test_cartpole_as_maze_env():
    env = GymMazeEnv("CartPole-v1")
    assert env.observation_spaces_dict[0] == gym.spaces.Dict({"observation": gym.make("CartPole-v1").observation_space})
    assert env.action_spaces_dict[0] == gym.spaces.Dict({"action": gym.spaces.Discrete(2)})
    assert env.actor_id() == ActorID(0, 0) and env.agent_counts_dict == {0: 1} and env.is_flat
    obs, info = env.reset(seed=3)
    raw = gym.make("CartPole-v1")
    raw_obs, _ = raw.reset(seed=3)
    np.testing.assert_array_equal(obs["observation"], raw_obs)
    for _ in range(5):
        obs, reward, terminated, truncated, _ = env.step({"action": 1})
        raw_obs, raw_reward, *_ = raw.step(1)
        np.testing.assert_array_equal(obs["observation"], raw_obs)
        assert reward == raw_reward


def test_truncation_passes_through():
    env = GymMazeEnv("CartPole-v1", max_episode_steps=4)
    env.reset(seed=0)
    flags = [env.step({"action": i % 2})[2:4] for i in range(4)]
    assert flags[-1] == (False, True)


def test_gym_env_instance_and_dict_spaces_pass_through():
    env = GymMazeEnv(DictImageEnv())
    assert set(env.observation_spaces_dict[0].spaces) == set(DictImageEnv().observation_space.spaces)


def test_renderer_draws_frame():
    env = GymMazeEnv("CartPole-v1")
    env.reset(seed=0)
    frame = env.render()
    assert frame.ndim == 3 and frame.shape[2] == 3 and frame.std() > 0


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_check_env_through_adapter(env_id):
    _check(GymnasiumEnvAdapter(GymMazeEnv(env_id)))


def test_check_env_dict_space_env():
    _check(GymnasiumEnvAdapter(GymMazeEnv(DictImageEnv())))


def test_check_env_with_logging_stack():
    env = LogStatsWrapper.wrap(MazeEnvMonitoringWrapper.wrap(GymMazeEnv("Pendulum-v1")))
    _check(GymnasiumEnvAdapter(env))


def test_adapter_trains_like_plain_gym():
    env = GymnasiumEnvAdapter(GymMazeEnv("CartPole-v1"))
    obs, _ = env.reset(seed=1)
    assert env.observation_space.contains(obs)
    obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
    assert env.observation_space.contains(obs) and reward == 1.0


def test_rgb_frames_on_a_headless_machine_print_no_sdl_error() -> None:
    """The first render of CartPole printed "error: XDG_RUNTIME_DIR is invalid or not set in the environment." on
    a machine without a display (in every notebook that shows a frame); frames need no window."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR",
                                                            "SDL_VIDEODRIVER")}
    code = ("from maze_lab import GymMazeEnv\nenv = GymMazeEnv('CartPole-v1')\nenv.reset(seed=0)\n"
            "print(env.render().shape)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(400, 500, 3)"
    assert "XDG_RUNTIME_DIR" not in out.stderr and "error" not in out.stderr.lower()
