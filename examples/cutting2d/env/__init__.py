"""The Cutting-2D simulation (core env), its MazeState/MazeAction, events, KPIs, renderer and MazeEnvs."""

from .core_env import Cutting2DCoreEnvironment
from .events import CuttingEvents, InventoryEvents
from .inventory import Inventory
from .kpi_calculator import Cutting2DKpiCalculator
from .maze_env import Cutting2DEnvironment, maze_env_factory
from .maze_state import Cutting2DMazeAction, Cutting2DMazeState
from .renderer import Cutting2DRenderer
from .struct_env import (
    MaskedStructuredCutting2DEnvironment,
    StructuredCutting2DEnvironment,
    make_masked_env,
    make_struct_env,
)

__all__ = [
    "Cutting2DCoreEnvironment", "Cutting2DEnvironment", "Cutting2DKpiCalculator", "Cutting2DMazeAction",
    "Cutting2DMazeState", "Cutting2DRenderer", "CuttingEvents", "Inventory", "InventoryEvents",
    "MaskedStructuredCutting2DEnvironment", "StructuredCutting2DEnvironment", "make_masked_env", "make_struct_env",
    "maze_env_factory",
]
