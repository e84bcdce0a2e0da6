"""Structured environments: actors (policy key + agent) choose which policy acts next."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

StepKey = str | int


class ActorID(NamedTuple):
    """Identifies an actor: the sub-step (policy) key and the index of the agent within that sub-step."""

    step_key: StepKey
    agent_id: int


class BaseEnv(ABC):
    """The minimal environment interface, with Gymnasium's reset/step semantics."""

    observation_space: gym.spaces.Space
    action_space: gym.spaces.Space

    @abstractmethod
    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Advance by one (sub-)step; returns (obs, reward, terminated, truncated, info)."""

    @abstractmethod
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Start a new episode; returns (obs, info)."""

    def seed(self, seed: int | None) -> None:
        """Set the seed used by the next reset (kept for Maze compatibility)."""

    def close(self) -> None:
        """Release resources."""


class StructuredEnv(BaseEnv, ABC):
    """An env whose steps are taken by actors; flat envs have a single actor ``ActorID(0, 0)``."""

    @abstractmethod
    def actor_id(self) -> ActorID:
        """The actor that acts next."""

    @property
    @abstractmethod
    def agent_counts_dict(self) -> dict[StepKey, int]:
        """Number of agents per sub-step key (-1 where the number is dynamic)."""

    def is_actor_done(self) -> bool:
        """Whether the actor that acted last is done (for envs that retire actors)."""
        return False

    def get_actor_rewards(self) -> np.ndarray | None:
        """Per-actor rewards of the last step, where the env distributes rewards to actors."""
        return None

    @property
    def is_flat(self) -> bool:
        """True where the env has exactly one actor."""
        counts = self.agent_counts_dict
        return len(counts) == 1 and next(iter(counts.values())) == 1


class FullStepTracker:
    """Tells when the sub-steps of a structured env have completed one full env step (one tick of env time).

    A full step is a run of sub-steps in which every actor acts at most once: it is complete when the next
    actor has already acted in it (the actors went round: ``(0, 0)`` then ``(1, 0)`` then ``(0, 0)`` again), or
    when the episode ends. For a flat env every step is a full step. Envs whose full steps follow another rule
    (the same actor acting twice in one step) call ``context.increment_env_step()`` themselves.
    """

    __slots__ = ("_acted",)

    def __init__(self) -> None:
        self._acted: set = set()

    def reset(self) -> None:
        """A new episode (or a full step ended by other means): no actor has acted in the current step."""
        self._acted.clear()

    def sub_step_done(self, acted: Any, next_actor: Any, done: bool) -> bool:
        """Record that ``acted`` has acted; True where this sub-step completed a full step.

        :param acted: the actor ID of the sub-step just taken.
        :param next_actor: the actor ID that acts next.
        :param done: whether the episode ended with this sub-step.
        """
        acted_set = self._acted
        acted_set.add(acted)
        if done or next_actor in acted_set:
            acted_set.clear()
            return True
        return False


class StructuredEnvSpacesMixin(ABC):
    """Per sub-step key observation and action spaces."""

    @property
    @abstractmethod
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Observation space of each policy key."""

    @property
    @abstractmethod
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Action space of each policy key."""
