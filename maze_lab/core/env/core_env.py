"""CoreEnv: the environment mechanics on MazeState / MazeAction objects, with events and KPIs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from maze_lab.core.env.environment_context import EnvironmentContext
from maze_lab.core.env.interfaces import KpiCalculator, MazeActionType, MazeStateType, Renderer
from maze_lab.core.env.structured_env import ActorID, StepKey, StructuredEnv
from maze_lab.core.events.event_record import EventRecord
from maze_lab.core.events.pubsub import Pubsub


class CoreEnv(StructuredEnv, ABC):
    """Implements an env's mechanics; subclasses fire events through ``self.pubsub`` topics."""

    def __init__(self) -> None:
        self.context = EnvironmentContext()
        self.pubsub = Pubsub(self.context.event_service)
        self.reward_aggregator = None

    @abstractmethod
    def step(self, maze_action: MazeActionType) -> tuple[MazeStateType, float, bool, bool, dict]:
        """Apply a MazeAction; returns (maze_state, reward, terminated, truncated, info)."""

    @abstractmethod
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> MazeStateType:  # type: ignore[override]
        """Start a new episode and return its first MazeState."""

    @abstractmethod
    def get_maze_state(self) -> MazeStateType:
        """The current MazeState."""

    def seed(self, seed: int | None) -> None:
        """Seed the env's random generator."""

    def get_renderer(self) -> Renderer | None:
        """The renderer of this env, if it has one."""
        return None

    def get_serializable_components(self) -> dict[str, Any]:
        """Components whose state is stored with trajectory records besides the MazeState."""
        return {}

    def get_kpi_calculator(self) -> KpiCalculator | None:
        """The KPI calculator, if the env defines KPIs."""
        return None

    def actor_id(self) -> ActorID:
        """Flat envs have the single actor (0, 0)."""
        return ActorID(0, 0)

    @property
    def agent_counts_dict(self) -> dict[StepKey, int]:
        """One agent for the single policy key 0."""
        return {0: 1}

    def get_step_events(self) -> list[EventRecord]:
        """Events dispatched during the current step."""
        return self.context.event_service.get_step_events()

    def get_env_time(self) -> int:
        """Number of full env steps taken in this episode."""
        return self.context.step_id

    def close(self) -> None:
        """Release resources."""
