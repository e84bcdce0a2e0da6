"""The compiled space checks (the fast path of every step) decide exactly as the full checks do.

``observation_checker`` and ``dict_action_checker`` compile one function per space that accepts the common case in a
few comparisons and hands everything else to the full check. These tests feed the compiled and the full (reference)
check the same values, good and bad, and require the same outcome: the same return value, the same error with the
same message, the same warnings. The GymMazeEnv's fused step is compared with the general MazeEnv step the same way.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from maze_lab.core.env.interfaces import RewardAggregatorInterface
from maze_lab.core.env.space_checks import (
    dict_action_checker,
    observation_checker,
    reference_dict_action_checker,
    reference_observation_checker,
)
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.core.wrappers.monitoring_wrapper import MazeEnvMonitoringWrapper

F32 = np.float32


def _outcome(check: Any, value: Any) -> tuple:
    """What a check did with a value: its result or its error, and the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result: Any = ("returned", _plain(check(value)))
        except Exception as err:  # noqa: BLE001 - the error is the outcome
            result = ("raised", type(err), str(err))
    return result, [(w.category, str(w.message)) for w in caught]


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: (type(v), np.asarray(v).tolist()) for k, v in value.items()}
    return value


def _observation_spaces() -> dict[str, gym.spaces.Dict]:
    high = np.tile(np.array([5, 4], dtype=F32), (50, 1))
    return {
        "cartpole": gym.spaces.Dict({"observation": gym.spaces.Box(
            np.array([-4.8, -np.inf, -0.418, -np.inf], F32), np.array([4.8, np.inf, 0.418, np.inf], F32))}),
        "cutting": gym.spaces.Dict({
            "inventory": gym.spaces.Box(low=np.zeros_like(high), high=high, dtype=F32),
            "inventory_size": gym.spaces.Box(F32(0), F32(51), shape=(1,), dtype=F32),
            "ordered_piece": gym.spaces.Box(F32(0), F32(5), shape=(2,), dtype=F32),
            "inventory_mask": gym.spaces.Box(F32(0), F32(1), shape=(50,), dtype=F32),
        }),
        "mixed": gym.spaces.Dict({
            "grid": gym.spaces.Box(0, 9, shape=(4, 5), dtype=np.int64),
            "scalar": gym.spaces.Box(-1.0, 1.0, shape=(), dtype=np.float64),
            "image": gym.spaces.Box(0, 255, shape=(3, 4, 4), dtype=np.uint8),
            "free": gym.spaces.Box(-np.inf, np.inf, shape=(3,), dtype=F32),
            "flags": gym.spaces.MultiBinary(3),
            "counts": gym.spaces.MultiDiscrete([3, 4]),
            "choice": gym.spaces.Discrete(3),
        }),
    }


def _good(space: gym.spaces.Dict) -> dict:
    rng = np.random.default_rng(0)
    obs = {}
    for k, s in space.spaces.items():
        if isinstance(s, gym.spaces.Box) and s.dtype.kind == "f":
            low = np.where(np.isfinite(s.low), s.low, -3).astype(s.dtype)
            high = np.where(np.isfinite(s.high), s.high, 3).astype(s.dtype)
            obs[k] = np.asarray(low + (high - low) * rng.uniform(0.1, 0.9, size=s.shape), dtype=s.dtype)
        else:
            s.seed(0)
            obs[k] = s.sample()
    return obs


