"""NoDict wrappers: replace single-entry Dict spaces by the space they contain (for non-dict frameworks)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.wrappers.space_utils import require_dict_spaces
from maze_lab.core.wrappers.wrapper import ActionWrapper, ObservationWrapper, Wrapper


def _sole_keys(spaces_dict: Mapping[StepKey, gym.spaces.Space], what: str, wrapper: str) -> dict[StepKey, str]:
    """The only key of each policy key's Dict space; errors name the policy key and its keys."""
    require_dict_spaces(spaces_dict, what, wrapper)
    keys = {}
    for step_key, space in spaces_dict.items():
        if len(space.spaces) != 1:
            raise ValueError(f"{wrapper} needs exactly one {what} per policy key, but policy key {step_key!r} has "
                             f"{list(space.spaces)}; combine them first (e.g. a PreProcessingWrapper or a "
                             f"custom wrapper)")
        keys[step_key] = next(iter(space.spaces))
    return keys


class NoDictObservationWrapper(ObservationWrapper):
    """Observations are the sole entry of the observation dict instead of the dict."""

    def __init__(self, env: Any):
        super().__init__(env)
        self.observation_keys = _sole_keys(env.observation_spaces_dict, "observation", type(self).__name__)
        self._observation_spaces = {k: env.observation_spaces_dict[k].spaces[name]
                                    for k, name in self.observation_keys.items()}

    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Space]:  # type: ignore[override]
        """The contained observation space per policy key."""
        return self._observation_spaces

    def observation(self, observation: dict) -> Any:
        """The sole value of the observation dict."""
        return observation[self.observation_keys[self.env.actor_id().step_key]]


class NoDictActionWrapper(ActionWrapper):
    """Actions are the value of the sole action-dict entry instead of the dict."""

    def __init__(self, env: Any):
        super().__init__(env)
        self.action_keys = _sole_keys(env.action_spaces_dict, "action", type(self).__name__)
        self._action_spaces = {k: env.action_spaces_dict[k].spaces[name] for k, name in self.action_keys.items()}

    @property
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Space]:  # type: ignore[override]
        """The contained action space per policy key."""
        return self._action_spaces

    def action(self, action: Any) -> dict:
        """The action packed into the dict the wrapped env expects."""
        return {self.action_keys[self.env.actor_id().step_key]: action}

    def reverse_action(self, action: dict) -> Any:
        """The plain action for a dict action of the wrapped env."""
        return action[self.action_keys[self.env.actor_id().step_key]]


class NoDictSpacesWrapper(Wrapper):
    """Both observations and actions lose their single-entry dict (e.g. for Stable-Baselines3 style trainers)."""

    def __init__(self, env: Any):
        super().__init__(env)
        self.observation_keys = _sole_keys(env.observation_spaces_dict, "observation", type(self).__name__)
        self.action_keys = _sole_keys(env.action_spaces_dict, "action", type(self).__name__)
        self._observation_spaces = {k: env.observation_spaces_dict[k].spaces[name]
                                    for k, name in self.observation_keys.items()}
        self._action_spaces = {k: env.action_spaces_dict[k].spaces[name] for k, name in self.action_keys.items()}

    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Space]:  # type: ignore[override]
        """The contained observation space per policy key."""
        return self._observation_spaces

    @property
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Space]:  # type: ignore[override]
        """The contained action space per policy key."""
        return self._action_spaces

    def observation(self, observation: dict) -> Any:
        """The sole value of the observation dict."""
        return observation[self.observation_keys[self.env.actor_id().step_key]]

    def action(self, action: Any) -> dict:
        """The action packed into the dict the wrapped env expects."""
        return {self.action_keys[self.env.actor_id().step_key]: action}

    def reverse_action(self, action: dict) -> Any:
        """The plain action for a dict action of the wrapped env."""
        return action[self.action_keys[self.env.actor_id().step_key]]

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Pack the action, step, and unpack the observation."""
        obs, reward, terminated, truncated, info = self.env.step(self.action(action))
        return self.observation(obs), reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Reset and unpack the observation."""
        obs, info = self.env.reset(seed=seed, options=options)
        return self.observation(obs), info
