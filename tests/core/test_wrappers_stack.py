"""ObservationStackWrapper: stacking order, zero padding, deltas, spaces and config errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from dict_env import DictImageEnv

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.core.wrappers.observation_stack_wrapper import ObservationStackWrapper


def _run(env, n_steps: int) -> list[dict]:
    obs, _ = env.reset(seed=0)
    out = [obs]
    for t in range(n_steps):
        out.append(env.step({"action": t % 2})[0])
    return out


def test_stack_oldest_first_with_zero_padding():
    env = ObservationStackWrapper(GymMazeEnv("CartPole-v1"), stack_config=[
        {"observation": "observation", "keep_original": True, "tag": "stacked", "delta": False, "stack_steps": 3}])
    space = env.observation_space["observation-stacked"]
    assert space.shape == (3, 4) and space.dtype == np.float32
    assert list(env.observation_space.spaces) == ["observation", "observation-stacked"]
    obs = _run(env, 4)
    raw = [o["observation"] for o in obs]
    zero = np.zeros(4, np.float32)
    np.testing.assert_array_equal(obs[0]["observation-stacked"], np.stack([zero, zero, raw[0]]))
    np.testing.assert_array_equal(obs[1]["observation-stacked"], np.stack([zero, raw[0], raw[1]]))
    np.testing.assert_array_equal(obs[3]["observation-stacked"], np.stack(raw[1:4]))
    np.testing.assert_array_equal(obs[4]["observation-stacked"], np.stack(raw[2:5]))
    assert all(env.observation_space.contains(o) for o in obs)
    # a reset starts a fresh stack
    again, _ = env.reset(seed=1)
    np.testing.assert_array_equal(again["observation-stacked"][:2], 0.0)


def test_delta_stack_holds_step_differences_and_the_current_value():
    base = GymMazeEnv("CartPole-v1")
    env = ObservationStackWrapper(base, stack_config=[
        {"observation": "observation", "tag": None, "delta": True, "stack_steps": 3}])
    assert list(env.observation_space.spaces) == ["observation"]
    plain = [o["observation"] for o in _run(GymMazeEnv("CartPole-v1"), 3)]
    stacked = [o["observation"] for o in _run(env, 3)]
    np.testing.assert_array_equal(stacked[1], np.stack([np.zeros(4), plain[1] - plain[0], plain[1]]))
    np.testing.assert_allclose(stacked[3], np.stack([plain[2] - plain[1], plain[3] - plain[2], plain[3]]))
    low, high = env.observation_space["observation"].low, env.observation_space["observation"].high
    np.testing.assert_allclose(low[0, 0], -9.6, rtol=1e-6)  # x in [-4.8, 4.8]: deltas in [-9.6, 9.6]
    np.testing.assert_allclose(high[-1], base.observation_space["observation"].high)


def test_stack_images_keeps_dtype_and_delta_turns_float():
    env = ObservationStackWrapper(GymMazeEnv(DictImageEnv()), stack_config=[
        {"observation": "rgb_image", "tag": "stacked", "stack_steps": 2},
        {"observation": "feature_vector", "tag": "delta", "delta": True, "stack_steps": 2, "keep_original": True}])
    spaces = env.observation_space.spaces
    assert spaces["rgb_image-stacked"] == gym.spaces.Box(0, 255, (2, 12, 16, 3), np.uint8)
    assert "rgb_image" not in spaces and "feature_vector" in spaces
    np.testing.assert_array_equal(spaces["feature_vector-delta"].low, [[-2.0] * 3, [-1.0] * 3])
    obs, _ = env.reset(seed=0)
    nxt = env.step({"action": 0})[0]
    np.testing.assert_array_equal(nxt["rgb_image-stacked"][0], obs["rgb_image-stacked"][1])
    np.testing.assert_allclose(nxt["feature_vector-delta"][0], nxt["feature_vector"] - obs["feature_vector"])
    assert env.observation_space.contains(nxt)


def test_stack_config_errors():
    with pytest.raises(ConfigurationError, match="keep_original needs a tag"):
        ObservationStackWrapper(GymMazeEnv("CartPole-v1"), [{"observation": "observation", "keep_original": True,
                                                              "stack_steps": 2}])
    with pytest.raises(ConfigurationError, match=r"unknown observation 'obs'; available observations: \['observ"):
        ObservationStackWrapper(GymMazeEnv("CartPole-v1"), [{"observation": "obs", "stack_steps": 2}])
    with pytest.raises(ConfigurationError, match=r"unknown keys \['steps'\]"):
        ObservationStackWrapper(GymMazeEnv("CartPole-v1"), [{"observation": "observation", "stack_steps": 2,
                                                              "steps": 3}])
    with pytest.raises(TypeError, match="only Box observations"):
        ObservationStackWrapper(GymMazeEnv(DictImageEnv()), [{"observation": "categorical_feature", "stack_steps": 2}])
