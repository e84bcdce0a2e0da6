"""Helpers between gymnasium spaces, numpy observations and torch tensors."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch


def observation_spaces_to_in_shapes(observation_spaces_dict: Mapping[Any, gym.spaces.Dict]) -> dict[Any, dict]:
    """Per step key, the shape of every observation (as used for ``obs_shapes`` of networks)."""
    return {step: space_shapes(space) for step, space in observation_spaces_dict.items()}


def space_shapes(space: gym.spaces.Dict) -> dict[str, tuple[int, ...]]:
    """Shapes of the sub-spaces of a Dict space (Discrete spaces give shape ())."""
    if not isinstance(space, gym.spaces.Dict):
        raise TypeError(f"expected a gymnasium Dict space, got {space!r}")
    return {k: tuple(s.shape) if s.shape is not None else () for k, s in space.spaces.items()}


def flat_structured_space(spaces_dict: Mapping[Any, gym.spaces.Dict]) -> gym.spaces.Dict:
    """Merge the Dict spaces of all sub-steps into one Dict space (same keys must have the same space)."""
    return merge_spaces(spaces_dict.values())


def merge_spaces(spaces: Iterable[gym.spaces.Dict]) -> gym.spaces.Dict:
    """Merge Dict spaces into one; a key appearing twice must have equal spaces."""
    merged: dict[str, gym.spaces.Space] = {}
    for space in spaces:
        for key, sub in space.spaces.items():
            if key in merged and merged[key] != sub:
                raise ValueError(f"cannot merge spaces: key '{key}' is {merged[key]} in one sub-step and {sub} "
                                 f"in another")
            merged[key] = sub
    return gym.spaces.Dict(merged)


def convert_to_torch(value: Any, device: torch.device | str | None = None, cast: torch.dtype | None = None) -> Any:
    """Convert numpy arrays, scalars and nested dicts/lists of them to tensors (float64 becomes float32)."""
    if isinstance(value, torch.Tensor):
        t = value
    elif isinstance(value, np.ndarray):
        t = torch.from_numpy(value) if value.dtype != np.float64 else torch.from_numpy(value.astype(np.float32))
    elif isinstance(value, Mapping):
        return {k: convert_to_torch(v, device, cast) for k, v in value.items()}
    elif isinstance(value, list | tuple):
        return type(value)(convert_to_torch(v, device, cast) for v in value)
    else:
        t = torch.as_tensor(np.asarray(value, dtype=np.float32 if isinstance(value, float) else None))
    if cast is not None and t.dtype != cast:
        t = t.to(cast)
    if device is not None and t.device != torch.device(device):
        t = t.to(device)
    return t


def convert_to_numpy(value: Any) -> Any:
    """Convert tensors (and nested dicts/lists of them) to numpy arrays; 0-d results become numpy scalars."""
    if isinstance(value, torch.Tensor):
        arr = value.detach().cpu().numpy()
        return arr[()] if arr.ndim == 0 else arr
    if isinstance(value, Mapping):
        return {k: convert_to_numpy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(convert_to_numpy(v) for v in value)
    return value
