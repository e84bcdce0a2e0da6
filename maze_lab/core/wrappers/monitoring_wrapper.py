"""MazeEnvMonitoringWrapper: records observations, actions and rewards for statistics and dashboards."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from maze_lab.core.log_stats.base_events import (
    ContinuousActionEvents,
    DiscreteActionEvents,
    ObservationEvents,
    RewardEvents,
)
from maze_lab.core.wrappers.wrapper import Wrapper

_OBS_ORIG = ObservationEvents.observation_original
_OBS_PROC = ObservationEvents.observation_processed
_REWARD = (RewardEvents.step_reward, None)


class MazeEnvMonitoringWrapper(Wrapper):
    """Records observations (as produced by the MazeEnv and as returned here), actions and rewards.

    The values are statistics of the built-in topics DiscreteActionEvents / ContinuousActionEvents,
    ObservationEvents and RewardEvents. For speed they are appended to per-episode buffers instead of being
    dispatched as event objects; the LogStatsWrapper above collects the buffers at the end of each episode.
    Put it at the top of the processing wrappers and below the LogStatsWrapper.
    """

    def __init__(self, env: Any, observation_logging: bool = True, action_logging: bool = True,
                 reward_logging: bool = True):
        super().__init__(env)
        self.observation_logging = observation_logging
        self.action_logging = action_logging
        self.reward_logging = reward_logging
        self._context = env.context
        self._inner = self.unwrapped
        # the policy keys of the MazeEnv itself: a structured env built as a wrapper around a flat MazeEnv (the
        # Cutting-2D tutorial's) has sub-steps of its own whose observations the MazeEnv never produced
        self._inner_keys = frozenset(getattr(self._inner, "observation_spaces_dict", None) or ())
        self._flat_key = next(iter(self.action_spaces_dict)) if len(self.action_spaces_dict) == 1 else None
        # buffer keys (event method, (policy key, head name)) for each policy key's action heads
        self._action_keys: dict[Any, list[tuple[str, tuple]]] = {}
        for key, space in self.action_spaces_dict.items():
            self._action_keys[key] = [
                (name, (ContinuousActionEvents.action if isinstance(sub, gym.spaces.Box)
                        else DiscreteActionEvents.action, (key, name)))
                for name, sub in space.spaces.items()
            ]
        # buffer keys of the flat env's observation (the names of its space), decided once
        self._flat_obs_keys: list[tuple[str, tuple]] = []
        if self._flat_key is not None:
            self._flat_obs_keys = [(n, (_OBS_ORIG, (self._flat_key, n)))
                                   for n in self.observation_spaces_dict[self._flat_key].spaces]
        self._collected = False
        self._new_buffers()
        self._context.episode_buffers.append(self.pop_episode_buffers)

    def _new_buffers(self) -> None:
        self._buffers: dict[tuple, list] = {}
        self._rewards: list[float] = []
        # direct references to the flat env's lists: the per-step path is a few list appends
        self._flat_actions: list[tuple[str, list]] = []
        self._flat_obs: list[tuple[str, list]] = []
        # the same for each policy key of a structured env, made on the key's first step of the episode:
        # policy key -> [(head name, list)], and policy key -> ({original observation name: list}, {processed ...})
        self._key_actions: dict[Any, list[tuple[str, list]]] = {}
        self._key_obs: dict[Any, tuple[dict[str, list], dict[str, list]]] = {}
        if self._flat_key is not None:
            self._flat_actions = [(name, self._buffer(bkey)) for name, bkey in self._action_keys[self._flat_key]]
            self._flat_obs = [(name, self._buffer(bkey)) for name, bkey in self._flat_obs_keys]

    def _buffer(self, key: tuple) -> list:
        lst = self._buffers.get(key)
        if lst is None:
            self._buffers[key] = lst = []
        return lst

    def pop_episode_buffers(self) -> dict[tuple, list]:
        """Hand over and clear the values recorded in this episode."""
        buffers = {k: v for k, v in self._buffers.items() if v}
        if self.reward_logging and self._rewards:
            buffers[_REWARD] = self._rewards
        if buffers or self._rewards:  # (nothing recorded: the empty buffers stay as they are)
            self._new_buffers()
        self._collected = True
        return buffers

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Step, then record the action taken, the reward and the new observation."""
        key = self._flat_key
        if key is None:  # a structured env: the policy key changes from sub-step to sub-step
            key = self.env.actor_id().step_key
            obs, reward, terminated, truncated, info = self.env.step(action)
            if self.action_logging:
                lists = self._key_actions.get(key)
                if lists is None:
                    lists = self._key_actions[key] = [(name, self._buffer(bkey))
                                                      for name, bkey in self._action_keys[key]]
                for name, lst in lists:
                    lst.append(action[name])
            if self.reward_logging:
                self._rewards.append(reward)
            if self.observation_logging:
                self._log_observation(obs, self.env.actor_id().step_key)
            return obs, reward, terminated, truncated, info
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.action_logging:
            actions = self._flat_actions
            if len(actions) == 1:  # one action head (a Gymnasium env's "action"): no loop
                name, lst = actions[0]
                lst.append(action[name])
            else:
                for name, lst in actions:
                    lst.append(action[name])
        if self.reward_logging:
            self._rewards.append(reward)
        if self.observation_logging:
            if self._inner._last_obs is obs:
                observations = self._flat_obs
                if len(observations) == 1:  # one observation key (a Gymnasium env's "observation"): no loop
                    name, lst = observations[0]
                    lst.append(obs[name])
                else:
                    for name, lst in observations:
                        lst.append(obs[name])
            else:
                self._log_observation(obs, key)
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Reset and record the first observation."""
        if not self._collected:
            self._new_buffers()  # nobody collects (no LogStatsWrapper above): do not grow without bound
        self._collected = False
        obs, info = self.env.reset(seed=seed, options=options)
        if self.observation_logging:
            self._log_observation(obs, self._flat_key if self._flat_key is not None else self.env.actor_id().step_key)
        return obs, info

    def _log_observation(self, obs: dict, key: Any) -> None:
        """Record the observation of policy key ``key`` (the actor that acts next)."""
        lists = self._key_obs.get(key)
        if lists is None:  # observation name -> list, for the original and the processed observations of the key
            lists = self._key_obs[key] = ({}, {})
        # the MazeEnv's last observation is this policy key's original only where the key is one of the MazeEnv's
        # own; otherwise it is another sub-step's (e.g. the flat observation while a wrapper's cutting sub-step acts)
        original = self._inner._last_obs if self._flat_key is not None or key in self._inner_keys else None
        if original is not None:
            named = lists[0]
            for name, value in original.items():
                lst = named.get(name)
                if lst is None:
                    lst = named[name] = self._buffer((_OBS_ORIG, (key, name)))
                lst.append(value)
        if original is not obs:
            named = lists[1]
            for name, value in obs.items():
                lst = named.get(name)
                if lst is None:
                    lst = named[name] = self._buffer((_OBS_PROC, (key, name)))
                lst.append(value)