def _observation_cases(space: gym.spaces.Dict) -> list[Any]:
    good = _good(space)
    cases: list[Any] = [good, OrderedDict(good), dict(reversed(list(good.items()))), [good], None, {},
                        {**good, "extra": np.zeros(1)}]
    for k, s in space.spaces.items():
        v = good[k]
        cases.append({kk: vv for kk, vv in good.items() if kk != k})  # missing key
        if not isinstance(v, np.ndarray):
            cases.append({**good, k: 7})
            continue
        cases += [{**good, k: v.astype(np.float64 if v.dtype != np.float64 else F32)},  # wrong dtype
                  {**good, k: v.reshape(-1)[:-1] if v.size > 1 else v.reshape(1, 1)},  # wrong shape
                  {**good, k: v.tolist()},  # not an array
                  {**good, k: v.astype(v.dtype.newbyteorder())},  # same kind, other byte order
                  {**good, k: np.asfortranarray(v)},
                  {**good, k: v.view(np.matrix) if v.ndim == 2 else v}]  # an ndarray subclass
        if not isinstance(s, gym.spaces.Box):
            continue
        flat_low, flat_high = np.broadcast_to(s.low, s.shape).ravel(), np.broadcast_to(s.high, s.shape).ravel()
        for i in {0, v.size // 2, v.size - 1}:
            for new in (flat_low[i], flat_high[i], np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0):
                if s.dtype.kind != "f" and not (np.isfinite(new) and new == flat_low[i] or new == flat_high[i]):
                    continue
                for step in ((-1, 0, 1) if np.isfinite(new) and new != 0 else (0,)):
                    bad = v.copy().reshape(-1)
                    value = new if step == 0 or s.dtype.kind != "f" else np.nextafter(s.dtype.type(new),
                                                                                       s.dtype.type(step * np.inf))
                    if s.dtype.kind in "iu":
                        value = int(new) + step
                        info = np.iinfo(s.dtype)
                        if not info.min <= value <= info.max:
                            continue
                    bad[i] = value
                    cases.append({**good, k: bad.reshape(v.shape)})
    return cases


@pytest.mark.parametrize("bounds", ["error", "warn"])
@pytest.mark.parametrize("name", ["cartpole", "cutting", "mixed"])
def test_compiled_observation_check_decides_as_the_full_check(name: str, bounds: str) -> None:
    space = _observation_spaces()[name]
    cases = _observation_cases(space)
    assert len(cases) > 30
    outcomes = {"returned": 0, "raised": 0, "warned": 0}
    for value in cases:
        # fresh checks per value: "warn" warns once per key and check
        compiled = observation_checker(space, "somewhere", bounds)
        reference = reference_observation_checker(space, "somewhere", bounds)
        got, want = _outcome(compiled, value), _outcome(reference, value)
        assert got == want, value
        outcomes[got[0][0]] += 1
        outcomes["warned"] += bool(got[1])
    assert outcomes["returned"] and outcomes["raised"]
    assert bool(outcomes["warned"]) == (bounds == "warn")


def test_compiled_observation_check_warns_once_per_key_as_the_full_check() -> None:
    space = _observation_spaces()["cutting"]
    good = _good(space)
    sequence = [good, {**good, "ordered_piece": np.array([9, 1], F32)}, good,
                {**good, "ordered_piece": np.array([np.nan, 1], F32)},
                {**good, "inventory_mask": np.full(50, 2, F32)}, {**good, "inventory_mask": np.full(50, 2, F32)}]
    compiled = observation_checker(space, "here", "warn")
    reference = reference_observation_checker(space, "here", "warn")
    got = [_outcome(compiled, v) for v in sequence]
    want = [_outcome(reference, v) for v in sequence]
    assert got == want
    assert sum(len(w) for _, w in got) == 2


def _action_spaces() -> dict[str, gym.spaces.Dict]:
    return {
        "single": gym.spaces.Dict({"action": gym.spaces.Discrete(2)}),
        "shifted": gym.spaces.Dict({"action": gym.spaces.Discrete(3, start=-1)}),
        "cutting": gym.spaces.Dict({"piece_idx": gym.spaces.Discrete(50), "cut_rotation": gym.spaces.Discrete(2),
                                    "cut_order": gym.spaces.Discrete(2)}),
        "mixed": gym.spaces.Dict({"move": gym.spaces.Discrete(4), "force": gym.spaces.Box(-1, 1, shape=(2,)),
                                  "flags": gym.spaces.MultiBinary(2)}),
    }


def _action_cases(space: gym.spaces.Dict) -> list[Any]:
    space.seed(1)
    good = {k: (int(v) if isinstance(s, gym.spaces.Discrete) else v)
            for (k, s), v in zip(space.spaces.items(), space.sample().values(), strict=True)}
    cases: list[Any] = [good, OrderedDict(good), None, 1, [good], {}, {**good, "extra": 0}]
    for k, s in space.spaces.items():
        cases.append({kk: vv for kk, vv in good.items() if kk != k})
        cases.append({**good, k: None})
        if isinstance(s, gym.spaces.Discrete):
            lo, hi = int(s.start), int(s.start + s.n)
            values = [lo, hi - 1, lo - 1, hi, True, False, 1.0, np.int64(lo), np.int32(hi), np.array(lo),
                      np.array([hi - 1]), np.array([lo, lo]), np.array(lo, dtype=F32), np.array([hi]), [lo], "0"]
        else:
            values = [np.zeros(s.shape, dtype=s.dtype), np.full(s.shape, 5, dtype=s.dtype), [0] * int(np.prod(s.shape)),
                      np.zeros((1, *s.shape), dtype=s.dtype), np.full(s.shape, np.nan)]
        cases += [{**good, k: v} for v in values]
    return cases


@pytest.mark.parametrize("name", ["single", "shifted", "cutting", "mixed"])
def test_compiled_action_check_decides_and_fixes_as_the_full_check(name: str) -> None:
    space = _action_spaces()[name]
    compiled = dict_action_checker(space, "policy key 0")
    reference = reference_dict_action_checker(space, "policy key 0")
    outcomes = set()
    for value in _action_cases(space):
        got, want = _outcome(compiled, value), _outcome(reference, value)
        assert got == want, value
        outcomes.add(got[0][0] if got[0][0] == "raised" or got[0][1] is None else "fixed")
    assert outcomes == {"returned", "raised", "fixed"}


def _state(env: Any) -> tuple:
    """The bookkeeping of a GymMazeEnv and its core env that a step or reset leaves behind."""
    inner = env.unwrapped
    core = inner.core_env
    return (inner._last_obs["observation"].tolist(), inner._last_maze_state is core._state,
            np.asarray(inner._acted_in_state).tolist() if inner._acted_in_state is not None else None,
            inner._last_maze_action, core.context.step_id, core.context.episode_id, core._full_step_open,
            inner._can_step, inner._has_reset, len(core.get_step_events()))


def _run(env: Any, actions: list[Any], fused: bool) -> list:
    """Observations, rewards and flags of a run with resets of every kind, the env's bookkeeping after each step and
    reset, and the errors."""
    if not fused:
        env.unwrapped._gym_fast = None
    record = []
    obs, info = env.reset(seed=3)
    record.append(("reset", obs["observation"].tolist(), info, _state(env)))
    for i, a in enumerate(actions):
        try:
            obs, reward, terminated, truncated, info = env.step({"action": a})
        except Exception as err:  # noqa: BLE001 - the error is part of the record
            record.append((type(err), str(err)))
            continue
        record.append((obs["observation"].tolist(), type(reward), reward, type(terminated), terminated, truncated,
                       info, env.unwrapped._last_obs is obs, _state(env)))
        if terminated or truncated:
            if i % 3 == 0:
                env.unwrapped.seed(100 + i)  # used once by the next reset
                obs, info = env.reset()
            elif i % 3 == 1:
                obs, info = env.reset(seed=i, options={"low": -0.01, "high": 0.01})
            else:
                obs, info = env.reset()
            record.append(("reset", obs["observation"].tolist(), info, _state(env)))
    return record


class CountingAggregator(RewardAggregatorInterface):
    """Counts the resets the CoreEnv plumbing gives it (one per full step and episode)."""

    def __init__(self) -> None:
        super().__init__()
        self.resets = 0

    def get_interfaces(self) -> list[type]:
        return []

    def reset(self) -> None:
        super().reset()
        self.resets += 1

    def summarize_reward(self, maze_state: Any = None) -> float:
        return 0.0


@pytest.mark.parametrize("aggregator", [False, True])
@pytest.mark.parametrize("check_spaces", [True, False])
def test_gym_maze_env_fused_step_and_reset_equal_the_general_ones(check_spaces: bool, aggregator: bool) -> None:
    actions: list[Any] = np.random.default_rng(0).integers(0, 2, size=300).tolist()
    if check_spaces:
        actions[5] = 2  # an action outside the space
        actions[9] = np.int64(1)  # a numpy integer: accepted as it is
        actions[11] = np.array([0])  # an integer array of shape (1,): passed on as the int it holds
    runs = {}
    for fused in (True, False):
        env = GymMazeEnv("CartPole-v1", render_mode=None, check_spaces=check_spaces)
        assert env._gym_fast is not None
        if aggregator:
            env.core_env.reward_aggregator = CountingAggregator()
        record = _run(env, actions, fused)
        if aggregator:
            record.append(("aggregator resets", env.core_env.reward_aggregator.resets))
        # a step after the end of an episode raises the same error on both paths
        while env._can_step:
            env.step({"action": 0})
        with pytest.raises(Exception) as err:
            env.step({"action": 0})
        record.append((type(err.value), str(err.value)))
        runs[fused] = record
    assert runs[True] == runs[False]
    assert sum(r[0] == "reset" for r in runs[True]) > 10
    assert any(isinstance(r[0], type) for r in runs[True][:-1]) == check_spaces  # the bad actions raised


def test_gym_maze_env_fused_step_statistics_equal_the_general_step() -> None:
    actions = np.random.default_rng(1).integers(0, 2, size=400).tolist()
    stats = {}
    for fused in (True, False):
        env = LogStatsWrapper.wrap(MazeEnvMonitoringWrapper.wrap(GymMazeEnv("CartPole-v1", render_mode=None)),
                                   logging_prefix=None, writers=[])
        _run(env, actions, fused)
        stats[fused] = {(k.event.__qualname__, k.name, k.group): (np.asarray(v).tolist() if not np.isscalar(v) else v)
                        for k, v in env.write_epoch_stats().items()}
    assert stats[True] == stats[False]
    assert stats[True]


def test_the_common_case_is_decided_by_the_compiled_check_alone() -> None:
    def no_reference(value: Any) -> None:
        raise AssertionError(f"the full check was asked about {value!r}")

    for name, space in _observation_spaces().items():
        check = observation_checker(space, "here")
        check.__globals__["ref"] = no_reference
        assert check(_good(space)) is None, name
    for name, space in _action_spaces().items():
        check = dict_action_checker(space, "here")
        check.__globals__["ref"] = no_reference
        space.seed(0)
        action = {k: (int(v) if isinstance(s, gym.spaces.Discrete) else v)
                  for (k, s), v in zip(space.spaces.items(), space.sample().values(), strict=True)}
        assert check(action) is None, name
