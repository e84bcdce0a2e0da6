"""CoreEnv: the environment mechanics on MazeState / MazeAction objects, with events and KPIs."""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from maze_lab.core.env.environment_context import EnvironmentContext
from maze_lab.core.env.interfaces import KpiCalculator, MazeActionType, MazeStateType, Renderer
from maze_lab.core.env.structured_env import ActorID, FullStepTracker, StepKey, StructuredEnv
from maze_lab.core.events.event_record import EventRecord
from maze_lab.core.events.pubsub import Pubsub


class CoreEnv(StructuredEnv, ABC):
    """Implements an env's mechanics; subclasses fire events through ``self.pubsub`` topics.

    The framework owns the plumbing around a subclass's ``step`` and ``reset`` (they are wrapped when the
    subclass is defined): ``self.reward_aggregator`` is reset at the start of each full env step and of each
    episode, and the env time advances once per full env step. A flat env's every step is a full step; a
    structured env's sub-steps share one env time, a full step ending when the actors went round (see
    :class:`FullStepTracker`) or the episode ended. A core env that calls ``self.context.increment_env_step()``
    itself (the Maze convention for structured envs) keeps its own env time.
    """

    # per-instance plumbing state (class defaults: a subclass that sets attributes before super().__init__()
    # still works)
    _plumbing_active = False  # inside a plumbed step/reset: a subclass's super().step() passes straight through
    _full_step_open = False  # a full env step has begun: its events go on collecting into the aggregator
    _manages_env_time = False  # the env advanced its env time itself once: the framework leaves it alone
    _flat_core_env = True  # actor_id is not overridden: every step is a full step
    reward_aggregator: Any = None  # set by subclasses that compute rewards from events

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._flat_core_env = cls.actor_id is CoreEnv.actor_id
        for name, plumb in (("step", _plumbed_step), ("reset", _plumbed_reset)):
            method = getattr(cls, name)
            if not getattr(method, "__isabstractmethod__", False) and not getattr(method, "_plumbed", False):
                setattr(cls, name, plumb(method))

    def __init__(self) -> None:
        self.context = EnvironmentContext()
        self.pubsub = Pubsub(self.context.event_service)
        self.reward_aggregator = None
        self._step_tracker = FullStepTracker()

    def _tracker(self) -> FullStepTracker:
        """The tracker of this env's full steps (made here where a subclass skipped ``CoreEnv.__init__``)."""
        tracker = self.__dict__.get("_step_tracker")
        if tracker is None:
            tracker = self._step_tracker = FullStepTracker()
        return tracker

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
        """Number of full env steps taken in this episode (sub-steps of a structured env share one)."""
        return self.context.step_id

    def close(self) -> None:
        """Release resources."""


def _episode_ended(result: Any) -> bool:
    """Whether a core env's step result ``(state, reward, terminated, truncated, info)`` ends the episode."""
    try:
        return len(result) == 5 and bool(result[2] or result[3])
    except (TypeError, ValueError):
        return False


def _plumbed_step(step: Callable) -> Callable:
    """``step`` with the framework's plumbing: aggregator reset when a full step begins, env time after it."""

    @functools.wraps(step)
    def plumbed_step(self: CoreEnv, maze_action: Any) -> Any:
        if self._plumbing_active:
            return step(self, maze_action)
        context = self.context
        service = context.event_service
        if service._step_events:
            # a core env stepped by hand (no MazeEnv above, which does the same) reports this step's events only
            service._step_events = []
        if not self._full_step_open:
            aggregator = self.reward_aggregator
            if aggregator is not None:
                aggregator.reset()
            self._full_step_open = True
        flat = self._flat_core_env
        actor = None if flat else self.actor_id()
        time_before = context.step_id
        self._plumbing_active = True
        try:
            result = step(self, maze_action)
        finally:
            self._plumbing_active = False
        if context.step_id != time_before:
            self._manages_env_time = True
            self._full_step_open = False
            self._tracker().reset()
        elif not self._manages_env_time and (
                flat or self._tracker().sub_step_done(actor, self.actor_id(), _episode_ended(result))):
            context.increment_env_step()
            self._full_step_open = False
        return result

    plumbed_step._plumbed = True  # type: ignore[attr-defined]
    return plumbed_step


def _plumbed_reset(reset: Callable) -> Callable:
    """``reset`` with the framework's plumbing: a fresh aggregator, env time 0 and no full step in progress."""

    @functools.wraps(reset)
    def plumbed_reset(self: CoreEnv, *args: Any, **kwargs: Any) -> Any:
        if self._plumbing_active:
            return reset(self, *args, **kwargs)
        service = self.context.event_service
        if service._step_events:
            service._step_events = []  # events of the last episode (or of the constructor) are not this reset's
        aggregator = self.reward_aggregator
        if aggregator is not None:
            aggregator.reset()
        self._full_step_open = False
        self._tracker().reset()
        self.context.step_id = 0
        self._plumbing_active = True
        try:
            return reset(self, *args, **kwargs)
        finally:
            self._plumbing_active = False

    plumbed_reset._plumbed = True  # type: ignore[attr-defined]
    return plumbed_reset
