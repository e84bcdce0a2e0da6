"""Reward aggregators of the Cutting-2D env: rewards are computed from the events of a step."""

from __future__ import annotations

from typing import Any

from maze_lab.core.env.interfaces import RewardAggregatorInterface

from .env.events import CuttingEvents, InventoryEvents

_REPLENISHED = InventoryEvents.piece_replenished
_INVALID_PIECE = CuttingEvents.invalid_piece_selected
_INVALID_CUT = CuttingEvents.invalid_cut


class DefaultRewardAggregator(RewardAggregatorInterface):
    """Penalises every raw piece taken into use and every invalid request.

    :param invalid_action_penalty: reward for a cut whose order does not fit the selected piece.
    :param raw_piece_usage_penalty: reward for each fresh raw piece put into the inventory.
    :param invalid_piece_penalty: reward for selecting a piece id past the inventory; None uses
        ``invalid_action_penalty``.
    """

    def __init__(self, invalid_action_penalty: float = -2.0, raw_piece_usage_penalty: float = -1.0,
                 invalid_piece_penalty: float | None = None):
        super().__init__()
        self.invalid_action_penalty = float(invalid_action_penalty)
        self.raw_piece_usage_penalty = float(raw_piece_usage_penalty)
        self.invalid_piece_penalty = float(invalid_action_penalty if invalid_piece_penalty is None
                                           else invalid_piece_penalty)

    def get_interfaces(self) -> list[type]:
        """Listens to cutting and inventory events."""
        return [CuttingEvents, InventoryEvents]

    def summarize_reward(self, maze_state: Any = None) -> float:
        """Sum of the penalties of this step's events."""
        reward = 0.0
        for event in self.events:
            method = event.interface_method
            if method is _REPLENISHED:
                reward += self.raw_piece_usage_penalty
            elif method is _INVALID_CUT:
                reward += self.invalid_action_penalty
            elif method is _INVALID_PIECE:
                reward += self.invalid_piece_penalty
        return reward


class RawPieceUsageRewardAggregator(RewardAggregatorInterface):
    """Only counts raw pieces: ``-reward_scale`` per replenished raw piece, invalid requests cost nothing.

    :param reward_scale: size of the penalty per raw piece.
    """

    def __init__(self, reward_scale: float = 1.0):
        super().__init__()
        self.reward_scale = float(reward_scale)

    def get_interfaces(self) -> list[type]:
        """Listens to inventory events."""
        return [InventoryEvents]

    def summarize_reward(self, maze_state: Any = None) -> float:
        """Minus the scaled number of replenished raw pieces of this step."""
        return -self.reward_scale * sum(1 for e in self.events if e.interface_method is _REPLENISHED)
