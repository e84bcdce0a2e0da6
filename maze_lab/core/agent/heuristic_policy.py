"""Base class for hand-written policies, and a simple CartPole example."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np

from maze_lab.core.agent.policy import Policy
from maze_lab.core.env.structured_env import ActorID, StepKey


class HeuristicPolicy(Policy):
    """A rule-based policy; subclasses implement :meth:`compute_action` (and may use the state or env)."""

    @abstractmethod
    def compute_action(self, observation: dict[str, Any], actor_id: ActorID | StepKey | None = None,
                       maze_state: Any = None, env: Any = None, deterministic: bool = False) -> dict[str, Any]:
        """The rule's action for this observation."""

    def compute_top_action_candidates(self, observation: dict[str, Any], num_candidates: int | None,
                                      actor_id: ActorID | StepKey | None = None, maze_state: Any = None,
                                      env: Any = None) -> tuple[list[dict[str, Any]], list[float]]:
        """A heuristic has one candidate: its own action, with score 1."""
        return [self.compute_action(observation, actor_id, maze_state, env, deterministic=True)], [1.0]


class DummyCartPolePolicy(HeuristicPolicy):
    """Pushes the cart toward the side the pole leans to (CartPole observation: x, x_dot, theta, theta_dot)."""

    def compute_action(self, observation: dict[str, Any], actor_id: ActorID | StepKey | None = None,
                       maze_state: Any = None, env: Any = None, deterministic: bool = False) -> dict[str, Any]:
        """Action 1 (push right) when the pole leans or falls to the right, else 0."""
        obs = np.asarray(observation["observation"])
        action = (obs[..., 2] + 0.5 * obs[..., 3] > 0).astype(np.int64)
        return {"action": action[()] if action.ndim == 0 else action}
