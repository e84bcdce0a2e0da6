"""Fast per-space checks of actions and observations with errors that name the key and the space."""

from __future__ import annotations

import itertools
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
    The check is compiled once per space (see :func:`_compiled_action_check`): an action of exact Python ints in
    range for the Discrete heads is accepted in a few comparisons; everything else goes through the full check
    (:func:`reference_dict_action_checker`), which decides, fixes and words the errors.
    """
    checks = {k: action_checker(s, f"{where} action['{k}']") for k, s in space.spaces.items()}
    return _compiled_action_check(space, checks, _reference_dict_action_checker(space, where, checks))


def reference_dict_action_checker(space: gym.spaces.Dict, where: str) -> Callable[[Any], dict | None]:
    """The full dict action check that :func:`dict_action_checker` compiles a fast path in front of (kept for tests
    that compare the two)."""
    return _reference_dict_action_checker(
        space, where, {k: action_checker(s, f"{where} action['{k}']") for k, s in space.spaces.items()})


def _reference_dict_action_checker(space: gym.spaces.Dict, where: str,
                                   checks: dict[str, Callable[[Any], Any]]) -> Callable[[Any], dict | None]:
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


def observation_checker(space: gym.spaces.Dict, where: str, bounds: str = "error",
                        _stacklevel: int = 4) -> Callable[[Any], None]:
    """A per-step check of a dict observation: keys, shape and dtype of each array, and the finite bounds of Box
    spaces (NaN is outside them).

    The check is compiled once per space (see :func:`_compiled_observation_check`): an observation that passes it
    costs a few comparisons per key, plus one or two numpy reductions for a large Box; anything else goes through the
    full check (:func:`reference_observation_checker`), which decides, warns and words the errors.

    :param bounds: ``error`` or ``warn`` for a value outside its bounds (see :data:`BOUNDS_MODES`).
    """
    # the full check sits one call deeper behind the compiled one: its warnings name the same caller
    return _compiled_observation_check(space, reference_observation_checker(space, where, bounds,
                                                                            _stacklevel=_stacklevel + 1))


def reference_observation_checker(space: gym.spaces.Dict, where: str, bounds: str = "error",
                                  _stacklevel: int = 4) -> Callable[[Any], None]:
    """The full observation check that :func:`observation_checker` compiles a fast path in front of (kept for tests
    that compare the two)."""
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
                          f"per key and env)", ObservationBoundsWarning, stacklevel=_stacklevel)
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


# --- compiled checks ---------------------------------------------------------------------------------------------
# A check is compiled once per space into one small function whose every line is a comparison on the value at hand
# (no loops over keys, no per-step lookups of what to check). It only ever accepts: a value it cannot accept in a
# few comparisons goes to the full (reference) check, which accepts, fixes, warns or raises exactly as before. So
# the compiled check can never accept what the full check rejects, and what it cannot decide costs one call more.

_ARRAY_SPACES = (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)
_compiled = itertools.count(1)  # numbers the compiled functions' file names


def _compile(name: str, arg: str, body: list[str], namespace: dict[str, Any]) -> Callable[[Any], Any]:
    """``def name(arg): body`` built in ``namespace`` (values are bound by name, never written into the source). Each
    compiled function has a file name of its own (numbered), so that profiles and tracebacks tell them apart."""
    source = f"def {name}({arg}):\n" + "".join(f"    {line}\n" for line in body)
    filename = f"<maze_lab.core.env.space_checks {name} {next(_compiled)}>"
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102
    return namespace[name]


def _compiled_action_check(space: gym.spaces.Dict, checks: dict[str, Callable[[Any], Any]],
                           reference: Callable[[Any], dict | None]) -> Callable[[Any], dict | None]:
    """The dict action check of ``space`` as one function: a Discrete head holding a Python int in range costs two
    comparisons; other heads call their own check (which only returns None or raises for what it accepts); any other
    value (numpy integers, arrays, missing keys, ...) goes to ``reference``."""
    ns: dict[str, Any] = {"dict": dict, "ref": reference, "absent": object()}
    body = [f"if action.__class__ is not dict or len(action) != {len(space.spaces)}:", "    return ref(action)"]
    for j, (key, sub) in enumerate(space.spaces.items()):
        ns[f"k{j}"] = key
        if isinstance(sub, gym.spaces.Discrete):
            ns[f"lo{j}"], ns[f"hi{j}"] = int(sub.start), int(sub.start + sub.n)
            body += [f"a = action.get(k{j})", f"if a.__class__ is not int or not lo{j} <= a < hi{j}:",
                     "    return ref(action)"]
        else:
            ns[f"c{j}"] = checks[key]
            body += [f"a = action.get(k{j}, absent)", f"if a is absent or c{j}(a) is not None:",
                     "    return ref(action)"]
    body.append("return None")
    return _compile("check_action", "action", body, ns)


def _value_check_lines(j: int, sub: gym.spaces.Space, fail: str, ns: dict[str, Any]) -> list[str]:
    """Lines that check the value ``v`` of key number ``j`` of a dict observation space and run ``fail`` where it
    is not an array of the space's class, dtype and shape within its bounds: the entries with a finite bound of a
    small Box compared in Python (one ``tolist``), a large Box's in one or two numpy reductions (its minimum against
    the highest lower bound, its maximum against the lowest upper bound; NaN fails both), where needed followed by
    the element-wise comparison."""
    ns[f"d{j}"], ns[f"s{j}"] = sub.dtype, sub.shape
    lines = [f"if v.__class__ is not ndarray or (v.dtype is not d{j} and v.dtype != d{j}) or v.shape != s{j}:",
             f"    {fail}"]
    mode, low, high = _bounds_of(sub)
    if mode == 1:
        lines.append("x = v.tolist()" if len(sub.shape) == 1 else "x = v.ravel().tolist()")
        terms = []
        for m, (i, lo, hi) in enumerate(low):
            ns[f"l{j}_{m}"], ns[f"h{j}_{m}"] = lo, hi
            terms.append(f"l{j}_{m} <= x[{i}] <= h{j}_{m}")  # also false for NaN
        lines += [f"if not ({' and '.join(terms)}):", f"    {fail}"]
    elif mode == 2:
        # v >= max(low) and v <= min(high) everywhere implies v >= low and v <= high element-wise (NaN fails it)
        lo, hi = np.max(low), np.min(high)
        ns[f"lo{j}"], ns[f"hi{j}"] = lo, hi
        if sub.dtype.kind == "f" and sub.dtype.isnative and sub.dtype.itemsize in (2, 4, 8) and lo == 0 <= hi:
            # the same for bounds from 0 in one reduction: floats >= +0.0 order as their bit patterns read as
            # unsigned integers, and every negative value (-0.0 too: the full check decides it) and every NaN reads
            # as more than the bits of any upper bound >= 0
            unsigned = np.dtype(f"u{sub.dtype.itemsize}")
            ns[f"u{j}"], ns[f"hb{j}"] = unsigned, np.abs(np.asarray(hi, dtype=sub.dtype)).view(unsigned).item()
            bounds = f"mx(v.view(u{j}), None) <= hb{j}"
        else:
            bounds = f"lo{j} <= mn(v, None) and mx(v, None) <= hi{j}"
        if np.all(low == lo) and np.all(high == hi):
            lines += [f"if not ({bounds}):", f"    {fail}"]  # uniform bounds: the same test as the full check's
        else:  # otherwise the element-wise comparison where it fails
            ns[f"low{j}"], ns[f"high{j}"] = low, high
            lines += [f"if not ({bounds}) and not (",
                      f"        andr(ge(v, low{j}), None) and andr(le(v, high{j}), None)):", f"    {fail}"]
    return lines


def _check_namespace(**values: Any) -> dict[str, Any]:
    return {"dict": dict, "ndarray": np.ndarray, "mn": np.minimum.reduce, "mx": np.maximum.reduce,
            "andr": np.logical_and.reduce, "ge": np.greater_equal, "le": np.less_equal, **values}


def _compiled_observation_check(space: gym.spaces.Dict, reference: Callable[[Any], None]) -> Callable[[Any], None]:
    """The dict observation check of ``space`` as one function: per key, the array's class, dtype, shape and bounds
    (see :func:`_value_check_lines`). Anything else goes to ``reference``."""
    ns = _check_namespace(ref=reference)
    body = [f"if obs.__class__ is not dict or len(obs) != {len(space.spaces)}:", "    return ref(obs)"]
    for j, (key, sub) in enumerate(space.spaces.items()):
        ns[f"k{j}"] = key
        if isinstance(sub, _ARRAY_SPACES):
            body += [f"v = obs.get(k{j})", *_value_check_lines(j, sub, "return ref(obs)", ns)]
        else:  # only the key is checked per step
            body += [f"if k{j} not in obs:", "    return ref(obs)"]
    body.append("return None")
    return _compile("check_observation", "obs", body, ns)


def value_fast_check(space: gym.spaces.Space) -> Callable[[Any], bool] | None:
    """For the space of one key of a dict observation: a function that is True for a value the observation check
    accepts as it is (an array of the space's dtype and shape within its bounds), False where the full check has to
    decide (it may still accept). None for spaces whose values are not arrays.

    For envs that build the observation dict themselves (GymMazeEnv's ``{"observation": obs}``): the dict's keys
    are right by construction, so the value alone is checked, and the full check runs only where this is False.
    """
    if not isinstance(space, _ARRAY_SPACES):
        return None
    ns = _check_namespace()
    return _compile("check_value", "v", [*_value_check_lines(0, space, "return False", ns), "return True"], ns)
