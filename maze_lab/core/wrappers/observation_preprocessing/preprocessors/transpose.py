"""TransposePreProcessor: permutes the axes of an array."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np

from maze_lab.core.wrappers.observation_preprocessing.preprocessors.base import PreProcessor


class TransposePreProcessor(PreProcessor):
    """Permutes the axes, e.g. ``axes=[2, 0, 1]`` turns an (H, W, C) image into (C, H, W).

    :param observation_space: a Box space.
    :param axes: the permutation, as for ``numpy.transpose``.
    """

    tag = "transpose"

    def __init__(self, observation_space: gym.spaces.Box, axes: Sequence[int]):
        super().__init__(observation_space)
        space = self._require_box()
        self.axes = tuple(int(a) for a in axes)
        if sorted(a % len(space.shape) for a in self.axes) != list(range(len(space.shape))):
            raise ValueError(f"TransposePreProcessor: axes {list(self.axes)} are no permutation of the "
                             f"{len(space.shape)} axes of shape {space.shape}")

    def processed_space(self) -> gym.spaces.Box:
        """The Box with permuted shape and bounds."""
        space = self.observation_space
        return gym.spaces.Box(low=self.process(space.low), high=self.process(space.high), dtype=space.dtype)

    def process(self, observation: np.ndarray) -> np.ndarray:
        """The transposed array (a contiguous copy)."""
        return np.ascontiguousarray(np.transpose(observation, self.axes))
