"""Wrapper base classes and the registry that resolves wrappers by name or dotted path."""

from __future__ import annotations

import difflib
import inspect
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, TypeVar

import gymnasium as gym

from maze_lab.core.env.structured_env import ActorID, StepKey, StructuredEnv, StructuredEnvSpacesMixin
from maze_lab.core.utils.factory import ConfigurationError, locate

W = TypeVar("W", bound="Wrapper")

WRAPPER_REGISTRY: dict[str, type[Wrapper]] = {}


class Wrapper(StructuredEnv, StructuredEnvSpacesMixin):
    """Wraps an env and forwards everything it does not override; attributes it lacks come from the inner env."""

    def __init__(self, env: Any):
        self.env = env

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        WRAPPER_REGISTRY[cls.__name__] = cls

    @classmethod
    def wrap(cls: type[W], env: Any, **kwargs: Any) -> W:
        """Wrap ``env`` with this wrapper (``Wrapper.wrap(env, **params)`` as in config files)."""
        check_wrapper_parameters(cls, kwargs)
        return cls(env, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # only called when normal lookup fails: forward to the wrapped env
        if name == "env":
            raise AttributeError(f"{type(self).__name__} has no wrapped env: its __init__ did not call "
                                 f"super().__init__(env); add that call to {type(self).__name__}.__init__")
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.env, name)

    # forwarded env API (explicit for speed and for the abstract interface)
    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Step the wrapped env."""
        return self.env.step(action)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Reset the wrapped env."""
        return self.env.reset(seed=seed, options=options)

    def actor_id(self) -> ActorID:
        """The actor that acts next."""
        return self.env.actor_id()

    @property
    def agent_counts_dict(self) -> dict[StepKey, int]:
        """Agents per policy key."""
        return self.env.agent_counts_dict

    def is_actor_done(self) -> bool:
        """Whether the last actor is done."""
        return self.env.is_actor_done()

    def get_actor_rewards(self):
        """Per-actor rewards of the last step."""
        return self.env.get_actor_rewards()

    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Observation spaces per policy key."""
        return self.env.observation_spaces_dict

    @property
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Action spaces per policy key."""
        return self.env.action_spaces_dict

    @property
    def observation_space(self) -> gym.spaces.Space:  # type: ignore[override]
        """Observation space of the actor that acts next."""
        return self.observation_spaces_dict[self.actor_id().step_key]

    @property
    def action_space(self) -> gym.spaces.Space:  # type: ignore[override]
        """Action space of the actor that acts next."""
        return self.action_spaces_dict[self.actor_id().step_key]

    def seed(self, seed: int | None) -> None:
        """Seed the wrapped env."""
        self.env.seed(seed)

    def close(self) -> None:
        """Close the wrapped env."""
        self.env.close()

    @property
    def unwrapped(self) -> Any:
        """The innermost env (the MazeEnv)."""
        env = self.env
        while isinstance(env, Wrapper):
            env = env.env
        return env

    def get_wrapper(self, wrapper_type: type[W]) -> W | None:
        """The first wrapper of the given type in this stack (outermost first), or None."""
        env: Any = self
        while isinstance(env, Wrapper):
            if isinstance(env, wrapper_type):
                return env
            env = env.env
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__}{self.env!r}>"


class ObservationWrapper(Wrapper):
    """Changes observations; subclasses implement ``observation`` and usually ``observation_spaces_dict``."""

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Step and convert the observation."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self.observation(obs), reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Reset and convert the observation."""
        obs, info = self.env.reset(seed=seed, options=options)
        return self.observation(obs), info

    @abstractmethod
    def observation(self, observation: Any) -> Any:
        """The changed observation."""


