"""Cutting2DCoreEnvironment: the online guillotine 2D cutting-stock simulation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from maze_lab.core.env.core_env import CoreEnv
from maze_lab.core.env.interfaces import RewardAggregatorInterface
from maze_lab.core.utils.factory import Factory

from .events import CuttingEvents, InventoryEvents
from .inventory import Inventory
from .kpi_calculator import Cutting2DKpiCalculator
from .maze_state import Cutting2DMazeAction, Cutting2DMazeState, Piece, as_piece
from .renderer import Cutting2DRenderer

RESET_OPTIONS = ("inventory", "demand_index")


def normalize_demand(static_demand: Any) -> list[Piece]:
    """One piece ``(x, y)`` or a list of pieces as a list of ``(x, y)`` tuples."""
    if hasattr(static_demand, "tolist"):
        static_demand = static_demand.tolist()
    if not isinstance(static_demand, Sequence) or isinstance(static_demand, str) or len(static_demand) == 0:
        raise ValueError(f"static_demand must be a piece (x, y) or a non-empty list of pieces, got {static_demand!r}")
    first = static_demand[0]
    if isinstance(first, int | np.integer | float):
        return [as_piece(static_demand, "static_demand")]
    return [as_piece(p, f"static_demand[{i}]") for i, p in enumerate(static_demand)]


class Cutting2DCoreEnvironment(CoreEnv):
    """Online 2D cutting stock: each step one order arrives and is cut from a piece of the inventory.

    - The inventory holds up to ``max_pieces_in_inventory`` pieces; it starts with one raw piece.
    - Each step the agent picks a piece, the orientation of the order and which guillotine cut comes
      first; the order is cut out of the piece's corner and the remains go back into the inventory.
    - A raw piece is always in stock: when the raw piece is cut (or discarded), a fresh one is
      replenished in the same step. Using as few raw pieces as possible is the goal.
    - A full inventory discards its oldest piece to make room.
    - Invalid requests (no such piece, order does not fit) change nothing but are events (and penalties);
      the order of that step is lost either way.

    :param max_pieces_in_inventory: inventory capacity.
    :param raw_piece_size: size ``(x, y)`` of a fresh raw piece.
    :param static_demand: the order of every step ``(x, y)``, or a list of orders issued in turn (cyclically).
    :param reward_aggregator: an aggregator instance or a ``_target_`` config; None uses
        :class:`DefaultRewardAggregator` (-1 per raw piece, -2 per invalid request).
    :param max_steps: episode length; the step that reaches it returns ``truncated=True``. None: endless.
    :param random_demand: draw each order uniformly from ``static_demand`` with the env's seeded generator
        instead of issuing them in turn.
    """

    def __init__(self, max_pieces_in_inventory: int = 200, raw_piece_size: Sequence[int] = (100, 100),
                 static_demand: Any = (30, 15), reward_aggregator: RewardAggregatorInterface | Mapping | None = None,
                 max_steps: int | None = None, random_demand: bool = False):
        super().__init__()
        from ..reward import DefaultRewardAggregator

        self.max_pieces_in_inventory = int(max_pieces_in_inventory)
        self.raw_piece_size: Piece = as_piece(raw_piece_size, "raw_piece_size")
        self.demands: list[Piece] = normalize_demand(static_demand)
        rx, ry = self.raw_piece_size
        for d in self.demands:
            if not ((d[0] <= rx and d[1] <= ry) or (d[1] <= rx and d[0] <= ry)):
                raise ValueError(f"ordered piece {d} does not fit into the raw piece {self.raw_piece_size} in any "
                                 f"orientation; such an order could never be delivered")
        if max_steps is not None and int(max_steps) < 1:
            raise ValueError(f"max_steps must be a positive number of steps or None, got {max_steps}")
        self.max_steps = None if max_steps is None else int(max_steps)
        self.random_demand = bool(random_demand)

        self.inventory_events: InventoryEvents = self.pubsub.create_event_topic(InventoryEvents)
        self.cutting_events: CuttingEvents = self.pubsub.create_event_topic(CuttingEvents)
        self.inventory = Inventory(self.max_pieces_in_inventory, self.raw_piece_size, self.inventory_events)

        if reward_aggregator is None:
            reward_aggregator = DefaultRewardAggregator()
        self.reward_aggregator = Factory(RewardAggregatorInterface).instantiate(reward_aggregator)
        self.pubsub.register_subscriber(self.reward_aggregator)

        self.kpi_calculator = Cutting2DKpiCalculator()
        self.renderer = Cutting2DRenderer()
        self._rng = np.random.default_rng()
        self._next_seed: int | None = None
        self._step_count = 0
        self._demand_index = 0
        self.current_demand: Piece = self.demands[0]
        self._setup()

    # --- episode ---------------------------------------------------------------------------------
    def _setup(self, options: Mapping[str, Any] | None = None) -> None:
        options = dict(options or {})
        unknown = sorted(set(options) - set(RESET_OPTIONS))
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; valid options: {list(RESET_OPTIONS)}")
        self._step_count = 0
        if options.get("inventory") is not None:
            self.inventory.fill(options["inventory"])
        else:
            self.inventory.clear()
            self.inventory.replenish_piece()
        self._demand_index = int(options.get("demand_index", 0)) % len(self.demands)
        self.current_demand = self._draw_demand()

    def _draw_demand(self) -> Piece:
        if self.random_demand:
            return self.demands[int(self._rng.integers(len(self.demands)))]
        return self.demands[self._demand_index]

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Cutting2DMazeState:
        """Start an episode with one raw piece in stock (or the pieces of ``options["inventory"]``).

        :param seed: seeds the demand generator (a seed given to :meth:`seed` before is used once otherwise).
        :param options: ``inventory``: list of pieces (oldest first) to start with instead of one raw piece;
            ``demand_index``: position in the demand list of the first order.
        """
        if seed is None and self._next_seed is not None:
            seed, self._next_seed = self._next_seed, None
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._setup(options)
        return self.get_maze_state()

    def seed(self, seed: int | None) -> None:
        """Use ``seed`` at the next reset."""
        self._next_seed = seed

    # --- stepping ----------------------------------------------------------------------------------
    def step(self, maze_action: Cutting2DMazeAction) -> tuple[Cutting2DMazeState, float, bool, bool, dict]:
        """Try the cut, replenish a raw piece where needed, issue the next order and compute the reward.

        ``info`` holds ``{"msg": "valid_cut"}``, or ``{"error": "invalid_cut"}`` or
        ``{"error": "piece_id_out_of_bounds"}``.
        """
        inventory = self.inventory
        demand = self.current_demand
        piece_id = int(maze_action.piece_id)
        if not 0 <= piece_id < inventory.size():
            # events are published with positional arguments: cheaper to dispatch than keywords
            self.cutting_events.invalid_piece_selected(piece_id, inventory.size())
            info = {"error": "piece_id_out_of_bounds"}
        else:
            piece = inventory.piece(piece_id)
            if inventory.cut(piece_id, demand, bool(maze_action.rotate), bool(maze_action.reverse_cutting_order)):
                self.cutting_events.valid_cut(demand, piece, self.raw_piece_size, float(demand[0] * demand[1]))
                info = {"msg": "valid_cut"}
            else:
                self.cutting_events.invalid_cut(demand, piece, self.raw_piece_size)
                info = {"error": "invalid_cut"}
        inventory.ensure_raw_piece()
        inventory.log_step_statistics()

        self._step_count += 1
        self._demand_index = (self._demand_index + 1) % len(self.demands)
        self.current_demand = self._draw_demand()

        maze_state = self.get_maze_state()
        reward = self.reward_aggregator.summarize_reward(maze_state)
        truncated = self.max_steps is not None and self._step_count >= self.max_steps
        return maze_state, reward, False, truncated, info

    # --- state and components --------------------------------------------------------------------------
    def get_maze_state(self) -> Cutting2DMazeState:
        """A snapshot of the inventory and the order of the next step."""
        return Cutting2DMazeState.trusted(self.inventory.snapshot(), self.max_pieces_in_inventory,
                                          self.current_demand, self.raw_piece_size)

    @property
    def step_count(self) -> int:
        """Steps taken in this episode."""
        return self._step_count

    def get_renderer(self) -> Cutting2DRenderer:
        """The matplotlib renderer."""
        return self.renderer

    def get_kpi_calculator(self) -> Cutting2DKpiCalculator:
        """Computes ``raw_piece_usage_per_step``."""
        return self.kpi_calculator

    def get_serializable_components(self) -> dict[str, Any]:
        """Nothing besides the MazeState is needed to replay a step."""
        return {}

    def close(self) -> None:
        """Nothing to release."""
