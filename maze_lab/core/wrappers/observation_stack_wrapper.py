"""ObservationStackWrapper: adds the observations of the last N steps as one stacked observation."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.core.wrappers.space_utils import check_config_keys, ordered_dict_space, require_dict_spaces
from maze_lab.core.wrappers.wrapper import ObservationWrapper

_REQUIRED = ("observation", "stack_steps")
_OPTIONAL = ("keep_original", "tag", "delta")


class ObservationStackWrapper(ObservationWrapper):
    """Stacks the last ``stack_steps`` values of selected observations along a new leading axis.

    Row ``-1`` is the current observation and earlier rows hold earlier steps (oldest first); at the start of an
    episode the missing rows are zeros. With ``delta`` the earlier rows hold the change from each step to the
    next (``obs[t-k+1] - obs[t-k]``) while the last row stays the current observation, and the stack is float.

    :param stack_config: one entry per stacked observation, with the keys

        - ``observation``: name of the observation to stack (a Box space);
        - ``stack_steps``: number of steps in the stack (>= 1);
        - ``keep_original`` (default False): keep the unstacked observation as well;
        - ``tag`` (default None): the stack is called ``<observation>-<tag>``, or replaces the observation
          when None (then ``keep_original`` must be False);
        - ``delta`` (default False): stack step-to-step differences instead of the values.
    """

    def __init__(self, env: Any, stack_config: list[Mapping[str, Any]]):
        super().__init__(env)
        require_dict_spaces(env.observation_spaces_dict, "observation", "ObservationStackWrapper")
        if isinstance(stack_config, Mapping):
            stack_config = [stack_config]
        self.stack_config: list[dict[str, Any]] = []
        known = {name for space in env.observation_spaces_dict.values() for name in space.spaces}
        for i, entry in enumerate(stack_config):
            where = f"ObservationStackWrapper stack_config[{i}]"
            check_config_keys(entry, _REQUIRED, _OPTIONAL, where)
            cfg = {"keep_original": False, "tag": None, "delta": False, **entry}
            if cfg["observation"] not in known:
                raise ConfigurationError(f"{where}: unknown observation '{cfg['observation']}'; available "
                                         f"observations: {sorted(known)}")
            if not isinstance(cfg["stack_steps"], int) or cfg["stack_steps"] < 1:
                raise ConfigurationError(f"{where}: stack_steps must be an int >= 1, got {cfg['stack_steps']!r}")
            if cfg["tag"] is None and cfg["keep_original"]:
                raise ConfigurationError(f"{where}: keep_original needs a tag, otherwise the stack would replace "
                                         f"the original observation '{cfg['observation']}'")
            cfg["name"] = cfg["observation"] if cfg["tag"] is None else f"{cfg['observation']}-{cfg['tag']}"
            self.stack_config.append(cfg)

        self._history_len: dict[str, int] = {}
        for cfg in self.stack_config:
            obs = cfg["observation"]
            self._history_len[obs] = max(self._history_len.get(obs, 0), cfg["stack_steps"])
        self._history: dict[str, deque] = {}
        self._stack_spaces: dict[str, gym.spaces.Box] = {}
        self._observation_spaces = {k: self._stacked_space(k, s) for k, s in env.observation_spaces_dict.items()}

    def _stacked_space(self, step_key: StepKey, space: gym.spaces.Dict) -> gym.spaces.Dict:
        spaces = dict(space.spaces)
        drop = set()
        for cfg in self.stack_config:
            obs = cfg["observation"]
            if obs not in space.spaces:
                continue
            sub = space.spaces[obs]
            if not isinstance(sub, gym.spaces.Box):
                raise TypeError(f"ObservationStackWrapper: observation '{obs}' of policy key {step_key!r} is {sub}; "
                                f"only Box observations can be stacked (one-hot encode discrete ones first)")
            stacked = _stack_space(sub, cfg["stack_steps"], cfg["delta"])
            self._stack_spaces[cfg["name"]] = stacked
            spaces[cfg["name"]] = stacked
            if not cfg["keep_original"] and cfg["tag"] is not None:
                drop.add(obs)
        return ordered_dict_space((k, s) for k, s in spaces.items() if k not in drop)

    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Observation spaces with the stacked observations."""
        return self._observation_spaces

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Reset the wrapped env and clear the stacks."""
        self._history = {}
        return super().reset(seed=seed, options=options)

    def observation(self, observation: dict) -> dict:
        """Record the observation and add the stacks."""
        for obs, n in self._history_len.items():
            if obs in observation:
                history = self._history.get(obs)
                if history is None:
                    history = self._history[obs] = deque(maxlen=n)
                history.append(np.array(observation[obs]))  # a copy: envs may reuse their arrays
        out = dict(observation)
        drop = set()
        for cfg in self.stack_config:
            obs = cfg["observation"]
            if obs not in observation:
                continue
            out[cfg["name"]] = self._stack(cfg, self._history[obs])
            if not cfg["keep_original"] and cfg["tag"] is not None:
                drop.add(obs)
        for obs in drop:
            del out[obs]
        return out

    def _stack(self, cfg: dict[str, Any], history: deque) -> np.ndarray:
        n = cfg["stack_steps"]
        space = self._stack_spaces[cfg["name"]]
        recent = list(history)[-n:]
        out = np.zeros(space.shape, dtype=space.dtype)
        values = np.stack([np.asarray(v, dtype=space.dtype) for v in recent])
        if cfg["delta"] and len(recent) > 1:
            out[n - len(recent):n - 1] = np.diff(values, axis=0)
            out[-1] = values[-1]
        else:
            out[n - len(recent):] = values
        return out


def _stack_space(space: gym.spaces.Box, n: int, delta: bool) -> gym.spaces.Box:
    """The Box of ``n`` stacked values (zero padding and, with ``delta``, differences included in the bounds)."""
    dtype = np.dtype(space.dtype)
    if delta and not np.issubdtype(dtype, np.floating):
        dtype = np.dtype(np.float32)
    low = space.low.astype(np.float64)
    high = space.high.astype(np.float64)
    with np.errstate(invalid="ignore"):
        if delta:
            past_low, past_high = np.minimum(low - high, 0.0), np.maximum(high - low, 0.0)
        else:
            past_low, past_high = np.minimum(low, 0.0), np.maximum(high, 0.0)
    lows = np.stack([past_low] * (n - 1) + [low]) if n > 1 else low[None]
    highs = np.stack([past_high] * (n - 1) + [high]) if n > 1 else high[None]
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        lows, highs = np.clip(lows, info.min, info.max), np.clip(highs, info.min, info.max)
    with np.errstate(over="ignore"):
        return gym.spaces.Box(low=lows.astype(dtype), high=highs.astype(dtype), dtype=dtype)
