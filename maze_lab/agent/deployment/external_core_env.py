"""The core env of a deployment: its states come from an environment outside maze-lab, its actions go back there.

In training the wrapper stack calls the core env; in production the outside environment calls the agent. The
:class:`ExternalCoreEnv` takes the place of the env's own core env under the unchanged wrapper stack: its ``step``
hands the MazeAction that the stack produced to the caller of ``AgentDeployment.act`` and waits until that caller
brings the next MazeState. The stack runs in a helper thread of the deployment; the two threads take strict turns
(one always waits for the other), so nothing in the env is ever touched by both at once.
"""

from __future__ import annotations

import queue
from typing import Any

from maze_lab.core.env.core_env import CoreEnv


class DeploymentClosed(Exception):  # noqa: N818 - a signal to unwind the env loop, not an error
    """Raised inside the env loop when the deployment closes while the stack waits for the outside environment."""


class ExternalCoreEnv(CoreEnv):
    """A core env fed from outside through two queues.

    It shares the replaced core env's context (event service, env time, episode ids), so that the wrappers above,
    which hold that context, see its steps as the env's own; renderer and KPI calculator stay those of the replaced
    env. Rewards come from outside: no reward aggregator.

    :param replaced: the core env it stands in for.
    :param states: where ``("state", maze_state, reward, terminated, truncated, info)`` or ``("stop",)`` arrive.
    :param actions: where it puts ``("action", maze_action)`` and ``("waiting",)`` (ready for a new episode).
    """

    def __init__(self, replaced: CoreEnv, states: queue.Queue, actions: queue.Queue):
        super().__init__()
        self.replaced = replaced
        self.context = replaced.context
        self.pubsub = getattr(replaced, "pubsub", self.pubsub)
        self._states, self._actions = states, actions
        self._state: Any = None
        self.closing = False
        """Set when the deployment closes: ``reset`` then returns the last state at once (so that the wrappers
        close an unfinished episode) instead of waiting for a new one."""

    def _next(self) -> tuple:
        message = self._states.get()
        if message[0] == "stop":
            raise DeploymentClosed()
        return message

    def step(self, maze_action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Give the MazeAction to the caller of ``act`` and return what the outside environment did with it."""
        self._actions.put(("action", maze_action))
        _, state, reward, terminated, truncated, info = self._next()
        self._state = state
        return state, float(reward), bool(terminated), bool(truncated), dict(info or {})

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        """Wait for the first MazeState of the next episode (the outside environment was reset)."""
        if self.closing:
            return self._state
        self._actions.put(("waiting",))
        _, state, _, _, _, _ = self._next()
        self._state = state
        return state

    def get_maze_state(self) -> Any:
        """The last MazeState brought from outside."""
        return self._state

    def get_renderer(self) -> Any:
        """The replaced env's renderer."""
        return self.replaced.get_renderer()

    def get_kpi_calculator(self) -> Any:
        """The replaced env's KPI calculator (KPIs of the outside episodes, computed from their states)."""
        return self.replaced.get_kpi_calculator()

    def get_serializable_components(self) -> dict[str, Any]:
        """The replaced env's components."""
        return self.replaced.get_serializable_components()

    def close(self) -> None:
        """Close the replaced core env."""
        self.replaced.close()
