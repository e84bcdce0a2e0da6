"""SplitActionsWrapper: splits one action into several named actions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.core.wrappers.space_utils import ordered_dict_space, require_dict_spaces
from maze_lab.core.wrappers.wrapper import ActionWrapper


class SplitActionsWrapper(ActionWrapper):
    """Replaces an action by several sub-actions, as configured per original action name.

    ``split_config`` maps an original action name to ``{new_action_name: spec}``:

    - 1-D Box, MultiDiscrete or MultiBinary actions: ``spec = {"indices": [...]}`` picks the elements of the
      original vector that make up the new action. The indices of all new actions must together cover each
      element exactly once. A MultiDiscrete part with a single index becomes a Discrete action, Box parts stay
      Box (shape ``(len(indices),)``) and MultiBinary parts stay MultiBinary.
    - Discrete actions: ``spec = {"n": k}`` factorises the original ``Discrete(N)`` into Discrete(k) actions
      whose sizes multiply to N; the original action is the mixed-radix number formed by the new actions in
      config order (the first one is the most significant digit).

    Example: ``{"action": {"throttle": {"indices": [0]}, "steer": {"indices": [1]}}}`` for a Box(2) action.
    """

    def __init__(self, env: Any, split_config: Mapping[str, Mapping[str, Mapping[str, Any]]]):
        super().__init__(env)
        require_dict_spaces(env.action_spaces_dict, "action", "SplitActionsWrapper")
        known = {name: space for d in env.action_spaces_dict.values() for name, space in d.spaces.items()}
        self.split_config: dict[str, dict[str, dict[str, Any]]] = {}
        self._plans: dict[str, _Split] = {}
        for original, parts in split_config.items():
            if original not in known:
                raise ConfigurationError(f"SplitActionsWrapper: unknown action '{original}'; available actions: "
                                         f"{sorted(known)}")
            if not isinstance(parts, Mapping) or not parts:
                raise ConfigurationError(f"SplitActionsWrapper: split_config['{original}'] must map new action "
                                         f"names to specs, got {parts!r}")
            self.split_config[original] = {name: dict(spec) for name, spec in parts.items()}
            self._plans[original] = _Split(original, known[original], self.split_config[original])
        self._new_to_original = {new: original for original, plan in self._plans.items() for new in plan.spaces}
        self._action_spaces = {k: self._split_space(s) for k, s in env.action_spaces_dict.items()}

    def _split_space(self, space: gym.spaces.Dict) -> gym.spaces.Dict:
        items: list[tuple[str, gym.spaces.Space]] = []
        for name, sub in space.spaces.items():
            if name in self._plans:
                items.extend(self._plans[name].spaces.items())
            else:
                items.append((name, sub))
        return ordered_dict_space(items)

    @property
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Action spaces with the split actions."""
        return self._action_spaces

    def action(self, action: dict) -> dict:
        """Join the sub-actions into the original actions."""
        out: dict[str, Any] = {}
        parts: dict[str, dict[str, Any]] = {}
        for name, value in action.items():
            original = self._new_to_original.get(name)
            if original is None:
                out[name] = value
            else:
                parts.setdefault(original, {})[name] = value
        for original, values in parts.items():
            out[original] = self._plans[original].join(values)
        return out

    def reverse_action(self, action: dict) -> dict:
        """Split original actions into the sub-actions."""
        out: dict[str, Any] = {}
        for name, value in action.items():
            if name in self._plans:
                out.update(self._plans[name].split(value))
            else:
                out[name] = value
        return out


