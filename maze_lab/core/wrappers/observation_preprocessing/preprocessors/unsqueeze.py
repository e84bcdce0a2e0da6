"""UnSqueezePreProcessor: inserts a dimension of size one."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from maze_lab.core.wrappers.observation_preprocessing.preprocessors.base import PreProcessor


class UnSqueezePreProcessor(PreProcessor):
    """Inserts an axis of length one at ``dim`` (as ``numpy.expand_dims``), e.g. (96, 96) with -3 -> (1, 96, 96).

    :param observation_space: a Box space.
    :param dim: the position of the new axis in the result.
    """

    tag = "unsqueeze"

    def __init__(self, observation_space: gym.spaces.Box, dim: int = 0):
        super().__init__(observation_space)
        space = self._require_box()
        rank = len(space.shape) + 1
        if not -rank <= dim < rank:
            raise ValueError(f"UnSqueezePreProcessor: dim must be in [{-rank}, {rank}) for shape {space.shape}, "
                             f"got {dim}")
        self.dim = int(dim)

    def processed_space(self) -> gym.spaces.Box:
        """The Box with the extra axis."""
        space = self.observation_space
        return gym.spaces.Box(low=self.process(space.low), high=self.process(space.high), dtype=space.dtype)

    def process(self, observation: np.ndarray) -> np.ndarray:
        """The array with the extra axis."""
        return np.expand_dims(observation, self.dim)
