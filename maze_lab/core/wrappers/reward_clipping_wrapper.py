"""RewardClippingWrapper: clips each step reward to a range."""

from __future__ import annotations

from typing import Any

import numpy as np

from maze_lab.core.wrappers.wrapper import RewardWrapper


class RewardClippingWrapper(RewardWrapper):
    """Returns the reward clipped to ``[min_val, max_val]``.

    :param min_val: the smallest reward passed on.
    :param max_val: the largest reward passed on.
    """

    def __init__(self, env: Any, min_val: float, max_val: float):
        super().__init__(env)
        if min_val > max_val:
            raise ValueError(f"RewardClippingWrapper: min_val {min_val} is larger than max_val {max_val}")
        self.min_val = float(min_val)
        self.max_val = float(max_val)

    def reward(self, reward: Any) -> Any:
        """The clipped reward."""
        if isinstance(reward, np.ndarray):
            return np.clip(reward, self.min_val, self.max_val)
        return min(max(float(reward), self.min_val), self.max_val)