class _Split:
    """How one original action maps to its sub-actions."""

    def __init__(self, original: str, space: gym.spaces.Space, parts: dict[str, dict[str, Any]]):
        self.original = original
        self.space = space
        self.spaces: dict[str, gym.spaces.Space] = {}
        where = f"SplitActionsWrapper: split of '{original}' ({space})"
        if isinstance(space, gym.spaces.Discrete):
            self.sizes: list[int] = []
            for name, spec in parts.items():
                if set(spec) != {"n"} or int(spec["n"]) < 1:
                    raise ConfigurationError(f"{where}: Discrete actions are split with {{'n': size}} per new action, "
                                             f"got {name}: {spec}")
                self.sizes.append(int(spec["n"]))
                self.spaces[name] = gym.spaces.Discrete(int(spec["n"]))
            if int(np.prod(self.sizes)) != int(space.n):
                raise ConfigurationError(f"{where}: the sizes {self.sizes} multiply to {int(np.prod(self.sizes))}, "
                                         f"not {int(space.n)}")
            return
        if not isinstance(space, gym.spaces.Box | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary) \
                or len(space.shape) != 1:
            raise ConfigurationError(f"{where}: only Discrete and 1-D Box, MultiDiscrete and MultiBinary actions "
                                     f"can be split")
        size = space.shape[0]
        self.indices: dict[str, np.ndarray] = {}
        for name, spec in parts.items():
            if set(spec) != {"indices"} or not len(spec["indices"]):
                raise ConfigurationError(f"{where}: each new action needs {{'indices': [...]}}, got {name}: {spec}")
            idx = np.asarray(list(spec["indices"]), dtype=np.int64)
            if np.any(idx < 0) or np.any(idx >= size):
                raise ConfigurationError(f"{where}: indices {idx.tolist()} of '{name}' are outside [0, {size})")
            self.indices[name] = idx
            self.spaces[name] = self._sub_space(idx)
        used = np.concatenate(list(self.indices.values()))
        counts = np.bincount(used, minlength=size)
        if np.any(counts != 1):
            raise ConfigurationError(f"{where}: every index must be used exactly once; missing "
                                     f"{np.flatnonzero(counts == 0).tolist()}, repeated "
                                     f"{np.flatnonzero(counts > 1).tolist()}")

    def _sub_space(self, idx: np.ndarray) -> gym.spaces.Space:
        space = self.space
        if isinstance(space, gym.spaces.Box):
            return gym.spaces.Box(low=space.low[idx], high=space.high[idx], dtype=space.dtype)
        if isinstance(space, gym.spaces.MultiDiscrete):
            if len(idx) == 1:
                return gym.spaces.Discrete(int(space.nvec[idx[0]]), start=int(space.start[idx[0]]))
            return gym.spaces.MultiDiscrete(space.nvec[idx], dtype=space.dtype, start=space.start[idx])
        return gym.spaces.MultiBinary(len(idx))

    def join(self, values: dict[str, Any]) -> Any:
        """The original action from all its sub-actions."""
        if values.keys() != self.spaces.keys():
            raise KeyError(f"SplitActionsWrapper: action '{self.original}' needs the sub-actions "
                           f"{list(self.spaces)}, got {list(values)}")
        if isinstance(self.space, gym.spaces.Discrete):
            index = 0
            for name, size in zip(self.spaces, self.sizes, strict=True):
                index = index * size + int(values[name])
            return int(self.space.start) + index
        out = np.empty(self.space.shape, dtype=self.space.dtype)
        for name, idx in self.indices.items():
            out[idx] = np.asarray(values[name]).reshape(len(idx))
        return out

    def split(self, value: Any) -> dict[str, Any]:
        """The sub-actions of an original action."""
        if isinstance(self.space, gym.spaces.Discrete):
            rest = int(value) - int(self.space.start)
            digits = []
            for size in reversed(self.sizes):
                rest, digit = divmod(rest, size)
                digits.append(digit)
            return dict(zip(self.spaces, reversed(digits), strict=True))
        arr = np.asarray(value)
        out: dict[str, Any] = {}
        for name, idx in self.indices.items():
            sub = self.spaces[name]
            out[name] = int(arr[idx[0]]) if isinstance(sub, gym.spaces.Discrete) else arr[idx].astype(sub.dtype)
        return out
