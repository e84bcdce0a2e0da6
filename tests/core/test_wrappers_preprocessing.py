"""PreProcessingWrapper and the built-in pre-processors: names, spaces, values, cascading and config errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from dict_env import DictImageEnv

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.core.wrappers.observation_preprocessing import (
    FlattenPreProcessor,
    OneHotPreProcessor,
    PreProcessingWrapper,
    PreProcessor,
    ResizeImgPreProcessor,
    resolve_pre_processor,
)

LUMA = np.array([0.299, 0.587, 0.114], np.float32)


def _pair(mapping: list[dict], seed: int = 0) -> tuple[PreProcessingWrapper, list[dict], list[dict]]:
    """The wrapped env plus processed and raw observations of the same seeded steps."""
    env = PreProcessingWrapper(GymMazeEnv(DictImageEnv()), pre_processor_mapping=mapping)
    raw_env = GymMazeEnv(DictImageEnv())
    processed, raw = [env.reset(seed=seed)[0]], [raw_env.reset(seed=seed)[0]]
    for a in range(3):
        processed.append(env.step({"action": a})[0])
        raw.append(raw_env.step({"action": a})[0])
    return env, processed, raw


def test_seed_example_rgb2gray_kept_and_one_hot_replaced():
    env, processed, raw = _pair([
        {"observation": "rgb_image", "_target_": "Rgb2GrayPreProcessor", "keep_original": True, "config": {}},
        {"observation": "categorical_feature", "_target_": "OneHotPreProcessor", "keep_original": False,
         "config": {}}])
    spaces = env.observation_space.spaces
    assert set(spaces) == {"rgb_image", "rgb_image-rgb2gray", "categorical_feature-one_hot", "feature_vector"}
    assert spaces["rgb_image-rgb2gray"] == gym.spaces.Box(0.0, 255.0, (12, 16), np.float32)
    assert spaces["categorical_feature-one_hot"] == gym.spaces.Box(0.0, 1.0, (4,), np.float32)
    for p, r in zip(processed, raw, strict=True):
        np.testing.assert_array_equal(p["rgb_image"], r["rgb_image"])
        np.testing.assert_allclose(p["rgb_image-rgb2gray"], r["rgb_image"].astype(np.float32) @ LUMA, rtol=1e-6)
        np.testing.assert_array_equal(p["categorical_feature-one_hot"], np.eye(4)[r["categorical_feature"]])
        assert env.observation_space.contains(p)


def test_seed_example_cascade_gray_resize_unsqueeze():
    env, processed, raw = _pair([
        {"observation": "rgb_image", "_target_": "Rgb2GrayPreProcessor", "config": {"rgb_dim": -1}},
        {"observation": "rgb_image-rgb2gray", "_target_": "ResizeImgPreProcessor",
         "config": {"target_size": [6, 8], "transpose": False}},
        {"observation": "rgb_image-rgb2gray-resize_img", "_target_": "UnSqueezePreProcessor", "config": {"dim": -3}}])
    key = "rgb_image-rgb2gray-resize_img-unsqueeze"
    assert list(env.observation_space.spaces) == ["categorical_feature", "feature_vector", key]
    assert env.observation_space[key].shape == (1, 6, 8)
    gray = raw[2]["rgb_image"].astype(np.float32) @ LUMA
    # downscaling by exactly 2 with half-pixel centres averages each 2x2 block
    expected = gray.reshape(6, 2, 8, 2).mean(axis=(1, 3))
    np.testing.assert_allclose(processed[2][key][0], expected, rtol=1e-5)
    assert all(env.observation_space.contains(p) for p in processed)


@pytest.mark.parametrize("size", [(6, 8), (20, 24), (5, 16)])
def test_resize_matches_torch_bilinear(size):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    img = rng.uniform(0, 1, size=(12, 16, 3)).astype(np.float32)
    pre = ResizeImgPreProcessor(gym.spaces.Box(0.0, 1.0, (12, 16, 3), np.float32), target_size=size)
    ref = torch.nn.functional.interpolate(torch.from_numpy(img).permute(2, 0, 1)[None], size=size, mode="bilinear",
                                          align_corners=False)[0].permute(1, 2, 0).numpy()
    np.testing.assert_allclose(pre.process(img), ref, atol=1e-6)
    assert pre.processed_space().shape == (*size, 3)
    # channels-first images (transpose=True) and uint8 rounding
    chw = ResizeImgPreProcessor(gym.spaces.Box(0, 255, (3, 12, 16), np.uint8), target_size=size, transpose=True)
    img8 = rng.integers(0, 256, size=(3, 12, 16), dtype=np.uint8)
    ref8 = torch.nn.functional.interpolate(torch.from_numpy(img8.astype(np.float32))[None], size=size,
                                           mode="bilinear", align_corners=False)[0].numpy()
    out = chw.process(img8)
    assert out.dtype == np.uint8 and out.shape == (3, *size)
    assert np.abs(out.astype(np.float64) - ref8).max() <= 0.5 + 1e-3  # torch computes in float32


def test_flatten_transpose_and_one_hot_values():
    env, processed, raw = _pair([
        {"observation": "rgb_image", "_target_": "TransposePreProcessor", "keep_original": True,
         "config": {"axes": [2, 0, 1]}},
        {"observation": "rgb_image", "_target_": "FlattenPreProcessor", "config": {"num_flatten_dims": 2}}])
    spaces = env.observation_space.spaces
    assert spaces["rgb_image-transpose"].shape == (3, 12, 16) and spaces["rgb_image-transpose"].dtype == np.uint8
    assert spaces["rgb_image-flatten"] == gym.spaces.Box(0, 255, (12, 48), np.uint8)
    assert "rgb_image" not in spaces  # both entries read it; it is dropped after all of them ran
    np.testing.assert_array_equal(processed[1]["rgb_image-transpose"], np.transpose(raw[1]["rgb_image"], (2, 0, 1)))
    np.testing.assert_array_equal(processed[1]["rgb_image-flatten"], raw[1]["rgb_image"].reshape(12, 48))
    assert FlattenPreProcessor(gym.spaces.Box(0, 1, (2, 3, 4)), num_flatten_dims=3).processed_space().shape == (24,)

    multi = OneHotPreProcessor(gym.spaces.MultiDiscrete([3, 2]))
    np.testing.assert_array_equal(multi.process(np.array([2, 1])), [[0, 0, 1], [0, 1, 0]])
    shifted = OneHotPreProcessor(gym.spaces.Discrete(3, start=5))
    np.testing.assert_array_equal(shifted.process(6), [0, 1, 0])
    with pytest.raises(TypeError, match="OneHotPreProcessor needs"):
        OneHotPreProcessor(gym.spaces.Box(-1.0, 1.0, (2,)))


class DoublePreProcessor(PreProcessor):
    """Doubles a Box observation (a user-defined pre-processor)."""

    tag = "double"

    def processed_space(self) -> gym.spaces.Box:
        """Doubled bounds."""
        s = self.observation_space
        return gym.spaces.Box(s.low * 2, s.high * 2, dtype=s.dtype)

    def process(self, observation: np.ndarray) -> np.ndarray:
        """Twice the value."""
        return observation * 2


class NamedByModulePreProcessor(PreProcessor):
    """Tag defaults to the module file name."""

    def processed_space(self) -> gym.spaces.Space:
        """Unchanged."""
        return self.observation_space

    def process(self, observation):
        """Unchanged."""
        return observation


def test_custom_pre_processor_by_name_dotted_path_and_class():
    assert NamedByModulePreProcessor.tag == __name__.rsplit(".", 1)[-1]
    for target in ["DoublePreProcessor", f"{__name__}.DoublePreProcessor", DoublePreProcessor,
                   "maze.preprocessors.DoublePreProcessor"]:
        env, processed, raw = _pair([{"observation": "feature_vector", "_target_": target}])
        np.testing.assert_allclose(processed[1]["feature_vector-double"], raw[1]["feature_vector"] * 2)
        assert env.observation_space["feature_vector-double"].high[0] == 2.0
    assert resolve_pre_processor("maze_lab.core.wrappers.observation_preprocessing.preprocessors."
                                 "Rgb2GrayPreProcessor").tag == "rgb2gray"


def test_pre_processing_config_errors_list_valid_names():
    env = GymMazeEnv(DictImageEnv())
    with pytest.raises(ConfigurationError, match=r"unknown pre-processor 'GrayPreProcessor'.*Rgb2GrayPreProcessor"):
        PreProcessingWrapper(env, [{"observation": "rgb_image", "_target_": "GrayPreProcessor"}])
    with pytest.raises(ConfigurationError, match=r"Rgb2GrayPreProcessor has no parameter\(s\) \['num_flatten_dims'\]; "
                                                 r"valid parameters: \['rgb_dim'\]"):
        PreProcessingWrapper(env, [{"observation": "rgb_image", "_target_": "Rgb2GrayPreProcessor",
                                    "config": {"num_flatten_dims": 2}}])
    with pytest.raises(ConfigurationError, match=r"no policy key has the observation 'rgb'.*'rgb_image'"):
        PreProcessingWrapper(env, [{"observation": "rgb", "_target_": "Rgb2GrayPreProcessor"}])
    with pytest.raises(ConfigurationError, match=r"unknown keys \['keep'\]"):
        PreProcessingWrapper(env, [{"observation": "rgb_image", "_target_": "Rgb2GrayPreProcessor", "keep": True}])
    with pytest.raises(ValueError, match="must have length 3"):
        PreProcessingWrapper(env, [{"observation": "rgb_image", "_target_": "Rgb2GrayPreProcessor",
                                    "config": {"rgb_dim": 0}}])
