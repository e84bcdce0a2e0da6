"""Rgb2GrayPreProcessor: converts RGB images to gray scale."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from maze_lab.core.wrappers.observation_preprocessing.preprocessors.base import PreProcessor

# ITU-R BT.601 luma weights
_LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)


class Rgb2GrayPreProcessor(PreProcessor):
    """Replaces the colour axis ``rgb_dim`` (of length 3) by its luma, a float32 image on the same value scale.

    :param observation_space: a Box image space with three colour channels.
    :param rgb_dim: the colour axis, -1 for (H, W, 3) images and 0 for (3, H, W).
    """

    tag = "rgb2gray"

    def __init__(self, observation_space: gym.spaces.Box, rgb_dim: int = -1):
        super().__init__(observation_space)
        space = self._require_box()
        if not -len(space.shape) <= rgb_dim < len(space.shape) or space.shape[rgb_dim] != 3:
            raise ValueError(f"Rgb2GrayPreProcessor: axis rgb_dim={rgb_dim} of shape {space.shape} must have "
                             f"length 3")
        self.rgb_dim = int(rgb_dim)

    def processed_space(self) -> gym.spaces.Box:
        """A float32 Box without the colour axis."""
        space = self.observation_space
        # the weights are positive, so the bounds map to the bounds (computed the same way, rounding included)
        low, high = self.process(space.low), self.process(space.high)
        return gym.spaces.Box(low=low, high=high, dtype=np.float32)

    def process(self, observation: np.ndarray) -> np.ndarray:
        """The gray-scale image."""
        rgb = np.moveaxis(np.asarray(observation, dtype=np.float32), self.rgb_dim, -1)
        return rgb @ _LUMA
