"""Services shared by all components of one env stack: the event service and the env time."""

from __future__ import annotations

from maze_lab.core.events.pubsub import EventService


class EnvironmentContext:
    """Holds the event service and the step counter of one env (shared by wrappers and the core env)."""

    def __init__(self) -> None:
        self.event_service = EventService()
        self.step_id = 0
        self.episode_id = 0
        # wrappers that buffer values of pass-through events themselves (for speed) register a callable here
        # that returns and clears {(event method, group): [values]}; the LogStatsWrapper collects them
        self.episode_buffers: list = []

    def increment_env_step(self) -> None:
        """A full env step (all sub-steps) has been completed."""
        self.step_id += 1

    def reset_env_episode(self) -> None:
        """A new episode starts."""
        self.step_id = 0
        self.episode_id += 1
        self.event_service.clear_step()
