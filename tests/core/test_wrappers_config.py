"""Built-in wrappers from config (wrap_env, registry errors) and Gymnasium's env checker on wrapped stacks."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from dict_env import DictImageEnv
from gymnasium.utils.env_checker import check_env
from omegaconf import OmegaConf

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.core.wrappers.builtin import (
    DiscretizeActionsWrapper,
    ObservationNormalizationWrapper,
    ObservationStackWrapper,
    PreProcessingWrapper,
    RandomResetWrapper,
    RewardClippingWrapper,
    SortedSpacesWrapper,
    SplitActionsWrapper,
    TimeLimitWrapper,
)
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv, GymnasiumEnvAdapter
from maze_lab.core.wrappers.observation_normalization import obtain_normalization_statistics
from maze_lab.core.wrappers.wrapper import wrap_env

PRE = "maze_lab.core.wrappers.observation_preprocessing.preprocessing_wrapper.PreProcessingWrapper"
IMAGE_PIPELINE = [
    {"observation": "rgb_image", "_target_": "Rgb2GrayPreProcessor", "keep_original": False, "config": {"rgb_dim": -1}},
    {"observation": "rgb_image-rgb2gray", "_target_": "ResizeImgPreProcessor", "config": {"target_size": [6, 8]}},
    {"observation": "rgb_image-rgb2gray-resize_img", "_target_": "UnSqueezePreProcessor", "config": {"dim": -3}},
    {"observation": "categorical_feature", "_target_": "OneHotPreProcessor"},
]

def test_wrap_env_applies_wrappers_in_order_from_names_and_paths():
    env = wrap_env(GymMazeEnv("CartPole-v1"), {
        "TimeLimitWrapper": {"max_episode_steps": 5},
        "maze_lab.core.wrappers.observation_stack_wrapper.ObservationStackWrapper": {
            "stack_config": [{"observation": "observation", "tag": "stacked", "keep_original": True,
                              "stack_steps": 2}]},
        "maze.core.wrappers.reward_scaling_wrapper.RewardScalingWrapper": {"scale": 2.0},
    })
    assert type(env).__name__ == "RewardScalingWrapper"
    assert isinstance(env.env, ObservationStackWrapper) and isinstance(env.env.env, TimeLimitWrapper)
    obs, _ = env.reset(seed=0)
    assert obs["observation-stacked"].shape == (2, 4)
    results = [env.step({"action": t % 2}) for t in range(5)]
    assert [r[1] for r in results] == [2.0] * 5 and results[-1][3] is True


def test_wrap_env_accepts_omegaconf_and_unknown_names_list_the_registry():
    cfg = OmegaConf.create({"RandomResetWrapper": {"min_skip_steps": 1, "max_skip_steps": 1},
                            "TimeLimitWrapper": {"max_episode_steps": 3}})
    env = wrap_env(GymMazeEnv("CartPole-v1"), cfg)
    env.reset(seed=0)
    assert [env.step({"action": t % 2})[3] for t in range(2)] == [False, True]
    with pytest.raises(ConfigurationError, match="unknown wrapper 'TimeLimit'.*PreProcessingWrapper.*TimeLimitWrapper"):
        wrap_env(GymMazeEnv("CartPole-v1"), {"TimeLimit": {"max_episode_steps": 3}})
    with pytest.raises(ConfigurationError, match="TimeLimitWrapper"):
        wrap_env(GymMazeEnv("CartPole-v1"), {"TimeLimitWrapper": {"max_steps": 3}})


def test_wrap_env_with_pre_processing_and_normalization_config():
    env = wrap_env(GymMazeEnv(DictImageEnv()), {
        "TimeLimitWrapper": {"max_episode_steps": 5},
        PRE: {"pre_processor_mapping": IMAGE_PIPELINE},
        "ObservationNormalizationWrapper": {
            "statistics_dump": None,
            "sampling_policy": {"_target_": "maze_lab.core.wrappers.observation_normalization.RandomSamplingPolicy"},
            "exclude": ["categorical_feature-one_hot"]},
    })
    assert isinstance(env.env, PreProcessingWrapper)
    assert env.env.observation_space["rgb_image-rgb2gray-resize_img-unsqueeze"].shape == (1, 6, 8)
    stats = obtain_normalization_statistics(env, n_samples=20, seed=0)
    assert set(stats) == {"feature_vector", "rgb_image-rgb2gray-resize_img-unsqueeze"}
    with pytest.raises(ConfigurationError, match="unknown pre-processor 'Gray'.*Rgb2GrayPreProcessor"):
        wrap_env(GymMazeEnv(DictImageEnv()), {PRE: {"pre_processor_mapping": [
            {"observation": "rgb_image", "_target_": "Gray"}]}})


def _image_stack() -> object:
    env = GymMazeEnv(DictImageEnv())
    env = PreProcessingWrapper(env, pre_processor_mapping=IMAGE_PIPELINE)
    env = ObservationStackWrapper(env, [{"observation": "feature_vector", "tag": "stacked", "delta": True,
                                         "stack_steps": 3, "keep_original": True}])
    env = ObservationNormalizationWrapper(
        env, statistics_dump=None, exclude=["categorical_feature-one_hot"],
        manual_config={"rgb_image-rgb2gray-resize_img-unsqueeze": {
            "strategy": "RangeZeroOneObservationNormalizationStrategy", "statistics": {"min": 0, "max": 255}}})
    obtain_normalization_statistics(env, n_samples=50, seed=0)
    env = TimeLimitWrapper(env, max_episode_steps=6)
    env = RandomResetWrapper(env, min_skip_steps=0, max_skip_steps=2)
    return SortedSpacesWrapper(env)


def _pendulum_stack() -> object:
    env = GymMazeEnv("Pendulum-v1")
    env = ObservationNormalizationWrapper(env, statistics_dump=None, default_strategy_config={"axis": [0]})
    obtain_normalization_statistics(env, n_samples=50, seed=0)
    env = DiscretizeActionsWrapper(env, {"action": {"num_bins": 7}})
    # (ReturnNormalizationRewardWrapper is left out: its running statistics make rewards depend on history)
    return RewardClippingWrapper(env, min_val=-5.0, max_val=0.0)


def _split_stack() -> object:
    env = GymMazeEnv(gym.make("CartPole-v1"))
    env = SplitActionsWrapper(env, {"action": {"push": {"n": 2}, "noop": {"n": 1}}})
    return ObservationStackWrapper(env, [{"observation": "observation", "stack_steps": 4}])


@pytest.mark.parametrize("make", [_image_stack, _pendulum_stack, _split_stack])
def test_wrapped_envs_pass_the_gymnasium_env_checker(make):
    adapter = GymnasiumEnvAdapter(make())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(adapter, skip_render_check=True)
    obs, _ = adapter.reset(seed=1)
    assert adapter.observation_space.contains(obs)
    for _ in range(8):
        obs, _, terminated, truncated, _ = adapter.step(adapter.action_space.sample())
        assert adapter.observation_space.contains(obs)
        if terminated or truncated:
            obs, _ = adapter.reset()


def test_dict_image_env_passes_the_env_checker_and_is_deterministic():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(DictImageEnv(render_mode="rgb_array"))
    a, b = DictImageEnv(), DictImageEnv()
    oa, ob = a.reset(seed=42)[0], b.reset(seed=42)[0]
    for t in range(10):
        for key in oa:
            np.testing.assert_array_equal(oa[key], ob[key])
        ra, rb = a.step(t % 4), b.step(t % 4)
        assert ra[1:4] == rb[1:4] and ra[2] == (t == 9)
        oa, ob = ra[0], rb[0]
    env = DictImageEnv(episode_length=2)
    obs, _ = env.reset(seed=0)
    _, reward, terminated, _, _ = env.step(int(obs["categorical_feature"]))
    assert reward == 1.0 and not terminated
    assert env.step(0)[2] is True
