"""MazeEnv: a CoreEnv plus one observation/action conversion pair per policy key, with dict spaces."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from maze_lab.core.env.core_env import CoreEnv
from maze_lab.core.env.interfaces import ActionConversionInterface, ObservationConversionInterface
from maze_lab.core.env.space_checks import dict_action_checker, full_observation_check, observation_checker
from maze_lab.core.env.structured_env import ActorID, StepKey, StructuredEnv, StructuredEnvSpacesMixin


class EnvNotResetError(RuntimeError):
    """step() was called before the first reset()."""


class MazeEnv(StructuredEnv, StructuredEnvSpacesMixin):
    """The smallest unit an agent interacts with: converts actions and states at the core env's border.

    :param core_env: the env mechanics.
    :param action_conversion_dict: policy key -> ActionConversionInterface.
    :param observation_conversion_dict: policy key -> ObservationConversionInterface.
    :param check_spaces: check every action against its space and every observation's keys, shapes and
        dtypes (cheap); turn off only for speed with a trusted policy and env.
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        core_env: CoreEnv,
        action_conversion_dict: dict[StepKey, ActionConversionInterface],
        observation_conversion_dict: dict[StepKey, ObservationConversionInterface],
        check_spaces: bool = True,
    ):
        if set(action_conversion_dict) != set(observation_conversion_dict):
            raise ValueError(
                f"action and observation conversion dicts must have the same policy keys, got "
                f"{sorted(map(str, action_conversion_dict))} and {sorted(map(str, observation_conversion_dict))}"
            )
        self.core_env = core_env
        self.action_conversion_dict = action_conversion_dict
        self.observation_conversion_dict = observation_conversion_dict
        self._observation_spaces = {k: v.space() for k, v in observation_conversion_dict.items()}
        self._action_spaces = {k: v.space() for k, v in action_conversion_dict.items()}
        for k, s in list(self._observation_spaces.items()) + list(self._action_spaces.items()):
            if not isinstance(s, gym.spaces.Dict):
                raise TypeError(f"policy key {k!r}: conversion spaces must be gymnasium Dict spaces, got {s}")
        self.check_spaces = check_spaces
        self._action_checks = {k: dict_action_checker(s, f"policy key {k!r}") for k, s in self._action_spaces.items()}
        self._obs_checks = {k: observation_checker(s, f"policy key {k!r}") for k, s in self._observation_spaces.items()}
        # flat core envs (actor_id not overridden) always act with key 0: skip the per-step actor lookups
        self._flat_key = 0 if type(core_env).actor_id is CoreEnv.actor_id and 0 in self._action_spaces else None
        self._service = core_env.context.event_service
        self._context = core_env.context
        self._has_reset = False
        self._last_obs: dict | None = None
        self._last_maze_action = None
        self._last_maze_state = None
        self._acted_in_state = None
        self.render_mode = "rgb_array"

    # --- spaces ---------------------------------------------------------------------------------
    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Observation space per policy key."""
        return self._observation_spaces

    @property
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Action space per policy key."""
        return self._action_spaces

    @property
    def observation_space(self) -> gym.spaces.Dict:  # type: ignore[override]
        """Observation space of the actor that acts next."""
        return self._observation_spaces[self.core_env.actor_id().step_key]

    @property
    def action_space(self) -> gym.spaces.Dict:  # type: ignore[override]
        """Action space of the actor that acts next."""
        return self._action_spaces[self.core_env.actor_id().step_key]

    # --- stepping -------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Reset the core env and return the first observation and an empty info dict."""
        self.context.reset_env_episode()
        maze_state = self.core_env.reset(seed=seed, options=options)
        self._last_maze_state = maze_state
        self._last_maze_action = None
        self._acted_in_state = None
        key = self.core_env.actor_id().step_key
        obs = self.observation_conversion_dict[key].maze_to_space(maze_state)
        if self.check_spaces:
            full_observation_check(self._observation_spaces[key], obs, f"reset(), policy key {key!r}")
        self._has_reset = True
        self._last_obs = obs
        return obs, {}

    def step(self, action: dict) -> tuple[dict, float, bool, bool, dict]:
        """Convert the action, step the core env and convert the resulting state."""
        if not self._has_reset:
            raise EnvNotResetError(f"{type(self).__name__}.step() was called before reset(); call env.reset() first")
        flat_key = self._flat_key
        core_env = self.core_env
        key = flat_key if flat_key is not None else core_env.actor_id().step_key
        if self.check_spaces:
            self._action_checks[key](action)
        maze_action = self.action_conversion_dict[key].space_to_maze(action, self._last_maze_state)
        service = self._service
        if service._step_events:
            service._step_events = []  # a new list: consumers holding the old one see the step ended
        maze_state, reward, terminated, truncated, info = core_env.step(maze_action)
        self._context.step_id += 1
        self._acted_in_state = self._last_maze_state
        self._last_maze_state = maze_state
        self._last_maze_action = maze_action
        next_key = flat_key if flat_key is not None else core_env.actor_id().step_key
        obs = self.observation_conversion_dict[next_key].maze_to_space(maze_state)
        if self.check_spaces:
            self._obs_checks[next_key](obs)
        self._last_obs = obs
        return obs, reward, terminated, truncated, info

    # --- structure and introspection -------------------------------------------------------------
    def actor_id(self) -> ActorID:
        """The actor that acts next."""
        return self.core_env.actor_id()

    @property
    def agent_counts_dict(self) -> dict[StepKey, int]:
        """Agents per policy key."""
        return self.core_env.agent_counts_dict

    def is_actor_done(self) -> bool:
        """Whether the last actor is done."""
        return self.core_env.is_actor_done()

    def get_actor_rewards(self) -> np.ndarray | None:
        """Per-actor rewards of the last step, if the core env distributes them."""
        return self.core_env.get_actor_rewards()

    @property
    def context(self):
        """The shared env context (event service, env time)."""
        return self.core_env.context

    def get_step_events(self) -> list:
        """Events of the current step."""
        return self.core_env.get_step_events()

    def get_env_time(self) -> int:
        """Full env steps taken in this episode."""
        return self.core_env.context.step_id

    def get_kpi_calculator(self):
        """KPI calculator of the core env."""
        return self.core_env.get_kpi_calculator()

    def get_maze_state(self) -> Any:
        """The current MazeState."""
        return self.core_env.get_maze_state()

    def get_maze_action(self) -> Any:
        """The MazeAction of the last step."""
        return self._last_maze_action

    def get_renderer(self):
        """The core env's renderer."""
        return self.core_env.get_renderer()

    def get_serializable_components(self) -> dict:
        """Components stored with trajectory records."""
        return self.core_env.get_serializable_components()

    def seed(self, seed: int | None) -> None:
        """Seed the core env."""
        self.core_env.seed(seed)

    def render(self) -> np.ndarray | None:
        """RGB array drawn by the env's renderer: the last action in the state it was taken in, or the
        current state before the first action."""
        renderer = self.get_renderer()
        if renderer is None:
            return None
        if self._last_maze_action is None or self._acted_in_state is None:
            return renderer.render_rgb(self.core_env.get_maze_state(), None)
        return renderer.render_rgb(self._acted_in_state, self._last_maze_action)

    @property
    def unwrapped(self) -> MazeEnv:
        """The MazeEnv itself (the end of any wrapper chain)."""
        return self

    def close(self) -> None:
        """Close the core env."""
        self.core_env.close()
