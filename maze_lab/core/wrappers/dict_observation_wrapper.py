"""DictObservationWrapper: packs plain (or Tuple) observations into a Dict observation space."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.wrappers.space_utils import ordered_dict_space
from maze_lab.core.wrappers.wrapper import ObservationWrapper


class DictObservationWrapper(ObservationWrapper):
    """A plain observation space becomes ``Dict({key: space})``; a Tuple space ``Dict({key_0: ..., key_1: ...})``.

    :param key: the name of the observation in the dict (the prefix of the names for Tuple spaces).
    """

    def __init__(self, env: Any, key: str = "observation"):
        super().__init__(env)
        self.key = key
        self._observation_spaces: dict[StepKey, gym.spaces.Dict] = {}
        self._is_tuple: dict[StepKey, bool] = {}
        for step_key, space in env.observation_spaces_dict.items():
            if isinstance(space, gym.spaces.Dict):
                raise TypeError(f"DictObservationWrapper: policy key {step_key!r} already has a Dict observation "
                                f"space {space}")
            self._is_tuple[step_key] = isinstance(space, gym.spaces.Tuple)
            items = ([(f"{key}_{i}", s) for i, s in enumerate(space.spaces)] if self._is_tuple[step_key]
                     else [(key, space)])
            self._observation_spaces[step_key] = ordered_dict_space(items)

    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Dict observation space per policy key."""
        return self._observation_spaces

    def observation(self, observation: Any) -> dict:
        """The observation packed into a dict."""
        if self._is_tuple[self.env.actor_id().step_key]:
            return {f"{self.key}_{i}": value for i, value in enumerate(observation)}
        return {self.key: observation}
