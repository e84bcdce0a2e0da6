"""OneHotPreProcessor: one-hot encodes categorical observations."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from maze_lab.core.wrappers.observation_preprocessing.preprocessors.base import PreProcessor


class OneHotPreProcessor(PreProcessor):
    """One-hot encodes a Discrete, MultiDiscrete or integer Box observation into a float32 array in {0, 1}.

    Discrete(n, start) -> shape (n,); MultiDiscrete(nvec) -> shape (*nvec.shape, max(nvec)); an integer Box with
    bounds [low, high] -> shape (*box.shape, max(high) + 1) (values are the category indices).

    :param observation_space: the categorical observation space.
    """

    tag = "one_hot"

    def __init__(self, observation_space: gym.spaces.Space):
        super().__init__(observation_space)
        space = observation_space
        if isinstance(space, gym.spaces.Discrete):
            self.offset: Any = int(space.start)
            self.depth = int(space.n)
            self.shape: tuple[int, ...] = (self.depth,)
        elif isinstance(space, gym.spaces.MultiDiscrete):
            self.offset = space.start
            self.depth = int(np.max(space.nvec))
            self.shape = (*space.shape, self.depth)
        elif isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.integer) \
                and np.all(space.low >= 0):
            self.offset = 0
            self.depth = int(np.max(space.high)) + 1
            self.shape = (*space.shape, self.depth)
        else:
            raise TypeError(f"OneHotPreProcessor needs a Discrete, MultiDiscrete or non-negative integer Box space, "
                            f"got {space}")
        self._categories = np.arange(self.depth)

    def processed_space(self) -> gym.spaces.Box:
        """A float32 Box in [0, 1] with one extra trailing dimension of the number of categories."""
        return gym.spaces.Box(low=0.0, high=1.0, shape=self.shape, dtype=np.float32)

    def process(self, observation: Any) -> np.ndarray:
        """The one-hot encoding."""
        index = np.asarray(observation, dtype=np.int64) - self.offset
        return (index[..., None] == self._categories).astype(np.float32)