class ActionWrapper(Wrapper):
    """Changes actions before they reach the wrapped env."""

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Convert the action and step."""
        return self.env.step(self.action(action))

    @abstractmethod
    def action(self, action: Any) -> Any:
        """The action for the wrapped env."""

    def reverse_action(self, action: Any) -> Any:
        """The agent action for an action of the wrapped env (for imitation learning)."""
        raise NotImplementedError(f"{type(self).__name__} does not reverse actions")


class RewardWrapper(Wrapper):
    """Changes the reward; keeps the sum of the rewards it received, so that statistics can report the env's
    own reward beside the changed one (the LogStatsWrapper reads the innermost reward wrapper's sum)."""

    _original_reward_sum: Any = 0.0

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Step and change the reward."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._original_reward_sum = self._original_reward_sum + reward
        return obs, self.reward(reward), terminated, truncated, info

    def pop_original_reward(self) -> Any:
        """The sum of the rewards received from the wrapped env (before this wrapper changed them) since the
        last call."""
        value, self._original_reward_sum = self._original_reward_sum, 0.0
        return value

    @abstractmethod
    def reward(self, reward: Any) -> Any:
        """The changed reward."""


class WrapperParameterError(ConfigurationError, TypeError):
    """A wrapper was given a parameter it does not have, or not one it needs."""


def check_wrapper_parameters(cls: type, params: Mapping[str, Any]) -> None:
    """Raise WrapperParameterError naming unknown or missing parameters of ``cls(env, **params)`` and the valid ones."""
    try:
        signature = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return
    accepted = [p for p in list(signature.parameters.values())[2:]  # self, env
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return
    names = [p.name for p in accepted]
    valid = f"valid parameters of {cls.__name__}: {', '.join(names) if names else 'none'}"
    unknown = [k for k in params if k not in names]
    if unknown:
        hints = []
        for k in unknown:
            close = difflib.get_close_matches(k, names, n=1)
            hints.append(f"'{k}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        raise WrapperParameterError(f"wrapper {cls.__name__} has no parameter {', '.join(hints)}; {valid}")
    missing = [p.name for p in accepted if p.default is p.empty and p.name not in params]
    if missing:
        raise WrapperParameterError(f"wrapper {cls.__name__} needs the parameter(s) {', '.join(missing)}; {valid}")


def resolve_wrapper(name: str | type) -> type[Wrapper]:
    """A wrapper class from its registered name, a dotted path, or the class itself."""
    if isinstance(name, type):
        cls = name
    elif name in WRAPPER_REGISTRY:
        cls = WRAPPER_REGISTRY[name]
    elif "." in name:
        import maze_lab.core.wrappers.builtin  # noqa: F401 - registers the built-in wrappers

        try:
            cls = locate(name)
        except ConfigurationError as err:
            short = name.rsplit(".", 1)[-1]
            if short in WRAPPER_REGISTRY:
                cls = WRAPPER_REGISTRY[short]
            else:
                raise ConfigurationError(f"unknown wrapper '{name}': {err}. Registered wrappers: "
                                         f"{', '.join(sorted(WRAPPER_REGISTRY))}") from err
    else:
        import maze_lab.core.wrappers.builtin  # noqa: F401

        if name not in WRAPPER_REGISTRY:
            raise ConfigurationError(
                f"unknown wrapper '{name}'; registered wrappers: {', '.join(sorted(WRAPPER_REGISTRY))}, "
                f"or give a dotted path such as 'my_project.wrappers.MyWrapper'"
            )
        cls = WRAPPER_REGISTRY[name]
    if not (isinstance(cls, type) and issubclass(cls, Wrapper)):
        raise ConfigurationError(f"'{name}' is not a maze-lab Wrapper subclass")
    return cls


def wrap_env(env: Any, wrappers: Mapping[str, Mapping[str, Any] | None] | list | None) -> Any:
    """Apply wrappers in order (first = innermost), from a mapping name -> parameters as in config files."""
    if not wrappers:
        return env
    items = wrappers.items() if isinstance(wrappers, Mapping) else [(w, {}) if isinstance(w, str) else w
                                                                    for w in wrappers]
    for name, params in items:
        cls = resolve_wrapper(name)
        from maze_lab.core.utils.factory import _to_plain, instantiate_nested

        params = _to_plain(params) or {}
        # wrappers that interpret nested `_target_` entries themselves (pre-processors, sampling policies)
        # set `instantiate_params = False`
        if getattr(cls, "instantiate_params", True):
            params = instantiate_nested(params)
        try:
            env = cls.wrap(env, **params)
        except WrapperParameterError:
            raise
        except TypeError as err:
            raise ConfigurationError(f"wrapper {cls.__name__}({', '.join(params)}): {err}") from err
    return env
