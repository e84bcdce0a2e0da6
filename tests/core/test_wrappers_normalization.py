"""ObservationNormalizationWrapper: estimated and manual statistics against numpy, dumps, errors, factories."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from dict_env import DictImageEnv

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.core.wrappers.observation_normalization import (
    ObservationNormalizationWrapper,
    RandomSamplingPolicy,
    load_normalization_statistics,
    make_normalized_env_factory,
    obtain_normalization_statistics,
    save_normalization_statistics,
)
from maze_lab.core.wrappers.time_limit_wrapper import TimeLimitWrapper

MEAN_STD = "MeanZeroStdOneObservationNormalizationStrategy"
RANGE = "RangeZeroOneObservationNormalizationStrategy"


def _sampled_observations(make_env, n_samples: int, seed: int) -> dict[str, np.ndarray]:
    """The raw observations the estimate sees: reset(seed), random actions, reset after each episode."""
    env = make_env()
    policy = RandomSamplingPolicy(env.action_spaces_dict, seed=seed)
    obs, _ = env.reset(seed=seed)
    seen = [obs]
    for _ in range(n_samples):
        obs, _, terminated, truncated, _ = env.step(policy.compute_action(obs, actor_id=env.actor_id()))
        seen.append(obs)
        if terminated or truncated:
            obs, _ = env.reset()
            seen.append(obs)
    return {k: np.stack([np.asarray(o[k], np.float64) for o in seen]) for k in seen[0]}


def _cartpole() -> Any:
    return TimeLimitWrapper(GymMazeEnv("CartPole-v1"), max_episode_steps=30)


def test_estimated_mean_std_matches_numpy_and_normalizes_observations():
    env = ObservationNormalizationWrapper(_cartpole(), statistics_dump=None)
    assert env.observation_space == _cartpole().observation_space  # unchanged until statistics exist
    stats = obtain_normalization_statistics(env, n_samples=150, seed=3)
    data = _sampled_observations(_cartpole, 150, seed=3)["observation"]
    assert stats["observation"]["mean"].shape == ()  # axis None: one scalar for all elements
    np.testing.assert_allclose(stats["observation"]["mean"], data.mean(), rtol=1e-5)
    np.testing.assert_allclose(stats["observation"]["std"], data.std(), rtol=1e-5)

    raw_env = _cartpole()
    obs, raw = env.reset(seed=9)[0], raw_env.reset(seed=9)[0]
    for t in range(5):
        expected = (raw["observation"] - stats["observation"]["mean"]) / stats["observation"]["std"]
        np.testing.assert_allclose(obs["observation"], expected, rtol=1e-6)
        assert obs["observation"].dtype == np.float32 and env.observation_space.contains(obs)
        obs, raw = env.step({"action": t % 2})[0], raw_env.step({"action": t % 2})[0]


def test_per_element_statistics_with_axis_and_clipping():
    env = ObservationNormalizationWrapper(_cartpole(), statistics_dump=None,
                                          default_strategy_config={"clip_range": [-1.0, 1.0], "axis": [0]})
    stats = obtain_normalization_statistics(env, n_samples=100, seed=0)
    data = _sampled_observations(_cartpole, 100, seed=0)["observation"]
    np.testing.assert_allclose(stats["observation"]["mean"], data.mean(axis=0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(stats["observation"]["std"], data.std(axis=0), rtol=1e-5)
    space = env.observation_space["observation"]
    np.testing.assert_array_equal(space.low, -1.0)
    np.testing.assert_array_equal(space.high, 1.0)
    obs, _ = env.reset(seed=1)
    for t in range(20):
        assert np.all(np.abs(obs["observation"]) <= 1.0)
        obs, _, term, trunc, _ = env.step({"action": int(t % 3 == 0)})
        if term or trunc:
            break


def test_range_zero_one_default_statistics_and_pass_through_of_excluded_and_discrete():
    env = ObservationNormalizationWrapper(
        GymMazeEnv(DictImageEnv()), default_strategy=RANGE, statistics_dump=None,
        default_strategy_config={"clip_range": [0, 1], "axis": None}, default_statistics={"min": 0, "max": 255},
        exclude=["feature_vector"])
    assert set(env.strategies) == {"rgb_image"}  # excluded and Discrete observations pass through
    assert env.observation_space["rgb_image"] == gym.spaces.Box(0.0, 1.0, (12, 16, 3), np.float32)
    raw = GymMazeEnv(DictImageEnv()).reset(seed=2)[0]
    obs, _ = env.reset(seed=2)
    np.testing.assert_allclose(obs["rgb_image"], raw["rgb_image"] / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(obs["feature_vector"], raw["feature_vector"])
    assert obs["categorical_feature"] == raw["categorical_feature"]
    assert obtain_normalization_statistics(env, n_samples=5) == env.get_normalization_statistics()


def test_manual_config_mixes_given_and_estimated_statistics():
    env = ObservationNormalizationWrapper(
        GymMazeEnv(DictImageEnv()), statistics_dump=None,
        manual_config={
            "rgb_image": {"strategy": RANGE, "strategy_config": {"clip_range": [0, 1]},
                          "statistics": {"min": 0, "max": 255}},
            "feature_vector": {"strategy": MEAN_STD, "strategy_config": {"clip_range": [-3, 3], "axis": [0]}},
        })
    stats = obtain_normalization_statistics(env, n_samples=40, seed=5)
    data = _sampled_observations(lambda: GymMazeEnv(DictImageEnv()), 40, seed=5)
    np.testing.assert_array_equal(stats["rgb_image"]["max"], 255.0)
    assert stats["feature_vector"]["mean"].shape == (3,)
    np.testing.assert_allclose(stats["feature_vector"]["mean"], data["feature_vector"].mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(stats["feature_vector"]["std"], data["feature_vector"].std(axis=0), rtol=1e-5)


class CountingPolicy:
    """A sampling policy built from a _target_ config; always picks action 1 and counts its calls."""

    def __init__(self, action_spaces_dict: dict, value: int = 1):
        self.action_spaces_dict = action_spaces_dict
        self.value = value
        self.calls = 0

    def compute_action(self, observation: Any, actor_id: Any = None) -> dict:
        """The fixed action."""
        self.calls += 1
        return {"action": self.value}


@pytest.mark.parametrize("suffix", [".json", ".npz"])
def test_statistics_dump_round_trip_skips_sampling(tmp_path, suffix):
    path = tmp_path / f"stats{suffix}"
    env = ObservationNormalizationWrapper(_cartpole(), statistics_dump=str(path),
                                          default_strategy_config={"axis": [0]},
                                          sampling_policy={"_target_": CountingPolicy, "value": 0})
    assert isinstance(env.sampling_policy, CountingPolicy) and env.sampling_policy.value == 0
    stats = obtain_normalization_statistics(env, n_samples=30, seed=0)
    assert env.sampling_policy.calls == 30 and path.exists()
    loaded = load_normalization_statistics(path)
    for stat in ("mean", "std"):
        np.testing.assert_array_equal(loaded["observation"][stat], stats["observation"][stat])

    # a new env with the same dump file loads the statistics and needs no sampling
    again = ObservationNormalizationWrapper(_cartpole(), statistics_dump=str(path),
                                            sampling_policy={"_target_": CountingPolicy})
    assert again.has_all_statistics()
    same = obtain_normalization_statistics(again, n_samples=30)
    assert again.sampling_policy.calls == 0
    np.testing.assert_array_equal(same["observation"]["std"], stats["observation"]["std"])
    np.testing.assert_array_equal(again.reset(seed=4)[0]["observation"], env.reset(seed=4)[0]["observation"])


def test_dump_refuses_pickle_and_foreign_files(tmp_path):
    with pytest.raises(ValueError, match="pickle is not supported"):
        ObservationNormalizationWrapper(_cartpole(), statistics_dump="statistics.pkl")
    foreign = tmp_path / "other.json"
    foreign.write_text(json.dumps({"observation": {"mean": 0}}))
    with pytest.raises(ValueError, match="not a maze-lab normalization statistics file"):
        load_normalization_statistics(foreign)
    path = save_normalization_statistics({"x": {"min": np.zeros((2, 2), np.float32), "max": np.float32(3)}},
                                         tmp_path / "sub" / "s.json")
    back = load_normalization_statistics(path)
    assert back["x"]["min"].shape == (2, 2) and back["x"]["max"].shape == () and back["x"]["max"] == 3.0


def test_statistics_errors_name_key_and_shapes():
    env = ObservationNormalizationWrapper(_cartpole(), statistics_dump=None, n_samples=None)
    with pytest.raises(RuntimeError, match="no normalization statistics for observation 'observation'"):
        env.reset(seed=0)
    with pytest.raises(ValueError, match=r"'mean' of observation 'observation' has shape \(5,\).*shape \(4,\)"):
        env.set_normalization_statistics({"observation": {"mean": np.zeros(5), "std": np.ones(4)}})
    with pytest.raises(ValueError, match=r"need the keys \['mean', 'std'\]"):
        env.set_normalization_statistics({"observation": {"min": 0, "max": 1}})
    with pytest.raises(KeyError, match="unknown or unnormalized observations"):
        env.set_normalization_statistics({"pixels": {"mean": 0, "std": 1}})
    with pytest.raises(ConfigurationError, match=f"unknown normalization strategy 'MeanStd'.*{MEAN_STD}.*{RANGE}"):
        ObservationNormalizationWrapper(_cartpole(), default_strategy="MeanStd", statistics_dump=None)
    with pytest.raises(ConfigurationError, match=f"manual_config\\['observation'\\].*{RANGE}"):
        ObservationNormalizationWrapper(_cartpole(), statistics_dump=None,
                                        manual_config={"observation": {"strategy": "maze.Unknown"}})
    with pytest.raises(ConfigurationError, match=r"exclude names unknown observation 'mask'"):
        ObservationNormalizationWrapper(_cartpole(), statistics_dump=None, exclude=["mask"])
    with pytest.raises(ConfigurationError, match="only Box observations can be normalized"):
        ObservationNormalizationWrapper(GymMazeEnv(DictImageEnv()), statistics_dump=None,
                                        manual_config={"categorical_feature": {}})


def test_normalized_env_factory_assigns_statistics():
    stats = {"observation": {"mean": np.array([0.0, 1.0, 0.0, -1.0], np.float32), "std": np.float32(2.0)}}

    def factory() -> ObservationNormalizationWrapper:
        return TimeLimitWrapper(ObservationNormalizationWrapper(GymMazeEnv("CartPole-v1"), statistics_dump=None), 10)

    env = make_normalized_env_factory(factory, stats)()
    raw = GymMazeEnv("CartPole-v1").reset(seed=6)[0]["observation"]
    np.testing.assert_allclose(env.reset(seed=6)[0]["observation"], (raw - stats["observation"]["mean"]) / 2.0)
    with pytest.raises(TypeError, match="without an ObservationNormalizationWrapper"):
        make_normalized_env_factory(_cartpole, stats)()
    assert obtain_normalization_statistics(_cartpole(), n_samples=5) is None
