"""DiscretizeActionsWrapper: turns continuous Box actions into discrete bins."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.core.wrappers.space_utils import check_config_keys, ordered_dict_space, require_dict_spaces
from maze_lab.core.wrappers.wrapper import ActionWrapper


class DiscretizeActionsWrapper(ActionWrapper):
    """Replaces 1-D Box actions by ``num_bins`` equally wide bins per element; a bin stands for its centre.

    ``discretization_config`` maps an action name to ``{"num_bins": int, "low": ..., "high": ...}``; ``low`` and
    ``high`` (a number or one value per element, inside the original bounds) default to the Box bounds. A Box
    of shape (1,) becomes ``Discrete(num_bins)``, a longer one ``MultiDiscrete([num_bins] * d)``. Split
    multi-dimensional actions first with the SplitActionsWrapper to discretise elements differently.

    Example: ``{"action": {"num_bins": 5}}`` on Pendulum's Box(-2, 2, (1,)) gives the torques
    -1.6, -0.8, 0, 0.8 and 1.6.
    """

    def __init__(self, env: Any, discretization_config: Mapping[str, Mapping[str, Any]]):
        super().__init__(env)
        require_dict_spaces(env.action_spaces_dict, "action", "DiscretizeActionsWrapper")
        known = {name: space for d in env.action_spaces_dict.values() for name, space in d.spaces.items()}
        self.discretization_config = {k: dict(v) for k, v in discretization_config.items()}
        self._low: dict[str, np.ndarray] = {}
        self._width: dict[str, np.ndarray] = {}
        self._bins: dict[str, int] = {}
        self._box: dict[str, gym.spaces.Box] = {}
        self._new_spaces: dict[str, gym.spaces.Space] = {}
        for name, cfg in self.discretization_config.items():
            where = f"DiscretizeActionsWrapper: discretization_config['{name}']"
            if name not in known:
                raise ConfigurationError(f"{where}: unknown action; available actions: {sorted(known)}")
            check_config_keys(cfg, ["num_bins"], ["low", "high"], where)
            space = known[name]
            if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
                raise ConfigurationError(f"{where}: only 1-D Box actions can be discretised, '{name}' is {space}")
            num_bins = cfg["num_bins"]
            if not isinstance(num_bins, int) or num_bins < 2:
                raise ConfigurationError(f"{where}: num_bins must be an int >= 2, got {num_bins!r}")
            low = np.broadcast_to(np.asarray(cfg.get("low", space.low), dtype=np.float64), space.shape)
            high = np.broadcast_to(np.asarray(cfg.get("high", space.high), dtype=np.float64), space.shape)
            if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
                raise ConfigurationError(f"{where}: the action has infinite bounds {space}; give finite low/high")
            if np.any(low >= high) or np.any(low < space.low) or np.any(high > space.high):
                raise ConfigurationError(f"{where}: need space.low <= low < high <= space.high, got low={low}, "
                                         f"high={high} for {space}")
            self._low[name], self._width[name] = low, (high - low) / num_bins
            self._bins[name], self._box[name] = num_bins, space
            d = space.shape[0]
            self._new_spaces[name] = (gym.spaces.Discrete(num_bins) if d == 1
                                      else gym.spaces.MultiDiscrete([num_bins] * d))
        self._action_spaces = {
            k: ordered_dict_space((n, self._new_spaces.get(n, s)) for n, s in space.spaces.items())
            for k, space in env.action_spaces_dict.items()
        }

    @property
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Action spaces with the discretised actions."""
        return self._action_spaces

    def bin_centers(self, name: str) -> np.ndarray:
        """The continuous value of every bin, shape (num_bins, d)."""
        return self._low[name] + (np.arange(self._bins[name])[:, None] + 0.5) * self._width[name]

    def action(self, action: dict) -> dict:
        """Map bin indices to the centres of the bins."""
        out = dict(action)
        for name in self._bins.keys() & action.keys():
            idx = np.asarray(action[name], dtype=np.float64).reshape(self._box[name].shape)
            value = self._low[name] + (idx + 0.5) * self._width[name]
            out[name] = np.clip(value, self._box[name].low, self._box[name].high).astype(self._box[name].dtype)
        return out

    def reverse_action(self, action: dict) -> dict:
        """Map continuous actions to the index of the bin that contains them."""
        out = dict(action)
        for name in self._bins.keys() & action.keys():
            value = np.asarray(action[name], dtype=np.float64).reshape(self._box[name].shape)
            idx = np.clip(np.floor((value - self._low[name]) / self._width[name]), 0, self._bins[name] - 1)
            idx = idx.astype(np.int64)
            out[name] = int(idx[0]) if isinstance(self._new_spaces[name], gym.spaces.Discrete) else idx
        return out
