"""The online guillotine 2D cutting-stock example: flat, structured and masked envs, a greedy heuristic.

Every order must be cut from a piece of the inventory; the goal is to use as few raw pieces as possible.
``SIMPLE_PROBLEM`` is the small setting whose optimum is known: six orders fill one 4x3 raw piece exactly,
so 180 steps need 30 raw pieces plus the one in stock at the start, 31 in all.
"""

from pathlib import Path
from typing import Any

from .env import (
    Cutting2DCoreEnvironment,
    Cutting2DEnvironment,
    Cutting2DKpiCalculator,
    Cutting2DMazeAction,
    Cutting2DMazeState,
    Cutting2DRenderer,
    CuttingEvents,
    Inventory,
    InventoryEvents,
    MaskedStructuredCutting2DEnvironment,
    StructuredCutting2DEnvironment,
    make_masked_env,
    make_struct_env,
    maze_env_factory,
)
from .reward import DefaultRewardAggregator, RawPieceUsageRewardAggregator
from .space_interfaces import ActionConversion, ObservationConversion

SIMPLE_PROBLEM: dict[str, Any] = {
    "max_pieces_in_inventory": 50,
    "raw_piece_size": (4, 3),
    "static_demand": [(1, 2), (1, 2), (1, 1), (2, 2), (1, 2), (1, 1)],
    "max_steps": 180,
}
SIMPLE_PROBLEM_OPTIMUM = 31

CONF_DIR = Path(__file__).parent / "conf"
"""Config groups of the example (env, wrappers, model, policy), for a config search path."""

__all__ = [
    "CONF_DIR", "SIMPLE_PROBLEM", "SIMPLE_PROBLEM_OPTIMUM", "ActionConversion", "Cutting2DCoreEnvironment",
    "Cutting2DEnvironment", "Cutting2DKpiCalculator", "Cutting2DMazeAction", "Cutting2DMazeState",
    "Cutting2DRenderer", "CuttingEvents", "DefaultRewardAggregator", "GreedyPolicy", "Inventory", "InventoryEvents",
    "MaskedStructuredCutting2DEnvironment", "ObservationConversion", "RawPieceUsageRewardAggregator",
    "StructuredCutting2DEnvironment", "make_masked_env", "make_struct_env", "maze_env_factory",
]


def __getattr__(name: str) -> Any:
    # GreedyPolicy builds on maze_lab.agent, which imports torch: load it only when asked for
    if name == "GreedyPolicy":
        from .policies import GreedyPolicy

        return GreedyPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
