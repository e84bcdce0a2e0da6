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
