"""MazeEnvMonitoringWrapper: fires observation, action and reward events for statistics and dashboards."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from maze_lab.core.events.event_record import EventRecord
from maze_lab.core.log_stats.base_events import (
    ContinuousActionEvents,
    DiscreteActionEvents,
    ObservationEvents,
    RewardEvents,
)
from maze_lab.core.wrappers.wrapper import Wrapper

_OBS_ORIG = ObservationEvents.observation_original
_OBS_PROC = ObservationEvents.observation_processed
_REWARD = RewardEvents.step_reward


class MazeEnvMonitoringWrapper(Wrapper):
    """Records observations (as produced by the MazeEnv and as returned here), actions and rewards as events.

    Put it at the top of the processing wrappers and below the LogStatsWrapper.
    """

    def __init__(self, env: Any, observation_logging: bool = True, action_logging: bool = True,
                 reward_logging: bool = True):
        super().__init__(env)
        self.observation_logging = observation_logging
        self.action_logging = action_logging
        self.reward_logging = reward_logging
        self._service = env.context.event_service
        self._inner = self.unwrapped
        # per policy key: list of (name, topic, method, is_discrete) for each action head
        self._action_heads: dict[Any, list[tuple[str, type, Any]]] = {}
        for key, space in self.action_spaces_dict.items():
            heads = []
            for name, sub in space.spaces.items():
                if isinstance(sub, gym.spaces.Box):
                    heads.append((name, ContinuousActionEvents, ContinuousActionEvents.action))
                else:
                    heads.append((name, DiscreteActionEvents, DiscreteActionEvents.action))
            self._action_heads[key] = heads
        for topic in (ContinuousActionEvents, DiscreteActionEvents, ObservationEvents, RewardEvents):
            if topic not in self._service.topics:
                self._service.topics.append(topic)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Step, then record the action taken, the reward and the new observation."""
        key = self.env.actor_id().step_key
        obs, reward, terminated, truncated, info = self.env.step(action)
        record = self._service.record
        if self.action_logging:
            for name, topic, method in self._action_heads[key]:
                value = action[name]
                if isinstance(value, np.ndarray) and value.ndim == 0:
                    value = value.item()
                record(EventRecord(topic, method, {"step_key": key, "name": name, "value": value}))
        if self.reward_logging:
            record(EventRecord(RewardEvents, _REWARD, {"value": float(reward)}))
        if self.observation_logging:
            self._log_observation(obs)
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Reset and record the first observation."""
        obs, info = self.env.reset(seed=seed, options=options)
        if self.observation_logging:
            self._log_observation(obs)
        return obs, info

    def _log_observation(self, obs: dict) -> None:
        key = self.env.actor_id().step_key
        record = self._service.record
        original = getattr(self._inner, "_last_obs", None)
        if original is not None:
            for name, value in original.items():
                record(EventRecord(ObservationEvents, _OBS_ORIG, {"step_key": key, "name": name, "value": value}))
        if original is not obs:
            for name, value in obs.items():
                record(EventRecord(ObservationEvents, _OBS_PROC, {"step_key": key, "name": name, "value": value}))
