"""A greedy heuristic for the flat, structured and masked Cutting-2D envs.

Importing this module imports maze_lab.agent (and with it torch); the package exports GreedyPolicy lazily
so that the envs stay light to import.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from maze_lab.agent.heuristic_policy import HeuristicPolicy
from maze_lab.core.env.structured_env import ActorID, StepKey


class GreedyPolicy(HeuristicPolicy):
    """Cuts every order from the smallest inventory piece (by area) it fits into; ties go to the oldest piece.

    The order is cut as ordered where it fits that way, rotated otherwise, always cutting x first. Works on
    the observations of all three envs: an observation with ``selected_piece`` asks for the cutting
    configuration (policy key 1), one with ``inventory`` for a piece. Whether a piece choice is answered
    with the flat joint action or with ``{"piece_idx"}`` only is decided by ``structured``; None infers
    it from ``env`` (its action space for the acting policy key) or from a mask in the observation, and
    falls back to the flat action.

    :param structured: True for the structured envs, False for the flat env, None to infer.
    """

    def __init__(self, structured: bool | None = None):
        self.structured = structured

    def needs_state(self) -> bool:
        """Observations are enough."""
        return False

    def seed(self, seed: int | None) -> None:
        """Deterministic: nothing to seed."""

    def reset(self) -> None:
        """Stateless: nothing to reset."""

    def compute_action(self, observation: dict[str, np.ndarray], actor_id: ActorID | StepKey | None = None,
                       maze_state: Any = None, env: Any = None, deterministic: bool = False) -> dict[str, int]:
        """The greedy action for the observation of the acting policy key; for a batch of observations (a vector
        env's, with a leading env axis) one action per row, as arrays."""
        if np.ndim(observation["ordered_piece"]) == 2:
            rows = [self.compute_action({k: np.asarray(v)[i] for k, v in observation.items()}, actor_id, maze_state,
                                        env, deterministic) for i in range(len(observation["ordered_piece"]))]
            return {k: np.array([r[k] for r in rows], dtype=np.int64) for k in rows[0]}
        if "selected_piece" in observation:
            rotation = self.rotation_for(observation["selected_piece"], observation["ordered_piece"])
            return {"cut_rotation": rotation, "cut_order": 0}
        piece_idx, rotation = self.select_piece(observation)
        if self._is_structured(observation, actor_id, env):
            return {"piece_idx": piece_idx}
        return {"piece_idx": piece_idx, "cut_rotation": rotation, "cut_order": 0}

    @staticmethod
    def select_piece(observation: dict[str, np.ndarray]) -> tuple[int, int]:
        """``(piece index, cut_rotation)`` of the smallest fitting piece; ``(0, 0)`` where nothing fits."""
        n = int(observation["inventory_size"][0])
        inventory = observation["inventory"][:n]
        ox, oy = float(observation["ordered_piece"][0]), float(observation["ordered_piece"][1])
        x, y = inventory[:, 0], inventory[:, 1]
        as_ordered = (x >= ox) & (y >= oy)
        fits = as_ordered | ((x >= oy) & (y >= ox))
        if not fits.any():
            return 0, 0
        area = np.where(fits, x * y, np.inf)
        idx = int(np.argmin(area))  # first minimum: the oldest of equally small pieces
        return idx, 0 if as_ordered[idx] else 1

    @staticmethod
    def rotation_for(selected_piece: np.ndarray, ordered_piece: np.ndarray) -> int:
        """0 where the order fits the piece as ordered, else 1 (rotated)."""
        return 0 if ordered_piece[0] <= selected_piece[0] and ordered_piece[1] <= selected_piece[1] else 1

    def _is_structured(self, observation: dict[str, np.ndarray], actor_id: ActorID | StepKey | None,
                       env: Any) -> bool:
        if self.structured is not None:
            return self.structured
        if "inventory_mask" in observation:
            return True
        if env is not None and hasattr(env, "action_spaces_dict"):
            if actor_id is None:
                key = env.actor_id().step_key
            else:
                key = actor_id.step_key if isinstance(actor_id, tuple) else actor_id
            return "cut_order" not in env.action_spaces_dict[key].spaces
        return False
