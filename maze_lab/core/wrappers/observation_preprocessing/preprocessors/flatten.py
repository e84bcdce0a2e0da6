"""FlattenPreProcessor: merges the trailing dimensions of an array into one."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from maze_lab.core.wrappers.observation_preprocessing.preprocessors.base import PreProcessor


class FlattenPreProcessor(PreProcessor):
    """Flattens the last ``num_flatten_dims`` dimensions, e.g. (4, 5, 6) with 2 -> (4, 30).

    :param observation_space: a Box space.
    :param num_flatten_dims: how many trailing dimensions to merge (all of them when it equals the rank).
    """

    tag = "flatten"

    def __init__(self, observation_space: gym.spaces.Box, num_flatten_dims: int = 1):
        super().__init__(observation_space)
        space = self._require_box()
        if not 1 <= num_flatten_dims <= len(space.shape):
            raise ValueError(f"FlattenPreProcessor: num_flatten_dims must be in [1, {len(space.shape)}] for shape "
                             f"{space.shape}, got {num_flatten_dims}")
        self.num_flatten_dims = num_flatten_dims
        keep = space.shape[:len(space.shape) - num_flatten_dims]
        self.shape = (*keep, int(np.prod(space.shape[len(keep):])))

    def processed_space(self) -> gym.spaces.Box:
        """The Box with the flattened shape and bounds."""
        space = self.observation_space
        return gym.spaces.Box(low=space.low.reshape(self.shape), high=space.high.reshape(self.shape), dtype=space.dtype)

    def process(self, observation: np.ndarray) -> np.ndarray:
        """The reshaped array."""
        return np.asarray(observation).reshape(self.shape)
