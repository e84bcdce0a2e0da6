"""TimeLimit, RandomReset, SortedSpaces, NoDict/Dict and reward wrappers on real Gymnasium envs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from dict_env import DictImageEnv

from maze_lab.core.wrappers.dict_action_wrapper import DictActionWrapper
from maze_lab.core.wrappers.dict_observation_wrapper import DictObservationWrapper
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.core.wrappers.no_dict_spaces_wrapper import (
    NoDictActionWrapper,
    NoDictObservationWrapper,
    NoDictSpacesWrapper,
)
from maze_lab.core.wrappers.observation_preprocessing.preprocessing_wrapper import PreProcessingWrapper
from maze_lab.core.wrappers.random_reset_wrapper import RandomResetWrapper
from maze_lab.core.wrappers.return_normalization_reward_wrapper import ReturnNormalizationRewardWrapper
from maze_lab.core.wrappers.reward_clipping_wrapper import RewardClippingWrapper
from maze_lab.core.wrappers.reward_scaling_wrapper import RewardScalingWrapper
from maze_lab.core.wrappers.sorted_spaces_wrapper import SortedSpacesWrapper
from maze_lab.core.wrappers.time_limit_wrapper import TimeLimitWrapper


def _alternate(t: int) -> dict:
    return {"action": t % 2}


def test_time_limit_sets_truncated_at_the_limit_and_restarts_on_reset():
    env = TimeLimitWrapper.wrap(GymMazeEnv("CartPole-v1"), max_episode_steps=5)
    for _ in range(2):
        env.reset(seed=0)
        flags = [env.step(_alternate(t))[2:4] for t in range(5)]
        assert flags == [(False, False)] * 4 + [(False, True)]
        assert env.elapsed_steps == 5


def test_time_limit_counts_env_time_including_random_reset_steps():
    env = TimeLimitWrapper(RandomResetWrapper(GymMazeEnv("CartPole-v1"), min_skip_steps=2, max_skip_steps=2),
                           max_episode_steps=5)
    env.reset(seed=1)
    assert env.get_env_time() == 2
    truncated = [env.step(_alternate(t))[3] for t in range(3)]
    assert truncated == [False, False, True]


def test_time_limit_disabled_and_guards():
    env = TimeLimitWrapper(GymMazeEnv("CartPole-v1"), max_episode_steps=None)
    with pytest.raises(RuntimeError, match="before reset"):
        env.step({"action": 0})
    env.reset(seed=0)
    assert not any(env.step(_alternate(t))[3] for t in range(20))
    with pytest.raises(ValueError, match="non-negative"):
        TimeLimitWrapper(GymMazeEnv("CartPole-v1"), max_episode_steps=-3)


def test_random_reset_is_seeded_and_within_bounds():
    env = RandomResetWrapper(GymMazeEnv("CartPole-v1"), min_skip_steps=1, max_skip_steps=6)
    first, _ = env.reset(seed=7)
    n_first = env.last_skip_steps
    again, _ = env.reset(seed=7)
    assert env.last_skip_steps == n_first and 1 <= n_first <= 6
    np.testing.assert_array_equal(first["observation"], again["observation"])
    assert env.get_env_time() == n_first
    counts = set()
    for _ in range(30):
        env.reset()
        counts.add(env.last_skip_steps)
    assert counts <= set(range(1, 7)) and len(counts) > 2
    # the observation after skipping differs from the plain reset observation of the same seed
    plain, _ = GymMazeEnv("CartPole-v1").reset(seed=7)
    assert not np.array_equal(plain["observation"], first["observation"])
    with pytest.raises(ValueError, match="min_skip_steps"):
        RandomResetWrapper(GymMazeEnv("CartPole-v1"), min_skip_steps=5, max_skip_steps=2)


def test_sorted_spaces_sorts_space_and_observation_keys():
    env = PreProcessingWrapper(GymMazeEnv(DictImageEnv()), pre_processor_mapping=[
        {"observation": "categorical_feature", "_target_": "OneHotPreProcessor"}])
    assert list(env.observation_space.spaces) == ["feature_vector", "rgb_image", "categorical_feature-one_hot"]
    env = SortedSpacesWrapper(env)
    expected = ["categorical_feature-one_hot", "feature_vector", "rgb_image"]
    assert list(env.observation_spaces_dict[0].spaces) == expected
    obs, _ = env.reset(seed=0)
    assert list(obs) == expected
    assert list(env.step({"action": 1})[0]) == expected


def test_no_dict_spaces_unpacks_observations_and_actions():
    raw = gym.make("CartPole-v1")
    env = NoDictSpacesWrapper(GymMazeEnv("CartPole-v1"))
    assert env.observation_space == raw.observation_space
    assert env.action_space == gym.spaces.Discrete(2)
    expected, _ = raw.reset(seed=3)
    obs, _ = env.reset(seed=3)
    np.testing.assert_array_equal(obs, expected)
    for t in range(4):
        np.testing.assert_array_equal(env.step(t % 2)[0], raw.step(t % 2)[0])
    assert env.reverse_action({"action": 1}) == 1


def test_no_dict_needs_single_entry():
    with pytest.raises(ValueError, match=r"policy key 0 has \['categorical_feature', 'feature_vector', 'rgb_image'\]"):
        NoDictSpacesWrapper(GymMazeEnv(DictImageEnv()))
    env = NoDictActionWrapper(GymMazeEnv(DictImageEnv()))
    assert env.action_space == gym.spaces.Discrete(4)
    assert isinstance(env.observation_space, gym.spaces.Dict)
    env.reset(seed=0)
    obs = env.step(2)[0]
    assert set(obs) == {"categorical_feature", "feature_vector", "rgb_image"}


def test_dict_wrappers_undo_no_dict_wrappers():
    env = NoDictActionWrapper(NoDictObservationWrapper(GymMazeEnv("Pendulum-v1")))
    assert isinstance(env.observation_space, gym.spaces.Box) and isinstance(env.action_space, gym.spaces.Box)
    env = DictActionWrapper(DictObservationWrapper(env, key="state"), key="torque")
    assert list(env.observation_space.spaces) == ["state"] and list(env.action_space.spaces) == ["torque"]
    raw = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=5)
    np.testing.assert_array_equal(obs["state"], raw.reset(seed=5)[0])
    action = np.array([0.7], dtype=np.float32)
    np.testing.assert_allclose(env.step({"torque": action})[0]["state"], raw.step(action)[0])
    with pytest.raises(TypeError, match="already has a Dict"):
        DictObservationWrapper(GymMazeEnv("Pendulum-v1"))


class _TupleEnv(gym.Env):
    """Records the last action; Tuple action and observation spaces."""

    def __init__(self):
        self.action_space = gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,), np.float32)))
        self.observation_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (1,), np.float32)))
        self.last_action = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return (1, np.zeros(1, np.float32)), {}

    def step(self, action):
        self.last_action = action
        return (0, np.ones(1, np.float32)), 0.0, False, False, {}


def test_dict_wrappers_split_tuple_spaces():
    inner = _TupleEnv()
    env = NoDictActionWrapper(NoDictObservationWrapper(GymMazeEnv(inner, check_spaces=False)))
    env = DictActionWrapper(DictObservationWrapper(env))
    assert list(env.action_space.spaces) == ["action_0", "action_1"]
    assert list(env.observation_space.spaces) == ["observation_0", "observation_1"]
    obs, _ = env.reset()
    assert obs["observation_0"] == 1
    action = {"action_0": 2, "action_1": np.array([0.5, -0.5], np.float32)}
    obs = env.step(action)[0]
    assert isinstance(inner.last_action, tuple) and inner.last_action[0] == 2
    np.testing.assert_array_equal(inner.last_action[1], [0.5, -0.5])
    assert env.reverse_action((1, np.zeros(2)))["action_0"] == 1
    np.testing.assert_array_equal(obs["observation_1"], [1.0])


def _pendulum_rewards(seed: int, actions: list[float]) -> list[float]:
    raw = gym.make("Pendulum-v1")
    raw.reset(seed=seed)
    return [float(raw.step(np.array([a], np.float32))[1]) for a in actions]


ACTIONS = [2.0, -1.0, 0.5, 0.0, -2.0, 1.5, 1.0, -0.5, 0.25, 2.0]


def test_reward_scaling_and_clipping():
    env = RewardScalingWrapper(GymMazeEnv("CartPole-v1"), scale=0.5)
    env.reset(seed=0)
    assert env.step({"action": 0})[1] == 0.5

    expected = np.clip(_pendulum_rewards(0, ACTIONS), -3.0, -1.0)
    env = RewardClippingWrapper(GymMazeEnv("Pendulum-v1"), min_val=-3.0, max_val=-1.0)
    env.reset(seed=0)
    got = [env.step({"action": np.array([a], np.float32)})[1] for a in ACTIONS]
    np.testing.assert_allclose(got, expected)
    assert got[0] == -1.0 and got[-1] == -3.0 and -3.0 < got[4] < -1.0
    with pytest.raises(ValueError, match="larger than max_val"):
        RewardClippingWrapper(GymMazeEnv("Pendulum-v1"), min_val=1.0, max_val=0.0)


def test_return_normalization_divides_by_running_std_of_discounted_return():
    gamma, eps = 0.9, 1e-8
    env = ReturnNormalizationRewardWrapper(TimeLimitWrapper(GymMazeEnv("Pendulum-v1"), max_episode_steps=5),
                                           gamma=gamma, epsilon=eps)
    got, raw, returns = [], [], []
    for episode, seed in enumerate([11, 12]):
        acts = ACTIONS[5 * episode:5 * episode + 5]
        raw_rewards = _pendulum_rewards(seed, acts)
        env.reset(seed=seed)
        g = 0.0
        for a, r in zip(acts, raw_rewards, strict=True):
            _, reward, _, truncated, _ = env.step({"action": np.array([a], np.float32)})
            got.append(reward)
            g = gamma * g + r  # restarts at every reset
            returns.append(g)
            raw.append(r)
        assert truncated
    expected = [r / np.sqrt(np.var(returns[:i + 1]) + eps) for i, r in enumerate(raw)]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert env.count == 10 and env.var == pytest.approx(np.var(returns))
