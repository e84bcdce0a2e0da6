"""The inventory of 2D pieces and the guillotine cutting mechanics."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .events import InventoryEvents
from .maze_state import Piece


class Inventory:
    """Pieces ordered from oldest to newest in a fixed-size integer array; when full, the oldest piece goes.

    :param max_pieces_in_inventory: capacity; storing into a full inventory discards the oldest piece.
    :param raw_piece_size: size of a fresh raw piece.
    :param inventory_events: topic proxy that receives discard, replenishment and fill-level events.
    """

    def __init__(self, max_pieces_in_inventory: int, raw_piece_size: Piece, inventory_events: InventoryEvents):
        if max_pieces_in_inventory < 1:
            raise ValueError(f"max_pieces_in_inventory must be at least 1, got {max_pieces_in_inventory}")
        self.max_pieces_in_inventory = int(max_pieces_in_inventory)
        self.raw_piece_size: Piece = (int(raw_piece_size[0]), int(raw_piece_size[1]))
        self.inventory_events = inventory_events
        self._pieces = np.zeros((self.max_pieces_in_inventory, 2), dtype=np.int64)
        self._n = 0
        self._n_raw = 0  # raw pieces in stock, kept up to date so no scan is needed per step

    # --- access ----------------------------------------------------------------------------------
    def size(self) -> int:
        """Number of pieces in the inventory."""
        return self._n

    def is_full(self) -> bool:
        """Whether every slot holds a piece."""
        return self._n == self.max_pieces_in_inventory

    def piece(self, index: int) -> Piece:
        """The piece at ``index`` (0 = oldest)."""
        if not 0 <= index < self._n:
            raise IndexError(f"piece index {index} is outside the inventory of {self._n} pieces")
        x, y = self._pieces[index].tolist()
        return x, y

    @property
    def pieces(self) -> np.ndarray:
        """A read-only view of the stored pieces, ``(size, 2)``; copy it to keep it past the next change."""
        view = self._pieces[: self._n]
        view.flags.writeable = False
        return view

    def snapshot(self) -> np.ndarray:
        """A copy of the stored pieces, ``(size, 2)``."""
        return self._pieces[: self._n].copy()

    # --- management ------------------------------------------------------------------------------
    def clear(self) -> None:
        """Remove all pieces (no events)."""
        self._n = 0
        self._n_raw = 0

    def fill(self, pieces: Sequence[Sequence[int]]) -> None:
        """Replace the contents with ``pieces`` (oldest first), without events; for scripted scenarios."""
        arr = np.asarray(pieces, dtype=np.int64).reshape(-1, 2) if len(pieces) else np.zeros((0, 2), np.int64)
        if len(arr) > self.max_pieces_in_inventory:
            raise ValueError(f"{len(arr)} pieces do not fit into an inventory of {self.max_pieces_in_inventory}")
        if len(arr) and arr.min() <= 0:
            raise ValueError(f"inventory pieces must have positive dimensions, got {arr.tolist()}")
        self._n = len(arr)
        self._pieces[: self._n] = arr
        rx, ry = self.raw_piece_size
        self._n_raw = int(np.count_nonzero((arr[:, 0] == rx) & (arr[:, 1] == ry)))

    def store_piece(self, piece: Piece) -> None:
        """Append a piece; a full inventory first discards its oldest piece (a ``piece_discarded`` event)."""
        n = self._n
        if n == self.max_pieces_in_inventory:
            oldest = self._pop(0)
            n -= 1
            self.inventory_events.piece_discarded(oldest)
        self._pieces[n, 0] = piece[0]
        self._pieces[n, 1] = piece[1]
        self._n = n + 1
        if piece[0] == self.raw_piece_size[0] and piece[1] == self.raw_piece_size[1]:
            self._n_raw += 1

    def replenish_piece(self) -> None:
        """Put a fresh raw piece into the inventory (a ``piece_replenished`` event)."""
        self.store_piece(self.raw_piece_size)
        self.inventory_events.piece_replenished()

    def ensure_raw_piece(self) -> bool:
        """Replenish a raw piece where none is left (it was cut or discarded); True when one was added."""
        if self._n_raw == 0:
            self.replenish_piece()
            return True
        return False

    def log_step_statistics(self) -> None:
        """Report the fill level once per step."""
        self.inventory_events.pieces_in_inventory(self._n)

    def _pop(self, index: int) -> Piece:
        x, y = self._pieces[index].tolist()
        n = self._n
        if index < n - 1:
            self._pieces[index : n - 1] = self._pieces[index + 1 : n]
        self._n = n - 1
        if x == self.raw_piece_size[0] and y == self.raw_piece_size[1]:
            self._n_raw -= 1
        return x, y

    # --- cutting -------------------------------------------------------------------------------------
    def fits(self, index: int, ordered_piece: Piece, rotate: bool) -> bool:
        """Whether the order (rotated by 90 degrees where ``rotate``) fits into the piece at ``index``."""
        ox, oy = (ordered_piece[1], ordered_piece[0]) if rotate else ordered_piece
        x, y = self._pieces[index].tolist()
        return ox <= x and oy <= y

    def cut(self, index: int, ordered_piece: Piece, rotate: bool, reverse_cutting_order: bool) -> bool:
        """Cut the order out of the piece at ``index`` with two guillotine cuts; the remains go back in stock.

        The order sits in the piece's lower left corner. Cutting x first, the first cut runs across the
        whole height at x = order width, leaving a right strip (piece width - order width) x piece height;
        the second cut splits the left strip at y = order height, leaving order width x (piece height -
        order height). Cutting y first (``reverse_cutting_order``) swaps the roles of x and y. Remains of
        zero size are not stored.

        :return: True where the cut was made; False (inventory unchanged) where the order does not fit.
        """
        ox, oy = (ordered_piece[1], ordered_piece[0]) if rotate else ordered_piece
        x, y = self._pieces[index].tolist()
        if ox > x or oy > y:
            return False
        self._pop(index)
        if reverse_cutting_order:
            first, second = (x, y - oy), (x - ox, oy)
        else:
            first, second = (x - ox, y), (ox, y - oy)
        if first[0] > 0 and first[1] > 0:
            self.store_piece(first)
        if second[0] > 0 and second[1] > 0:
            self.store_piece(second)
        return True
