"""A policy that samples uniformly from the action spaces."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from maze_lab.core.env.structured_env import ActorID, StepKey
from maze_lab.core.policy import Policy, resolve_actor_id


class RandomPolicy(Policy):
    """Samples random actions from the action space of the acting policy key.

    :param action_spaces_dict: Action space per policy key.
    :param seed: Optional seed for the spaces' random generators.
    """

    def __init__(self, action_spaces_dict: Mapping[StepKey, gym.spaces.Space], seed: int | None = None):
        self.action_spaces_dict = dict(action_spaces_dict)
        self._keys = list(self.action_spaces_dict)
        if seed is not None:
            self.seed(seed)

    def seed(self, seed: int | None) -> None:
        """Seed every action space (each key gets its own derived seed)."""
        for i, space in enumerate(self.action_spaces_dict.values()):
            space.seed(None if seed is None else seed + i)

    def compute_action(self, observation: Any, actor_id: ActorID | StepKey | None = None, maze_state: Any = None,
                       env: Any = None, deterministic: bool = False) -> dict[str, Any]:
        """A uniformly random action of the acting policy key (``deterministic`` is ignored)."""
        key = resolve_actor_id(actor_id, self._keys).step_key
        return self.action_spaces_dict[key].sample()
