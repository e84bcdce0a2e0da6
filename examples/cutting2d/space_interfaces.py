"""Dict observation and action conversion of the flat Cutting-2D env."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from maze_lab.core.env.interfaces import ActionConversionInterface, ObservationConversionInterface

from .env.maze_state import Cutting2DMazeAction, Cutting2DMazeState


class ObservationConversion(ObservationConversionInterface):
    """State -> ``inventory`` (max x 2, zero-padded), ``inventory_size`` (1,) and ``ordered_piece`` (2,), float32.

    :param raw_piece_size: size of a raw piece (bounds the piece dimensions).
    :param max_pieces_in_inventory: inventory capacity (rows of ``inventory``).
    """

    def __init__(self, raw_piece_size: Sequence[int], max_pieces_in_inventory: int):
        self.raw_piece_size = (int(raw_piece_size[0]), int(raw_piece_size[1]))
        self.max_pieces_in_inventory = int(max_pieces_in_inventory)

    def maze_to_space(self, maze_state: Cutting2DMazeState) -> dict[str, np.ndarray]:
        """The observation of a state."""
        inventory = np.zeros((self.max_pieces_in_inventory, 2), dtype=np.float32)
        n = len(maze_state.inventory)
        inventory[:n] = maze_state.inventory
        return {
            "inventory": inventory,
            "inventory_size": np.array([n], dtype=np.float32),
            "ordered_piece": np.array(maze_state.current_demand, dtype=np.float32),
        }

    def space_to_maze(self, observation: dict[str, np.ndarray]) -> Cutting2DMazeState:
        """The state an observation was made from."""
        n = int(observation["inventory_size"][0])
        return Cutting2DMazeState(observation["inventory"][:n].astype(np.int64), self.max_pieces_in_inventory,
                                  tuple(int(v) for v in observation["ordered_piece"]), self.raw_piece_size)

    def space(self) -> gym.spaces.Dict:
        """Dict observation space."""
        rx, ry = self.raw_piece_size
        high = np.tile(np.array([rx + 1, ry + 1], dtype=np.float32), (self.max_pieces_in_inventory, 1))
        return gym.spaces.Dict({
            "inventory": gym.spaces.Box(low=np.zeros_like(high), high=high, dtype=np.float32),
            "inventory_size": gym.spaces.Box(low=np.float32(0), high=np.float32(self.max_pieces_in_inventory + 1),
                                             shape=(1,), dtype=np.float32),
            "ordered_piece": gym.spaces.Box(low=np.float32(0), high=np.float32(max(rx, ry) + 1), shape=(2,),
                                            dtype=np.float32),
        })


class ActionConversion(ActionConversionInterface):
    """``piece_idx`` (Discrete(max)), ``cut_rotation`` and ``cut_order`` (Discrete(2) each) -> MazeAction.

    :param max_pieces_in_inventory: inventory capacity (number of piece choices).
    """

    def __init__(self, max_pieces_in_inventory: int):
        self.max_pieces_in_inventory = int(max_pieces_in_inventory)

    def space_to_maze(self, action: dict[str, Any], maze_state: Cutting2DMazeState | None) -> Cutting2DMazeAction:
        """The MazeAction of a dict action."""
        return Cutting2DMazeAction(piece_id=int(action["piece_idx"]), rotate=bool(action["cut_rotation"]),
                                   reverse_cutting_order=bool(action["cut_order"]))

    def maze_to_space(self, maze_action: Cutting2DMazeAction) -> dict[str, int]:
        """The dict action of a MazeAction."""
        return {"piece_idx": int(maze_action.piece_id), "cut_rotation": int(maze_action.rotate),
                "cut_order": int(maze_action.reverse_cutting_order)}

    def space(self) -> gym.spaces.Dict:
        """Dict action space."""
        return gym.spaces.Dict({
            "piece_idx": gym.spaces.Discrete(self.max_pieces_in_inventory),
            "cut_rotation": gym.spaces.Discrete(2),
            "cut_order": gym.spaces.Discrete(2),
        })
