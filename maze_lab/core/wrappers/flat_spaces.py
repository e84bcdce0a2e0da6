"""Flat views of Dict spaces for libraries that take neither Dict observations nor Dict actions.

``FlatObservationLayout`` turns a Dict observation space into one 1-D float32 Box (Box entries flattened,
Discrete and MultiDiscrete entries one-hot, MultiBinary as 0/1) and records where each entry lies, so that a
flat vector maps back to the dict. ``FlatActionLayout`` turns a Dict action space of discrete heads into
``Discrete`` (one head) or ``MultiDiscrete`` (several), and one of continuous heads into one 1-D Box.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from maze_lab.core.env.space_checks import SpaceMismatchError

_DISCRETE_TYPES = (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


@dataclass(frozen=True)
class FlatField:
    """One entry of a flattened Dict space: its name, its own space and its part ``[start, stop)`` of the flat
    vector (for discrete actions: of the MultiDiscrete vector; ``mask_start``/``mask_stop`` index the
    concatenated per-choice mask that sb3-contrib's MaskablePPO expects)."""

    name: str
    space: gym.spaces.Space
    start: int
    stop: int
    mask_start: int = 0
    mask_stop: int = 0

    @property
    def slice(self) -> slice:
        """The part of the flat vector that holds this entry."""
        return slice(self.start, self.stop)

    @property
    def mask_slice(self) -> slice:
        """The part of the flat action mask that belongs to this entry (discrete actions only)."""
        return slice(self.mask_start, self.mask_stop)


def _require_dict(space: gym.spaces.Space, what: str) -> gym.spaces.Dict:
    if not isinstance(space, gym.spaces.Dict):
        raise TypeError(f"a flat {what} layout is built from a Dict space, got {space}; wrap a single space as "
                        f"Dict({{'{what}': space}})")
    return space


def _check_keys(value: Any, space: gym.spaces.Dict, what: str, where: str) -> None:
    """Raise SpaceMismatchError naming missing and unknown keys and the space that declares the right ones."""
    if not isinstance(value, Mapping):
        raise SpaceMismatchError(f"{where}: expected a dict {what} with keys {list(space.spaces)}, got "
                                 f"{type(value).__name__}; the space is {space}")
    if value.keys() != space.spaces.keys():
        missing = [k for k in space.spaces if k not in value]
        unknown = sorted(str(k) for k in value if k not in space.spaces)
        raise SpaceMismatchError(f"{where}: {what} keys do not match the space: missing {missing}, unknown "
                                 f"{unknown}; expected exactly {list(space.spaces)} of {space}")


class FlatObservationLayout:
    """A Dict observation space as one 1-D float32 Box, with the position of every entry.

    :param space: the Dict space to flatten (entries: Box, Discrete, MultiDiscrete, MultiBinary).
    :param where: prefix of error messages (which env and policy key).
    """

    def __init__(self, space: gym.spaces.Space, where: str = "observation"):
        self.dict_space = _require_dict(space, "observation")
        self.where = where
        fields, lows, highs = [], [], []
        pos = 0
        for name, sub in self.dict_space.spaces.items():
            if isinstance(sub, gym.spaces.Box):
                size = int(np.prod(sub.shape))
                lows.append(sub.low.astype(np.float32).ravel())
                highs.append(sub.high.astype(np.float32).ravel())
            elif isinstance(sub, gym.spaces.Discrete):
                size = int(sub.n)
            elif isinstance(sub, gym.spaces.MultiDiscrete):
                size = int(np.sum(sub.nvec))
            elif isinstance(sub, gym.spaces.MultiBinary):
                size = int(np.prod(sub.shape))
            else:
                raise TypeError(f"{where}: observation '{name}' has space {sub}, which cannot be flattened into a "
                                f"Box; flattening supports Box, Discrete, MultiDiscrete and MultiBinary entries. "
                                f"Turn it into one of those with a wrapper, or keep Dict observations "
                                f"(flatten_observation=False)")
            if not isinstance(sub, gym.spaces.Box):
                lows.append(np.zeros(size, dtype=np.float32))
                highs.append(np.ones(size, dtype=np.float32))
            fields.append(FlatField(name, sub, pos, pos + size))
            pos += size
        self.fields: tuple[FlatField, ...] = tuple(fields)
        self.size = pos
        low = np.concatenate(lows) if lows else np.zeros(0, dtype=np.float32)
        high = np.concatenate(highs) if highs else np.zeros(0, dtype=np.float32)
        self.space = gym.spaces.Box(low, high, shape=(pos,), dtype=np.float32)
        self._by_name = {f.name: f for f in self.fields}

    def field(self, name: str) -> FlatField:
        """The entry ``name`` (its slice of the flat vector and its original space)."""
        if name not in self._by_name:
            raise KeyError(f"{self.where}: no observation '{name}'; the flat observation holds {list(self._by_name)}")
        return self._by_name[name]

    def flatten(self, observation: Mapping[str, Any]) -> np.ndarray:
        """The dict observation as one float32 vector."""
        _check_keys(observation, self.dict_space, "observation", self.where)
        out = np.zeros(self.size, dtype=np.float32)
        for f in self.fields:
            value = observation[f.name]
            sub = f.space
            if isinstance(sub, gym.spaces.Discrete):
                out[f.start + int(np.asarray(value).ravel()[0]) - int(sub.start)] = 1.0
            elif isinstance(sub, gym.spaces.MultiDiscrete):
                offsets = f.start + np.concatenate(([0], np.cumsum(sub.nvec.ravel())[:-1]))
                out[offsets + (np.asarray(value) - sub.start).ravel()] = 1.0
            else:
                arr = np.asarray(value)
                if arr.size != f.stop - f.start:
                    raise SpaceMismatchError(f"{self.where}: observation['{f.name}'] has shape {arr.shape}, the "
                                             f"space declares {sub}")
                out[f.slice] = arr.ravel()
        return out

    def unflatten(self, vector: np.ndarray) -> dict[str, Any]:
        """The dict observation of a flat vector (values in the original shapes and dtypes)."""
        vector = np.asarray(vector)
        if vector.shape != (self.size,):
            raise SpaceMismatchError(f"{self.where}: a flat observation has shape ({self.size},), got {vector.shape}")
        out: dict[str, Any] = {}
        for f in self.fields:
            part, sub = vector[f.slice], f.space
            if isinstance(sub, gym.spaces.Discrete):
                out[f.name] = np.int64(int(np.argmax(part)) + int(sub.start))
            elif isinstance(sub, gym.spaces.MultiDiscrete):
                nvec = sub.nvec.ravel()
                bounds = np.concatenate(([0], np.cumsum(nvec)))
                idx = [int(np.argmax(part[bounds[i]:bounds[i + 1]])) for i in range(len(nvec))]
                out[f.name] = (np.array(idx, dtype=sub.dtype).reshape(sub.nvec.shape) + sub.start).astype(sub.dtype)
            else:
                out[f.name] = part.reshape(sub.shape).astype(sub.dtype)
        return out


class FlatActionLayout:
    """A Dict action space as ``Discrete``/``MultiDiscrete`` (discrete heads) or one 1-D Box (continuous heads).

    Discrete heads map to one entry each (value ``a - start``), MultiDiscrete and MultiBinary heads to one entry
    per element; a single Discrete head becomes ``Discrete(n)``. Box heads are flattened and concatenated into
    one float32 Box. A mix of discrete and continuous heads is an error: discretise the Box heads
    (DiscretizeActionsWrapper) or keep Dict actions.

    :param space: the Dict action space.
    :param where: prefix of error messages.
    """

    def __init__(self, space: gym.spaces.Space, where: str = "action"):
        self.dict_space = _require_dict(space, "action")
        self.where = where
        discrete = [k for k, s in self.dict_space.spaces.items() if isinstance(s, _DISCRETE_TYPES)]
        continuous = [k for k, s in self.dict_space.spaces.items() if isinstance(s, gym.spaces.Box)]
        other = {k: s for k, s in self.dict_space.spaces.items() if k not in discrete and k not in continuous}
        if other:
            raise TypeError(f"{where}: action heads {other} cannot be flattened; flat actions support Discrete, "
                            f"MultiDiscrete, MultiBinary and Box heads")
        if not self.dict_space.spaces:
            raise ValueError(f"{where}: the action space {space} has no heads")
        if discrete and continuous:
            raise TypeError(f"{where}: flat actions need all heads discrete (-> MultiDiscrete) or all continuous "
                            f"(-> Box), but {discrete} are discrete and {continuous} are continuous. Discretise the "
                            f"continuous heads (DiscretizeActionsWrapper), or keep Dict actions (flat=False) for a "
                            f"library that supports them")
        self.is_discrete = bool(discrete)
        fields = []
        pos = mask_pos = 0
        nvec: list[int] = []
        lows, highs = [], []
        for name, sub in self.dict_space.spaces.items():
            if isinstance(sub, gym.spaces.Discrete):
                sizes = [int(sub.n)]
            elif isinstance(sub, gym.spaces.MultiDiscrete):
                sizes = [int(n) for n in sub.nvec.ravel()]
            elif isinstance(sub, gym.spaces.MultiBinary):
                sizes = [2] * int(np.prod(sub.shape))
            else:
                sizes = [1] * int(np.prod(sub.shape))
                lows.append(sub.low.astype(np.float32).ravel())
                highs.append(sub.high.astype(np.float32).ravel())
            fields.append(FlatField(name, sub, pos, pos + len(sizes), mask_pos, mask_pos + sum(sizes)))
            pos += len(sizes)
            mask_pos += sum(sizes)
            nvec.extend(sizes)
        self.fields: tuple[FlatField, ...] = tuple(fields)
        self._by_name = {f.name: f for f in self.fields}
        self.size = pos
        self.mask_size = mask_pos if self.is_discrete else 0
        self.space: gym.spaces.Space
        if not self.is_discrete:
            self.space = gym.spaces.Box(np.concatenate(lows), np.concatenate(highs), shape=(pos,), dtype=np.float32)
        elif len(fields) == 1 and isinstance(fields[0].space, gym.spaces.Discrete):
            self.space = gym.spaces.Discrete(nvec[0])
        else:
            self.space = gym.spaces.MultiDiscrete(np.array(nvec, dtype=np.int64))
        self._nvec = np.array(nvec, dtype=np.int64)

    def field(self, name: str) -> FlatField:
        """The head ``name`` (its slice of the flat action and its original space)."""
        if name not in self._by_name:
            raise KeyError(f"{self.where}: no action head '{name}'; the flat action holds {list(self._by_name)}")
        return self._by_name[name]

    def _as_vector(self, action: Any) -> np.ndarray:
        """The flat action as a 1-D array, checked against the flat space."""
        arr = np.asarray(action)
        if isinstance(self.space, gym.spaces.Discrete):
            ok = arr.size == 1 and np.issubdtype(arr.dtype, np.integer) and 0 <= int(arr.ravel()[0]) < self._nvec[0]
            if not ok:
                raise SpaceMismatchError(f"{self.where}: action {action!r} is not in {self.space} (an integer in "
                                         f"[0, {self._nvec[0]}))")
            return arr.reshape(1)
        if arr.shape != (self.size,):
            raise SpaceMismatchError(f"{self.where}: flat action has shape {arr.shape}, expected ({self.size},) "
                                     f"for {self.space} (heads {[f.name for f in self.fields]})")
        if self.is_discrete:
            if not np.issubdtype(arr.dtype, np.integer) or np.any(arr < 0) or np.any(arr >= self._nvec):
                raise SpaceMismatchError(f"{self.where}: action {arr.tolist()} is not in {self.space}")
        return arr

    def to_dict(self, action: Any) -> dict[str, Any]:
        """The dict action of a flat action (Discrete heads as Python ints, others as arrays of the head's dtype)."""
        vec = self._as_vector(action)
        out: dict[str, Any] = {}
        for f in self.fields:
            part, sub = vec[f.slice], f.space
            if isinstance(sub, gym.spaces.Discrete):
                out[f.name] = int(part[0]) + int(sub.start)
            elif isinstance(sub, gym.spaces.MultiDiscrete):
                out[f.name] = (part.reshape(sub.nvec.shape) + sub.start).astype(sub.dtype)
            else:
                out[f.name] = part.reshape(sub.shape).astype(sub.dtype)
        return out

    def from_dict(self, action: Mapping[str, Any]) -> Any:
        """The flat action of a dict action (the inverse of ``to_dict``)."""
        _check_keys(action, self.dict_space, "action", self.where)
        dtype = np.int64 if self.is_discrete else np.float32
        vec = np.zeros(self.size, dtype=dtype)
        for f in self.fields:
            value, sub = np.asarray(action[f.name]), f.space
            if isinstance(sub, gym.spaces.Discrete | gym.spaces.MultiDiscrete):
                value = value - sub.start
            vec[f.slice] = value.ravel()
        if isinstance(self.space, gym.spaces.Discrete):
            return np.int64(vec[0])
        return vec
