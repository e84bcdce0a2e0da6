"""Base class for hand-written policies, and a simple CartPole example."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np

from maze_lab.core.env.structured_env import ActorID, StepKey
from maze_lab.core.policy import Policy


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


class PendulumSwingUpPolicy(HeuristicPolicy):
    """Swings Pendulum-v1's pole up by pumping energy in the direction of motion, then balances it upright with a PD
    rule (observation: cos theta, sin theta, angular velocity; theta = 0 is upright). About -130 per episode, where
    a random policy gets about -1,200: demonstrations for SAC from demonstrations.

    :param kp: proportional gain of the balancing rule.
    :param kd: derivative gain of the balancing rule.
    """

    def __init__(self, kp: float = 12.0, kd: float = 2.5):
        self.kp, self.kd = float(kp), float(kd)

    def compute_action(self, observation: dict[str, Any], actor_id: ActorID | StepKey | None = None,
                       maze_state: Any = None, env: Any = None, deterministic: bool = False) -> dict[str, Any]:
        """The torque in [-2, 2]."""
        obs = np.asarray(observation["observation"], dtype=np.float64)
        cos, sin, speed = obs[..., 0], obs[..., 1], obs[..., 2]
        angle = np.arctan2(sin, cos)
        # energy of the pole relative to resting upright (g = 10, unit length and mass: 3g/2l = 15)
        energy = 0.5 * speed * speed + 15.0 * (cos - 1.0)
        direction = np.where(speed == 0.0, 1.0, np.sign(speed))
        pump = np.where(energy < 0.0, 2.0 * direction, -direction)
        balance = -(self.kp * angle + self.kd * speed)
        torque = np.clip(np.where(cos > 0.85, balance, pump), -2.0, 2.0).astype(np.float32)
        return {"action": torque[..., None]}
