"""SortedSpacesWrapper: orders the keys of all dict spaces (and observations) alphabetically."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.wrappers.space_utils import ordered_dict_space, require_dict_spaces
from maze_lab.core.wrappers.wrapper import ObservationWrapper


class SortedSpacesWrapper(ObservationWrapper):
    """Sorts the keys of every policy key's observation and action Dict space, and of each observation dict."""

    def __init__(self, env: Any):
        super().__init__(env)
        require_dict_spaces(env.observation_spaces_dict, "observation", "SortedSpacesWrapper")
        require_dict_spaces(env.action_spaces_dict, "action", "SortedSpacesWrapper")
        self._observation_spaces = {k: _sorted(s) for k, s in env.observation_spaces_dict.items()}
        self._action_spaces = {k: _sorted(s) for k, s in env.action_spaces_dict.items()}

    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Observation spaces with sorted keys."""
        return self._observation_spaces

    @property
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Action spaces with sorted keys."""
        return self._action_spaces

    def observation(self, observation: dict) -> dict:
        """The observation with its keys in alphabetical order."""
        return {k: observation[k] for k in sorted(observation)}


def _sorted(space: gym.spaces.Dict) -> gym.spaces.Dict:
    return ordered_dict_space(sorted(space.spaces.items()))
