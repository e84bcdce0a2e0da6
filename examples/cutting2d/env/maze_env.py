"""Cutting2DEnvironment: the flat MazeEnv (one policy key, joint action) and its factory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from maze_lab.core.env.interfaces import RewardAggregatorInterface
from maze_lab.core.env.maze_env import MazeEnv

from ..space_interfaces import ActionConversion, ObservationConversion
from .core_env import Cutting2DCoreEnvironment


class Cutting2DEnvironment(MazeEnv):
    """The flat Cutting-2D env: one actor (policy key 0) picks piece, rotation and cutting order at once.

    :param core_env: the simulation.
    :param action_conversion: dict action -> MazeAction.
    :param observation_conversion: MazeState -> dict observation.
    :param check_spaces: check every action and observation against its space.
    """

    def __init__(self, core_env: Cutting2DCoreEnvironment, action_conversion: ActionConversion,
                 observation_conversion: ObservationConversion, check_spaces: bool = True):
        super().__init__(core_env, {0: action_conversion}, {0: observation_conversion}, check_spaces=check_spaces)

    @property
    def observation_conversion(self) -> ObservationConversion:
        """The observation conversion of policy key 0."""
        return self.observation_conversion_dict[0]

    @property
    def action_conversion(self) -> ActionConversion:
        """The action conversion of policy key 0."""
        return self.action_conversion_dict[0]


def maze_env_factory(max_pieces_in_inventory: int = 200, raw_piece_size: Sequence[int] = (100, 100),
                     static_demand: Any = (30, 15),
                     reward_aggregator: RewardAggregatorInterface | Mapping | None = None,
                     max_steps: int | None = None, random_demand: bool = False,
                     check_spaces: bool = True) -> Cutting2DEnvironment:
    """Build the flat env from the core env's parameters (see :class:`Cutting2DCoreEnvironment`)."""
    core_env = Cutting2DCoreEnvironment(max_pieces_in_inventory=max_pieces_in_inventory,
                                        raw_piece_size=raw_piece_size, static_demand=static_demand,
                                        reward_aggregator=reward_aggregator, max_steps=max_steps,
                                        random_demand=random_demand)
    return Cutting2DEnvironment(core_env,
                                ActionConversion(max_pieces_in_inventory=core_env.max_pieces_in_inventory),
                                ObservationConversion(raw_piece_size=core_env.raw_piece_size,
                                                      max_pieces_in_inventory=core_env.max_pieces_in_inventory),
                                check_spaces=check_spaces)
