"""A tiny scripted CoreEnv/MazeEnv whose events and rewards are known in advance, for statistics tests."""

from __future__ import annotations

from abc import ABC
from typing import Any

import gymnasium as gym
import numpy as np

from maze_lab.core.env.core_env import CoreEnv
from maze_lab.core.env.interfaces import ActionConversionInterface, KpiCalculator, ObservationConversionInterface
from maze_lab.core.env.maze_env import MazeEnv
from maze_lab.core.log_stats.event_decorators import define_episode_stats, define_epoch_stats, define_step_stats


class ScriptEvents(ABC):
    """Events of the scripted env."""

    @define_epoch_stats(np.mean, output_name="mean_episode_total")
    @define_episode_stats(sum)
    @define_step_stats(len)
    def hit(self):
        """Fired ``action`` times per step."""

    @define_epoch_stats(np.mean, input_name="step_mean", output_name="step_mean")
    @define_epoch_stats(max, input_name="step_max", output_name="step_max")
    @define_episode_stats(np.mean, output_name="step_mean")
    @define_episode_stats(max, output_name="step_max")
    @define_step_stats(None)
    def level(self, value: int):
        """Reports a level once per step."""

    @define_epoch_stats(np.mean, output_name="mean_episode_total")
    @define_episode_stats(sum)
    @define_step_stats(len)
    def never(self):
        """Never fired: its count must be zero, not missing."""


class ScriptKpi(KpiCalculator):
    """KPI: hits per step."""

    def calculate_kpis(self, episode_event_log: Any, last_maze_state: Any) -> dict[str, float]:
        """Hits divided by steps."""
        hits = len(episode_event_log.query_events(ScriptEvents.hit))
        return {"hits_per_step": hits / len(episode_event_log.step_event_logs)}


class ScriptCoreEnv(CoreEnv):
    """Action n fires n ``hit`` events and a ``level`` event with the step index; reward = n; ends after
    ``episode_length`` steps (terminated)."""

    def __init__(self, episode_length: int = 3):
        super().__init__()
        self.episode_length = episode_length
        self.events = self.pubsub.create_event_topic(ScriptEvents)
        self.t = 0

    def step(self, maze_action: int) -> tuple[Any, float, bool, bool, dict]:
        """Fire the scripted events."""
        for _ in range(maze_action):
            self.events.hit()
        self.t += 1
        self.events.level(value=self.t * 10)
        return self.t, float(maze_action), self.t >= self.episode_length, False, {}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> int:
        """Back to t = 0."""
        self.t = 0
        return self.t

    def get_maze_state(self) -> int:
        """The step counter."""
        return self.t

    def get_kpi_calculator(self) -> KpiCalculator:
        """Hits per step."""
        return ScriptKpi()


class _Obs(ObservationConversionInterface):
    def maze_to_space(self, maze_state: int) -> dict:
        return {"t": np.array([maze_state], dtype=np.float32)}

    def space(self) -> gym.spaces.Dict:
        return gym.spaces.Dict({"t": gym.spaces.Box(0, 100, shape=(1,), dtype=np.float32)})


class _Act(ActionConversionInterface):
    def space_to_maze(self, action: dict, maze_state: Any) -> int:
        return int(action["n"])

    def space(self) -> gym.spaces.Dict:
        return gym.spaces.Dict({"n": gym.spaces.Discrete(4)})


def make_script_env(episode_length: int = 3) -> MazeEnv:
    """The scripted MazeEnv."""
    return MazeEnv(ScriptCoreEnv(episode_length), {0: _Act()}, {0: _Obs()})
