"""The policy interface: anything that selects actions for the actors of a (structured) env."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from maze_lab.core.env.structured_env import ActorID, StepKey


class Policy(ABC):
    """Selects actions; structured envs name the acting policy by ``actor_id`` (step key and agent)."""

    @abstractmethod
    def compute_action(self, observation: dict[str, Any], actor_id: ActorID | StepKey | None = None,
                       maze_state: Any = None, env: Any = None, deterministic: bool = False) -> dict[str, Any]:
        """The action (a dict keyed by action head) for one observation (dict keyed by observation name).

        :param observation: The observation of the acting policy.
        :param actor_id: Which policy acts (step key + agent); may be omitted for single-policy setups.
        :param maze_state: The env's MazeState, for policies that need it (see :meth:`needs_state`).
        :param env: The env itself, for policies that need it (see :meth:`needs_env`).
        :param deterministic: Pick the most likely action instead of sampling.
        """

    def needs_state(self) -> bool:
        """Whether :meth:`compute_action` needs the MazeState."""
        return False

    def needs_env(self) -> bool:
        """Whether :meth:`compute_action` needs the env."""
        return False

    def seed(self, seed: int | None) -> None:
        """Seed the policy's random number generators."""

    def reset(self) -> None:
        """Reset internal state at the start of an episode."""

    def compute_top_action_candidates(self, observation: dict[str, Any], num_candidates: int | None,
                                      actor_id: ActorID | StepKey | None = None, maze_state: Any = None,
                                      env: Any = None) -> tuple[Sequence[dict[str, Any]], Sequence[float]]:
        """The most likely actions and their scores (probabilities), best first."""
        raise NotImplementedError(f"{type(self).__name__} does not rank action candidates")


def resolve_actor_id(actor_id: ActorID | StepKey | None, step_keys: Sequence[StepKey]) -> ActorID:
    """Turn ``None`` (single policy), a step key or an ActorID into an ActorID, checking the step key."""
    if actor_id is None:
        if len(step_keys) != 1:
            raise ValueError(f"actor_id is required: this policy has several policy keys {list(step_keys)}")
        return ActorID(step_keys[0], 0)
    if not isinstance(actor_id, ActorID):
        if isinstance(actor_id, tuple) and len(actor_id) == 2:
            actor_id = ActorID(*actor_id)
        else:
            actor_id = ActorID(actor_id, 0)
    if actor_id.step_key not in step_keys:
        raise KeyError(f"unknown policy key {actor_id.step_key!r}; valid keys: {list(step_keys)}")
    return actor_id
