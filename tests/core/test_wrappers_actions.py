"""SplitActionsWrapper and DiscretizeActionsWrapper: spaces, action mapping and config errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.core.wrappers.discretize_actions_wrapper import DiscretizeActionsWrapper
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.core.wrappers.split_actions_wrapper import SplitActionsWrapper


class RecordingEnv(gym.Env):
    """Remembers the last action it received; the observation is constant."""

    def __init__(self, action_space: gym.spaces.Space):
        self.action_space = action_space
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.last_action = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.last_action = action
        return np.zeros(2, np.float32), 0.0, False, False, {}


def _env(space: gym.spaces.Space) -> tuple[GymMazeEnv, RecordingEnv]:
    inner = RecordingEnv(space)
    env = GymMazeEnv(inner)
    return env, inner


def test_split_multi_discrete_into_discrete_and_multi_discrete():
    env, inner = _env(gym.spaces.MultiDiscrete([3, 4, 5]))
    env = SplitActionsWrapper(env, split_config={"action": {"move": {"indices": [0]}, "turn": {"indices": [2, 1]}}})
    assert env.action_space == gym.spaces.Dict({"move": gym.spaces.Discrete(3),
                                                "turn": gym.spaces.MultiDiscrete([5, 4])})
    env.reset(seed=0)
    env.step({"move": 2, "turn": np.array([4, 1])})
    np.testing.assert_array_equal(inner.last_action, [2, 1, 4])
    back = env.reverse_action({"action": np.array([1, 3, 0])})
    assert back["move"] == 1
    np.testing.assert_array_equal(back["turn"], [0, 3])
    for _ in range(5):  # random split actions map to valid original actions
        env.step(env.action_space.sample())
        assert inner.action_space.contains(inner.last_action)


def test_split_box_keeps_bounds():
    low, high = np.array([-1.0, -2.0, 0.0], np.float32), np.array([1.0, 2.0, 5.0], np.float32)
    env, inner = _env(gym.spaces.Box(low, high, dtype=np.float32))
    env = SplitActionsWrapper(env, {"action": {"up": {"indices": [0]}, "side": {"indices": [1, 2]}}})
    assert env.action_space["up"] == gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    np.testing.assert_array_equal(env.action_space["side"].high, [2.0, 5.0])
    env.reset()
    env.step({"up": np.array([0.5], np.float32), "side": np.array([-1.5, 4.0], np.float32)})
    np.testing.assert_array_equal(inner.last_action, [0.5, -1.5, 4.0])
    assert inner.last_action.dtype == np.float32


def test_split_discrete_factorises_row_major():
    env, inner = _env(gym.spaces.Discrete(6))
    env = SplitActionsWrapper(env, {"action": {"vertical": {"n": 2}, "horizontal": {"n": 3}}})
    assert env.action_space == gym.spaces.Dict({"vertical": gym.spaces.Discrete(2),
                                                "horizontal": gym.spaces.Discrete(3)})
    env.reset()
    seen = set()
    for v in range(2):
        for h in range(3):
            env.step({"vertical": v, "horizontal": h})
            assert inner.last_action == v * 3 + h
            seen.add(inner.last_action)
            assert env.reverse_action({"action": v * 3 + h}) == {"vertical": v, "horizontal": h}
    assert seen == set(range(6))


def test_split_config_errors_name_the_problem():
    env, _ = _env(gym.spaces.MultiDiscrete([3, 4, 5]))
    with pytest.raises(ConfigurationError, match=r"missing \[2\], repeated \[0\]"):
        SplitActionsWrapper(env, {"action": {"a": {"indices": [0]}, "b": {"indices": [0, 1]}}})
    with pytest.raises(ConfigurationError, match=r"unknown action 'act'; available actions: \['action'\]"):
        SplitActionsWrapper(env, {"act": {"a": {"indices": [0]}}})
    env, _ = _env(gym.spaces.Discrete(6))
    with pytest.raises(ConfigurationError, match="multiply to 4, not 6"):
        SplitActionsWrapper(env, {"action": {"a": {"n": 2}, "b": {"n": 2}}})


def test_discretize_pendulum_torque_into_bin_centres():
    env = DiscretizeActionsWrapper(GymMazeEnv("Pendulum-v1"), {"action": {"num_bins": 5}})
    assert env.action_space == gym.spaces.Dict({"action": gym.spaces.Discrete(5)})
    np.testing.assert_allclose(env.bin_centers("action")[:, 0], [-1.6, -0.8, 0.0, 0.8, 1.6])
    raw = gym.make("Pendulum-v1")
    raw.reset(seed=4)
    env.reset(seed=4)
    for index, torque in [(4, 1.6), (0, -1.6), (2, 0.0)]:
        action = env.action({"action": index})["action"]
        assert action.dtype == np.float32 and action.shape == (1,)
        np.testing.assert_allclose(action, [torque], atol=1e-6)
        np.testing.assert_allclose(env.step({"action": index})[0]["observation"],
                                   raw.step(np.array([torque], np.float32))[0], rtol=1e-6)
    assert env.reverse_action({"action": np.array([1.7])}) == {"action": 4}
    assert env.reverse_action({"action": np.array([-2.0])}) == {"action": 0}
    assert env.reverse_action({"action": np.array([0.1])}) == {"action": 2}


def test_discretize_vector_with_custom_range():
    env, inner = _env(gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
    env = DiscretizeActionsWrapper(env, {"action": {"num_bins": 4, "low": [-1.0, 0.0], "high": 1.0}})
    assert env.action_space["action"] == gym.spaces.MultiDiscrete([4, 4])
    env.reset()
    env.step({"action": np.array([0, 3])})
    np.testing.assert_allclose(inner.last_action, [-0.75, 0.875])
    np.testing.assert_array_equal(env.reverse_action({"action": np.array([0.9, 0.1])})["action"], [3, 0])


def test_discretize_config_errors():
    with pytest.raises(ConfigurationError, match="num_bins must be an int >= 2"):
        DiscretizeActionsWrapper(GymMazeEnv("Pendulum-v1"), {"action": {"num_bins": 1}})
    with pytest.raises(ConfigurationError, match="space.low <= low < high <= space.high"):
        DiscretizeActionsWrapper(GymMazeEnv("Pendulum-v1"), {"action": {"num_bins": 3, "low": -3.0}})
    with pytest.raises(ConfigurationError, match=r"unknown keys \['bins'\]"):
        DiscretizeActionsWrapper(GymMazeEnv("Pendulum-v1"), {"action": {"num_bins": 3, "bins": 2}})
    with pytest.raises(ConfigurationError, match="only 1-D Box"):
        DiscretizeActionsWrapper(GymMazeEnv("CartPole-v1"), {"action": {"num_bins": 3}})
