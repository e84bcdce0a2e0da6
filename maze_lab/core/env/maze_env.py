"""MazeEnv: a CoreEnv plus one observation/action conversion pair per policy key, with dict spaces."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import gymnasium as gym
import numpy as np

from maze_lab.core.env.core_env import CoreEnv
from maze_lab.core.env.environment_context import EnvironmentContext
from maze_lab.core.env.interfaces import ActionConversionInterface, ObservationConversionInterface
from maze_lab.core.env.space_checks import dict_action_checker, observation_checker
from maze_lab.core.env.structured_env import ActorID, StepKey, StructuredEnv, StructuredEnvSpacesMixin


class EnvNotResetError(RuntimeError):
    """step() was called before the first reset()."""


class EpisodeEndedError(EnvNotResetError):
    """step() was called after the episode ended (terminated or truncated) without a reset()."""


class StepResultError(TypeError):
    """A CoreEnv's step() did not return Gymnasium's 5-tuple (maze_state, reward, terminated, truncated, info)."""


def _takes_seed_and_options(reset: Any) -> bool:
    """Whether a core env's reset accepts Gymnasium's ``seed`` and ``options`` keywords."""
    try:
        params = inspect.signature(reset).parameters.values()
    except (TypeError, ValueError):
        return True
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {"seed", "options"} <= names or any(p.kind is p.VAR_KEYWORD for p in params)


def _step_result_error(core_env: Any, result: Any) -> StepResultError:
    """The error for a core env step result that is not a 5-tuple, saying what to return instead."""
    name = f"{type(core_env).__name__}.step()"
    if isinstance(result, tuple) and len(result) == 4:
        return StepResultError(
            f"{name} returned 4 values (maze_state, reward, done, info): the old Gym API. maze-lab uses Gymnasium's "
            f"5-tuple: return maze_state, reward, terminated, truncated, info, where terminated says the episode "
            f"reached a terminal state and truncated that it was cut off (e.g. by a time limit; its last state is "
            f"bootstrapped in training). For `return maze_state, reward, done, info` write "
            f"`return maze_state, reward, done, False, info`.")
    got = f"a tuple of {len(result)} values" if isinstance(result, tuple) else f"a {type(result).__name__}"
    return StepResultError(f"{name} must return the 5-tuple (maze_state, reward, terminated, truncated, info), got "
                           f"{got}")


class MazeEnv(StructuredEnv, StructuredEnvSpacesMixin):
    """The smallest unit an agent interacts with: converts actions and states at the core env's border.

    :param core_env: the env mechanics.
    :param action_conversion_dict: policy key -> ActionConversionInterface.
    :param observation_conversion_dict: policy key -> ObservationConversionInterface.
    :param check_spaces: check every action against its space and every observation's keys, shapes, dtypes and
        Box bounds (cheap); turn off only for speed with a trusted policy and env. With the checks, a Discrete
        action given as an integer array of shape () or (1,) is passed on as the int it holds.
    :param observation_bounds: an observation outside its Box bounds raises (``error``, the default: the
        conversion or the space of an env of yours has a bug) or warns once per key (``warn``, as
        :class:`GymMazeEnv` does for envs you cannot change).
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}
    # class defaults: a subclass that forgot super().__init__() gets "call reset() first", then a clear error there
    _has_reset = False
    _can_step = False

    def __init__(
        self,
        core_env: CoreEnv,
        action_conversion_dict: dict[StepKey, ActionConversionInterface],
        observation_conversion_dict: dict[StepKey, ObservationConversionInterface],
        check_spaces: bool = True,
        observation_bounds: str = "error",
    ):
        if getattr(core_env, "context", None) is None:
            raise TypeError(
                f"{type(core_env).__name__} is not set up as a CoreEnv: its __init__ did not call "
                f"super().__init__(), which creates the env's context, pubsub and reward_aggregator. Add "
                f"super().__init__() as the first line of {type(core_env).__name__}.__init__.")
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
        self._action_checks = {k: dict_action_checker(s, f"policy key {k!r}") for k, s in self._action_spaces.items()}
        where = {k: f"policy key {k!r} ({type(observation_conversion_dict[k]).__name__}.maze_to_space)"
                 for k in self._observation_spaces}
        self.observation_bounds = observation_bounds
        self._obs_checks = {k: observation_checker(s, where[k], observation_bounds)
                            for k, s in self._observation_spaces.items()}
        # (its warnings name the line in reset() that called it, as they did from full_observation_check)
        self._reset_obs_checks = {k: observation_checker(s, f"reset(), {where[k]}", observation_bounds, _stacklevel=3)
                                  for k, s in self._observation_spaces.items()}
        # on reset, values of the spaces the per-step check does not cover are checked too (see full_observation_check)
        self._reset_other_spaces = {
            k: tuple((n, sub) for n, sub in s.spaces.items() if not isinstance(sub, gym.spaces.Box))
            for k, s in self._observation_spaces.items()}
        # the seed's core envs define reset(self) without Gymnasium's keywords: seed them through seed() instead
        self._reset_takes_seed = _takes_seed_and_options(core_env.reset)
        # flat core envs (actor_id not overridden) always act with key 0: skip the per-step actor lookups
        self._flat_key = 0 if type(core_env).actor_id is CoreEnv.actor_id and 0 in self._action_spaces else None
        self._flat_core = core_env  # the core env _flat_key was decided for (an env may swap its core env)
        self.check_spaces = check_spaces  # builds the per-key step functions
        self._service = core_env.context.event_service
        self._context = core_env.context
        self._has_reset = False
        self._can_step = False
        self._last_obs: dict | None = None
        self._last_maze_action = None
        self._last_maze_state = None
        self._acted_in_state = None
        self.render_mode = "rgb_array"

    @property
    def check_spaces(self) -> bool:
        """Whether every action and observation is checked against its space."""
        return self._check_spaces

    @check_spaces.setter
    def check_spaces(self, value: bool) -> None:
        self._check_spaces = bool(value)
        if "_action_checks" not in self.__dict__:
            return
        # per policy key: (action check, action conversion, observation conversion, observation check), so that a
        # step looks up nothing else; the conversions are fixed at construction (the spaces are taken from them)
        self._step_fns = {
            k: (self._action_checks[k] if value else None, self.action_conversion_dict[k].space_to_maze,
                self.observation_conversion_dict[k].maze_to_space, self._obs_checks[k] if value else None)
            for k in self._action_spaces}
        self._flat_fns = self._step_fns[self._flat_key] if self._flat_key is not None else None

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
        if self._reset_takes_seed:
            maze_state = self.core_env.reset(seed=seed, options=options)
        else:
            if options is not None:
                raise TypeError(f"{type(self.core_env).__name__}.reset() takes no options, got options={options!r}; "
                                f"define it as reset(self, *, seed=None, options=None) to use them")
            if seed is not None:
                self.core_env.seed(seed)
            maze_state = self.core_env.reset()
        self._last_maze_state = maze_state
        self._last_maze_action = None
        self._acted_in_state = None
        key = self._flat_key  # a flat core env's actor is always ActorID(0, 0)
        if key is None or self.core_env is not self._flat_core:
            actor = self.core_env.actor_id()
            if not isinstance(actor, tuple) or len(actor) != 2:
                raise TypeError(f"{type(self.core_env).__name__}.actor_id() returned {actor!r}; return the actor that "
                                f"acts next as ActorID(step_key, agent_id), e.g. ActorID(0, 0), or remove the override "
                                f"(flat envs inherit it)")
            key = actor[0]
        obs = self.observation_conversion_dict[key].maze_to_space(maze_state)
        if self.check_spaces:
            # full_observation_check with what it looks up prepared: the per-step check, then the other spaces
            self._reset_obs_checks[key](obs)
            for name, sub in self._reset_other_spaces[key]:
                if not sub.contains(obs[name]):
                    warnings.warn(f"reset(): observation['{name}'] = {obs[name]!r} is outside {sub}", stacklevel=2)
        self._has_reset = True
        self._can_step = True
        self._last_obs = obs
        return obs, {}

    def step(self, action: dict) -> tuple[dict, float, bool, bool, dict]:
        """Convert the action, step the core env and convert the resulting state."""
        if not self._can_step:
            raise self._cannot_step()
        core_env = self.core_env
        flat = self._flat_fns
        if flat is not None:
            check_action, to_maze, to_space, check_obs = flat
        else:
            check_action, to_maze, _, _ = self._step_fns[core_env.actor_id().step_key]
        if check_action is not None:
            fixed = check_action(action)
            if fixed is not None:  # e.g. a Discrete action given as an integer array of shape (1,)
                action = fixed
        maze_action = to_maze(action, self._last_maze_state)
        service = self._service
        if service._step_events:
            service._step_events = []  # a new list: consumers holding the old one see the step ended
        # env time is advanced by the CoreEnv's own step plumbing: once per full step, not per sub-step
        result = core_env.step(maze_action)
        try:
            maze_state, reward, terminated, truncated, info = result
        except (TypeError, ValueError):
            raise _step_result_error(core_env, result) from None
        self._can_step = not (terminated or truncated)
        self._acted_in_state = self._last_maze_state
        self._last_maze_state = maze_state
        self._last_maze_action = maze_action
        if flat is None:
            _, _, to_space, check_obs = self._step_fns[core_env.actor_id().step_key]
        obs = to_space(maze_state)
        if check_obs is not None:
            check_obs(obs)
        self._last_obs = obs
        return obs, reward, terminated, truncated, info

    def _cannot_step(self) -> EnvNotResetError:
        """The error for a step before the first reset or after the episode ended."""
        if not self._has_reset:
            return EnvNotResetError(f"{type(self).__name__}.step() was called before reset(); call env.reset() first")
        return EpisodeEndedError(
            f"{type(self).__name__}.step() was called after the episode ended (the last step returned terminated or "
            f"truncated); call env.reset() to start the next episode")

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
    def context(self) -> EnvironmentContext:
        """The shared env context (event service, env time)."""
        try:
            return self.core_env.context
        except AttributeError:
            if "core_env" not in self.__dict__:
                raise AttributeError(
                    f"{type(self).__name__} is not set up as a MazeEnv: its __init__ did not call "
                    f"super().__init__(core_env=..., action_conversion_dict=..., observation_conversion_dict=...)"
                ) from None
            raise

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
