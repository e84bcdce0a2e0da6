"""The Cutting-2D MazeState (inventory and pending order) and MazeAction (which piece, how to cut)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Piece = tuple[int, int]


def as_piece(value: Sequence[Any], what: str = "piece") -> Piece:
    """A piece ``(x, y)`` of two positive integers from any pair (list, tuple, array)."""
    try:
        x, y = (int(v) for v in value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} must be a pair of integers (x, y), got {value!r}") from err
    if x <= 0 or y <= 0:
        raise ValueError(f"{what} must have positive dimensions, got {(x, y)}")
    return x, y


class Cutting2DMazeState:
    """Snapshot of the env after a step: inventory pieces (oldest first) and the order to fulfil next.

    A snapshot never changes after it was created, so recorded states can be drawn and compared later.

    :param inventory: pieces in the inventory as an ``(n, 2)`` integer array (or a list of pairs), oldest first.
    :param max_pieces_in_inventory: capacity of the inventory.
    :param current_demand: the ordered piece ``(x, y)`` to cut in the next step.
    :param raw_piece_size: size of a fresh raw piece ``(x, y)``.
    """

    __slots__ = ("inventory", "max_pieces_in_inventory", "current_demand", "raw_piece_size")

    def __init__(self, inventory: np.ndarray | Sequence[Sequence[int]], max_pieces_in_inventory: int,
                 current_demand: Piece, raw_piece_size: Piece):
        inv = np.asarray(inventory, dtype=np.int64)
        self.inventory: np.ndarray = inv.reshape(-1, 2) if inv.size else np.zeros((0, 2), dtype=np.int64)
        self.max_pieces_in_inventory = int(max_pieces_in_inventory)
        self.current_demand: Piece = (int(current_demand[0]), int(current_demand[1]))
        self.raw_piece_size: Piece = (int(raw_piece_size[0]), int(raw_piece_size[1]))

    @classmethod
    def trusted(cls, inventory: np.ndarray, max_pieces_in_inventory: int, current_demand: Piece,
                raw_piece_size: Piece) -> Cutting2DMazeState:
        """Build from values already in canonical form (an owned (n, 2) int64 array, int tuples), unchecked."""
        state = cls.__new__(cls)
        state.inventory = inventory
        state.max_pieces_in_inventory = max_pieces_in_inventory
        state.current_demand = current_demand
        state.raw_piece_size = raw_piece_size
        return state

    @property
    def pieces(self) -> list[Piece]:
        """The inventory as a list of ``(x, y)`` tuples, oldest first."""
        return [(int(x), int(y)) for x, y in self.inventory.tolist()]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (plain ints and lists) that :meth:`from_dict` turns back into an equal state."""
        return {
            "inventory": self.inventory.tolist(),
            "max_pieces_in_inventory": self.max_pieces_in_inventory,
            "current_demand": list(self.current_demand),
            "raw_piece_size": list(self.raw_piece_size),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cutting2DMazeState:
        """Rebuild a state written by :meth:`to_dict`."""
        missing = {"inventory", "max_pieces_in_inventory", "current_demand", "raw_piece_size"} - set(data)
        if missing:
            raise KeyError(f"Cutting2DMazeState.from_dict: missing keys {sorted(missing)}")
        return cls(data["inventory"], data["max_pieces_in_inventory"], data["current_demand"], data["raw_piece_size"])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Cutting2DMazeState):
            return NotImplemented
        return (self.max_pieces_in_inventory == other.max_pieces_in_inventory
                and self.current_demand == other.current_demand and self.raw_piece_size == other.raw_piece_size
                and np.array_equal(self.inventory, other.inventory))

    __hash__ = None  # type: ignore[assignment]  # mutable array inside: not hashable

    def __repr__(self) -> str:
        return (f"Cutting2DMazeState(inventory={len(self.inventory)}/{self.max_pieces_in_inventory} pieces, "
                f"current_demand={self.current_demand}, raw_piece_size={self.raw_piece_size})")


@dataclass(frozen=True)
class Cutting2DMazeAction:
    """Which inventory piece to cut, whether to rotate the order by 90 degrees, and which cut comes first.

    :param piece_id: index of the inventory piece to cut (0 = oldest).
    :param rotate: cut the ordered piece rotated (its x and y swapped).
    :param reverse_cutting_order: cut along y first (horizontal cut across the whole piece) instead of x first.
    """

    piece_id: int
    rotate: bool = False
    reverse_cutting_order: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict."""
        return {"piece_id": int(self.piece_id), "rotate": bool(self.rotate),
                "reverse_cutting_order": bool(self.reverse_cutting_order)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cutting2DMazeAction:
        """Rebuild an action written by :meth:`to_dict`."""
        if "piece_id" not in data:
            raise KeyError(f"Cutting2DMazeAction.from_dict: missing key 'piece_id' in {sorted(data)}")
        return cls(int(data["piece_id"]), bool(data.get("rotate", False)),
                   bool(data.get("reverse_cutting_order", False)))
