"""Fast per-space checks of actions and observations with errors that name the key and the space."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

_INT_TYPES = (int, np.integer)


class SpaceMismatchError(ValueError):
    """An action or observation does not match its declared space."""


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"array(shape={value.shape}, dtype={value.dtype})"
    return f"{type(value).__name__} {value!r}"


def action_checker(space: gym.spaces.Space, where: str) -> Callable[[Any], None]:
    """A function that raises SpaceMismatchError when an action is not in ``space``."""
    if isinstance(space, gym.spaces.Discrete):
        lo, hi = int(space.start), int(space.start + space.n)

        def check_discrete(a: Any) -> None:
            if type(a) is int and lo <= a < hi:  # the common case first
                return
            if isinstance(a, np.ndarray) and a.shape in ((), (1,)):
                a = a.reshape(()).item()
            if not isinstance(a, _INT_TYPES) or not lo <= a < hi:
                raise SpaceMismatchError(
                    f"{where}: action {_describe(a)} is not in {space} (an integer in [{lo}, {hi}))")

        return check_discrete

    if isinstance(space, gym.spaces.Box):
        shape, low, high = space.shape, space.low, space.high

        def check_box(a: Any) -> None:
            arr = np.asarray(a)
            if arr.shape != shape:
                raise SpaceMismatchError(
                    f"{where}: action {_describe(arr)} has shape {arr.shape}, expected {shape} ({space})")
            if not (np.all(arr >= low) and np.all(arr <= high)):
                raise SpaceMismatchError(
                    f"{where}: action {arr} is outside the bounds of {space}; clip it to [low, high]")

        return check_box

    def check_generic(a: Any) -> None:
        try:
            ok = space.contains(np.asarray(a) if isinstance(a, list) else a)
        except Exception:  # noqa: BLE001 - any failure to check means the value does not fit
            ok = False
        if not ok:
            raise SpaceMismatchError(f"{where}: action {_describe(a)} is not in {space}")

    return check_generic


def dict_action_checker(space: gym.spaces.Dict, where: str) -> Callable[[Any], None]:
    """Checker for a dict action: right keys and each value in its sub-space."""
    checks = {k: action_checker(s, f"{where} action['{k}']") for k, s in space.spaces.items()}
    keys = set(checks)
    items = tuple(checks.items())
    only = next(iter(space.spaces.values())) if len(space.spaces) == 1 else None
    if isinstance(only, gym.spaces.Discrete):
        # single discrete head (CartPole-like): one closure, no inner calls on the common path
        head, lo, hi, inner = items[0][0], int(only.start), int(only.start + only.n), items[0][1]

        def check_single_discrete(action: Any) -> None:
            if type(action) is dict and len(action) == 1:
                a = action.get(head)
                if type(a) is int and lo <= a < hi:
                    return
                if a is not None or head in action:
                    inner(a)
                    return
            _slow(action)

        def _slow(action: Any) -> None:
            if not isinstance(action, dict):
                raise SpaceMismatchError(
                    f"{where}: expected a dict action with keys {sorted(keys)}, got {_describe(action)}")
            missing_keys, extra = sorted(keys - set(action)), sorted(set(action) - keys)
            raise SpaceMismatchError(f"{where}: malformed action dict, missing keys {missing_keys}, unknown keys "
                                     f"{extra}; expected exactly {sorted(keys)}")

        return check_single_discrete
    n_keys = len(keys)
    absent = object()

    def check(action: Any) -> None:
        if type(action) is dict and len(action) == n_keys:
            for k, c in items:
                v = action.get(k, absent)
                if v is absent:
                    break
                c(v)
            else:
                return
        if not isinstance(action, dict):
            raise SpaceMismatchError(
                f"{where}: expected a dict action with keys {sorted(keys)}, got {_describe(action)}"
            )
        if len(action) != len(keys) or action.keys() != keys:
            missing, extra = sorted(keys - set(action)), sorted(set(action) - keys)
            raise SpaceMismatchError(f"{where}: malformed action dict, missing keys {missing}, unknown keys {extra}; "
                                     f"expected exactly {sorted(keys)}")
        for k, c in checks.items():
            c(action[k])

    return check


def observation_checker(space: gym.spaces.Dict, where: str) -> Callable[[Any], None]:
    """A cheap per-step check of a dict observation: keys, and shape and dtype of each array."""
    expected = {}
    for k, s in space.spaces.items():
        if isinstance(s, gym.spaces.Box | gym.spaces.MultiBinary | gym.spaces.MultiDiscrete):
            expected[k] = (s.shape, s.dtype)
        else:
            expected[k] = None
    keys = set(expected)
    arrays = tuple((k, e[0], e[1]) for k, e in expected.items() if e is not None)
    n_keys = len(keys)

    def check(obs: Any) -> None:
        if type(obs) is dict and len(obs) == n_keys:
            for k, shape, dtype in arrays:
                v = obs.get(k)
                if v.__class__ is not np.ndarray or v.shape != shape or v.dtype != dtype:
                    break
            else:
                if len(arrays) == n_keys or obs.keys() == keys:
                    return
        if not isinstance(obs, dict) or obs.keys() != keys:
            got = sorted(obs) if isinstance(obs, dict) else _describe(obs)
            raise SpaceMismatchError(f"{where}: observation keys {got} do not match the space keys {sorted(keys)}")
        for k, exp in expected.items():
            if exp is None:
                continue
            v = obs[k]
            if not isinstance(v, np.ndarray) or v.shape != exp[0] or v.dtype != exp[1]:
                raise SpaceMismatchError(
                    f"{where}: observation['{k}'] is {_describe(v)}, the space declares shape {exp[0]} "
                    f"dtype {exp[1]} ({space.spaces[k]})"
                )

    return check


def full_observation_check(space: gym.spaces.Dict, obs: Any, where: str) -> None:
    """Keys, shapes and dtypes must match (error); values outside the bounds give a warning (used on reset)."""
    import warnings

    observation_checker(space, where)(obs)
    for k, s in space.spaces.items():
        if not s.contains(obs[k]):
            warnings.warn(f"{where}: observation['{k}'] = {obs[k]!r} is outside {s}", stacklevel=3)
