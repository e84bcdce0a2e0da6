"""Fast per-space checks of actions and observations with errors that name the key and the space."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

_INT_TYPES = (int, np.integer)


class SpaceMismatchError(ValueError):
    """An action or observation does not match its declared space."""


class ObservationBoundsWarning(UserWarning):
    """An observation of an env maze-lab does not own (a wrapped Gymnasium env) left the bounds of its Box space."""


BOUNDS_MODES = ("error", "warn")
"""What an observation outside its Box bounds does: ``error`` (maze-lab's own envs: a bug to fix) or ``warn`` (once
per key and env, with the value; the observation is used as it is, as Gymnasium's own checker does)."""


def _one_line(space: gym.spaces.Space) -> str:
    """A space's repr on one line (Box reprs of array bounds span several)."""
    return " ".join(str(space).split())


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"array(shape={value.shape}, dtype={value.dtype})"
    return f"{type(value).__name__} {value!r}"


def action_checker(space: gym.spaces.Space, where: str) -> Callable[[Any], Any]:
    """A function that raises SpaceMismatchError when an action is not in ``space``.

    It returns None for an action that is fine as it is, or the action to use instead: an integer array of shape ()
    or (1,) for a Discrete space (as many libraries produce) becomes the Python int it holds.
    """
    if isinstance(space, gym.spaces.Discrete):
        lo, hi = int(space.start), int(space.start + space.n)

        def check_discrete(a: Any) -> int | None:
            if type(a) is int and lo <= a < hi:  # the common case first
                return None
            if isinstance(a, np.ndarray) and a.shape in ((), (1,)) and a.dtype.kind in "iu":
                value = int(a.reshape(()))
                if lo <= value < hi:
                    return value
                raise SpaceMismatchError(f"{where}: action {_describe(a)} holding {value} is not in {space} (an "
                                         f"integer in [{lo}, {hi}))")
            if isinstance(a, _INT_TYPES) and not isinstance(a, bool | np.bool_) and lo <= a < hi:
                return None
            hint = ""
            if isinstance(a, np.ndarray) and a.dtype.kind not in "iu":
                hint = f"; give an integer, e.g. int(a) (a {a.dtype} array is not accepted: the value may not be whole)"
            elif isinstance(a, np.ndarray):
                hint = "; give one integer (an array of shape () or (1,) is accepted)"
            elif isinstance(a, list | tuple):
                hint = "; give one integer, not a sequence"
            raise SpaceMismatchError(f"{where}: action {_describe(a)} is not in {space} (an integer in [{lo}, {hi}))"
                                     f"{hint}")

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


def dict_action_checker(space: gym.spaces.Dict, where: str) -> Callable[[Any], dict | None]:
    """Checker for a dict action: right keys and each value in its sub-space.

    It returns None for an action that is fine as it is, or a new dict to use instead (see :func:`action_checker`).
    """
    checks = {k: action_checker(s, f"{where} action['{k}']") for k, s in space.spaces.items()}
    keys = set(checks)
    items = tuple(checks.items())
    only = next(iter(space.spaces.values())) if len(space.spaces) == 1 else None
    if isinstance(only, gym.spaces.Discrete):
        # single discrete head (CartPole-like): one closure, no inner calls on the common path
        head, lo, hi, inner = items[0][0], int(only.start), int(only.start + only.n), items[0][1]

        def check_single_discrete(action: Any) -> dict | None:
            if type(action) is dict and len(action) == 1:
                a = action.get(head)
                if type(a) is int and lo <= a < hi:
                    return None
                if a is not None or head in action:
                    fixed = inner(a)
                    return None if fixed is None else {head: fixed}
            return _slow(action)

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

    def check(action: Any) -> dict | None:
        if type(action) is dict and len(action) == n_keys:
            fixed = None
            for k, c in items:
                v = action.get(k, absent)
                if v is absent:
                    break
                new = c(v)
                if new is not None:
                    if fixed is None:
                        fixed = dict(action)
                    fixed[k] = new
            else:
                return fixed
        if not isinstance(action, dict):
            raise SpaceMismatchError(
                f"{where}: expected a dict action with keys {sorted(keys)}, got {_describe(action)}"
            )
        if len(action) != len(keys) or action.keys() != keys:
            missing, extra = sorted(keys - set(action)), sorted(set(action) - keys)
            raise SpaceMismatchError(f"{where}: malformed action dict, missing keys {missing}, unknown keys {extra}; "
                                     f"expected exactly {sorted(keys)}")
        fixed = {k: checks[k](v) for k, v in action.items()}
        return {k: action[k] if v is None else v for k, v in fixed.items()} if any(
            v is not None for v in fixed.values()) else None

    return check


_SMALL = 16  # up to this many entries, bounds are compared in Python (faster than numpy's per-call overhead)


def _bounds_of(space: gym.spaces.Space) -> tuple[int, Any, Any]:
    """How to check the bounds of a sub-space: (0, -, -) not at all (no bound that a value of its dtype can cross),
    (1, entries, -) in Python for small spaces, as ``(flat index, low, high)`` of the entries with such a bound, or
    (2, low, high) with numpy."""
    if not isinstance(space, gym.spaces.Box):
        return 0, None, None
    low, high = space.low.ravel(), space.high.ravel()
    kind = space.dtype.kind if space.dtype is not None else "f"
    if kind == "f":
        finite = np.flatnonzero(np.isfinite(low) | np.isfinite(high))
    elif kind in "iu":  # bounds at the dtype's limits (e.g. a uint8 image in [0, 255]) cannot be crossed
        limits = np.iinfo(space.dtype)
        finite = np.flatnonzero((low > limits.min) | (high < limits.max))
    else:
        return 0, None, None
    if finite.size == 0:
        return 0, None, None
    if low.size <= _SMALL:
        return 1, tuple((int(i), low[i].item(), high[i].item()) for i in finite), None
    return 2, space.low, space.high


def _out_of_bounds(where: str, key: str, value: np.ndarray, space: gym.spaces.Box) -> SpaceMismatchError:
    """The error for an observation entry outside its Box, naming the first offending entries."""
    with np.errstate(invalid="ignore"):
        bad = np.argwhere(~((value >= space.low) & (value <= space.high)))
    shown = []
    for idx in bad[:3]:
        i = tuple(int(j) for j in idx)
        shown.append(f"[{', '.join(map(str, i))}] = {value[i]!s} not in [{space.low[i]!s}, {space.high[i]!s}]")
    more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
    return SpaceMismatchError(
        f"{where}: observation['{key}'] is outside the bounds of its space {_one_line(space)}: "
        f"{'; '.join(shown)}{more}. Fix the observation conversion, or widen the space's low/high to the values the "
        f"env really produces (for an env you cannot change: observation_bounds='warn' on the MazeEnv, the default of "
        f"GymMazeEnv)")


def observation_checker(space: gym.spaces.Dict, where: str, bounds: str = "error") -> Callable[[Any], None]:
    """A per-step check of a dict observation: keys, shape and dtype of each array, and the finite bounds of Box
    spaces (NaN is outside them).

    :param bounds: ``error`` or ``warn`` for a value outside its bounds (see :data:`BOUNDS_MODES`).
    """
    if bounds not in BOUNDS_MODES:
        raise ValueError(f"observation bounds must be one of {BOUNDS_MODES}, got {bounds!r}")
    warned: set[str] = set()

    def outside(k: str, v: np.ndarray) -> None:
        error = _out_of_bounds(where, k, v, space.spaces[k])
        if bounds == "error":
            raise error
        if k not in warned:
            import warnings

            warned.add(k)
            warnings.warn(f"{error.args[0].split('. Fix the')[0]}; the observation is used as it is (warned once "
                          f"per key and env)", ObservationBoundsWarning, stacklevel=4)
    expected = {}
    for k, s in space.spaces.items():
        if isinstance(s, gym.spaces.Box | gym.spaces.MultiBinary | gym.spaces.MultiDiscrete):
            expected[k] = (s.shape, s.dtype)
        else:
            expected[k] = None
    keys = set(expected)
    arrays = tuple((k, e[0], e[1], len(e[0]) == 1, *_bounds_of(space.spaces[k]))
                   for k, e in expected.items() if e is not None)
    n_keys = len(keys)

    def check(obs: Any) -> None:
        if type(obs) is dict and len(obs) == n_keys:
            for k, shape, dtype, vector, mode, low, high in arrays:
                v = obs.get(k)
                if v.__class__ is not np.ndarray or v.shape != shape or v.dtype != dtype:
                    break
                if mode == 1:
                    values = v.tolist() if vector else v.ravel().tolist()
                    for i, lo, hi in low:
                        if not lo <= values[i] <= hi:  # also false for NaN
                            outside(k, v)
                            break
                elif mode == 2 and not ((v >= low).all() and (v <= high).all()):
                    outside(k, v)
            else:
                if len(arrays) == n_keys or obs.keys() == keys:
                    return
        if not isinstance(obs, dict):
            raise SpaceMismatchError(f"{where}: the observation must be a dict with the keys of its space "
                                     f"{sorted(keys)}, got {_describe(obs)}")
        if obs.keys() != keys:
            missing, extra = sorted(keys - set(obs)), sorted(set(obs) - keys)
            parts = []
            if missing:
                parts.append(f"has no key{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} of its "
                             f"space {_one_line(space)}")
            if extra:
                parts.append(f"has key{'s' if len(extra) > 1 else ''} {', '.join(map(repr, extra))} that the space "
                             f"does not declare")
            raise SpaceMismatchError(
                f"{where}: the observation {' and '.join(parts)} (observation keys {sorted(obs)}, space keys "
                f"{sorted(keys)}); return exactly the keys of the space, or add the missing ones to space()")
        for k, exp in expected.items():
            if exp is None:
                continue
            v = obs[k]
            if not isinstance(v, np.ndarray) or v.shape != exp[0] or v.dtype != exp[1]:
                raise SpaceMismatchError(
                    f"{where}: observation['{k}'] is {_describe(v)}, the space declares shape {exp[0]} "
                    f"dtype {exp[1]} ({_one_line(space.spaces[k])})"
                )

    return check


def full_observation_check(space: gym.spaces.Dict, obs: Any, where: str,
                           checker: Callable[[Any], None] | None = None) -> None:
    """The per-step check (keys, shapes, dtypes, Box bounds: errors), plus a warning where a value is outside a
    space the per-step check does not cover (used on reset).

    :param checker: The per-step check of ``space`` if already built (its own ``where`` names the place).
    """
    import warnings

    (checker or observation_checker(space, where))(obs)
    for k, s in space.spaces.items():
        if not isinstance(s, gym.spaces.Box) and not s.contains(obs[k]):
            warnings.warn(f"{where or 'reset()'}: observation['{k}'] = {obs[k]!r} is outside {s}", stacklevel=3)
