"""RewardScalingWrapper: multiplies each step reward by a constant."""

from __future__ import annotations

from typing import Any

from maze_lab.core.wrappers.wrapper import RewardWrapper


class RewardScalingWrapper(RewardWrapper):
    """Returns ``reward * scale``.

    :param scale: the multiplicative factor.
    """

    def __init__(self, env: Any, scale: float):
        super().__init__(env)
        self.scale = float(scale)

    def reward(self, reward: Any) -> Any:
        """The scaled reward."""
        return reward * self.scale
