"""DictActionWrapper: exposes plain (or Tuple) action spaces as a Dict action space."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.wrappers.space_utils import ordered_dict_space
from maze_lab.core.wrappers.wrapper import ActionWrapper


class DictActionWrapper(ActionWrapper):
    """A plain action space becomes ``Dict({key: space})``; a Tuple space ``Dict({key_0: ..., key_1: ...})``.

    :param key: the name of the action in the dict (the prefix of the names for Tuple spaces).
    """

    def __init__(self, env: Any, key: str = "action"):
        super().__init__(env)
        self.key = key
        self._action_spaces: dict[StepKey, gym.spaces.Dict] = {}
        self._tuple_len: dict[StepKey, int | None] = {}
        for step_key, space in env.action_spaces_dict.items():
            if isinstance(space, gym.spaces.Dict):
                raise TypeError(f"DictActionWrapper: policy key {step_key!r} already has a Dict action space {space}")
            if isinstance(space, gym.spaces.Tuple):
                self._tuple_len[step_key] = len(space.spaces)
                items = [(f"{key}_{i}", s) for i, s in enumerate(space.spaces)]
            else:
                self._tuple_len[step_key] = None
                items = [(key, space)]
            self._action_spaces[step_key] = ordered_dict_space(items)

    @property
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Dict action space per policy key."""
        return self._action_spaces

    def action(self, action: dict) -> Any:
        """The plain (or tuple) action for the wrapped env."""
        n = self._tuple_len[self.env.actor_id().step_key]
        if n is None:
            return action[self.key]
        return tuple(action[f"{self.key}_{i}"] for i in range(n))

    def reverse_action(self, action: Any) -> dict:
        """The dict action for a plain (or tuple) action of the wrapped env."""
        if self._tuple_len[self.env.actor_id().step_key] is None:
            return {self.key: action}
        return {f"{self.key}_{i}": value for i, value in enumerate(action)}
