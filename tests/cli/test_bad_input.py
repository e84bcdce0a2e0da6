"""Bad input raises errors that name the problem and what would be right."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from scripted_env import ScriptCoreEnv, _Act, _Obs

from maze_lab.core.env.maze_env import EnvNotResetError, MazeEnv
from maze_lab.core.env.space_checks import SpaceMismatchError
from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.core.wrappers.wrapper import wrap_env


def test_step_before_reset():
    env = GymMazeEnv("CartPole-v1")
    with pytest.raises(EnvNotResetError, match="before reset"):
        env.step({"action": 0})


@pytest.mark.parametrize(
    "action, message",
    [
        ({"action": 2}, r"action\['action'\].*not in Discrete\(2\).*\[0, 2\)"),
        ({"action": 0.5}, r"float 0.5 is not in Discrete\(2\)"),
        ({"act": 0}, r"missing keys \['action'\], unknown keys \['act'\]"),
        ({"action": 0, "extra": 1}, r"unknown keys \['extra'\]"),
        (1, r"expected a dict action with keys \['action'\]"),
    ],
)
def test_action_outside_space(action, message):
    env = GymMazeEnv("CartPole-v1")
    env.reset(seed=0)
    with pytest.raises(SpaceMismatchError, match=message):
        env.step(action)


def test_box_action_shape_and_bounds():
    env = GymMazeEnv("Pendulum-v1")
    env.reset(seed=0)
    with pytest.raises(SpaceMismatchError, match=r"shape \(2,\), expected \(1,\)"):
        env.step({"action": np.zeros(2, dtype=np.float32)})
    with pytest.raises(SpaceMismatchError, match="outside the bounds"):
        env.step({"action": np.array([5.0], dtype=np.float32)})


def test_unknown_wrapper_name():
    env = GymMazeEnv("CartPole-v1")
    with pytest.raises(ConfigurationError, match="unknown wrapper 'NoSuchWrapper'.*LogStatsWrapper"):
        wrap_env(env, {"NoSuchWrapper": {}})
    with pytest.raises(ConfigurationError, match="unknown wrapper 'my.module.Missing'"):
        wrap_env(env, {"my.module.Missing": {}})


def test_wrapper_with_wrong_parameter():
    env = GymMazeEnv("CartPole-v1")
    with pytest.raises(ConfigurationError, match="LogStatsWrapper"):
        wrap_env(env, {"LogStatsWrapper": {"no_such_parameter": 1}})


def test_unknown_gym_id():
    with pytest.raises(ValueError, match="'CartPool-v1' is not a registered Gymnasium env.*CartPole-v1"):
        GymMazeEnv("CartPool-v1")


class _BadObs(_Obs):
    def maze_to_space(self, maze_state):
        shape = (1,) if maze_state == 0 else (2,)
        return {"t": np.zeros(shape, dtype=np.float32)}


def test_observation_not_matching_space():
    env = MazeEnv(ScriptCoreEnv(), {0: _Act()}, {0: _BadObs()})
    env.reset()
    with pytest.raises(SpaceMismatchError, match=r"observation\['t'\] is array\(shape=\(2,\).*declares shape \(1,\)"):
        env.step({"n": 0})


class _WrongKeys(_Obs):
    def maze_to_space(self, maze_state):
        return {"time": np.zeros(1, dtype=np.float32)}


def test_observation_with_wrong_keys_on_reset():
    env = MazeEnv(ScriptCoreEnv(), {0: _Act()}, {0: _WrongKeys()})
    with pytest.raises(SpaceMismatchError, match=r"_WrongKeys.maze_to_space\): the observation has no key 't' of "
                                                r"its space Dict\('t': Box.*has key 'time' that the space does not "
                                                r"declare"):
        env.reset()


def test_non_dict_conversion_space():
    class FlatObs(_Obs):
        def space(self):
            return gym.spaces.Box(0, 1, shape=(1,))

    with pytest.raises(TypeError, match="must be gymnasium Dict spaces"):
        MazeEnv(ScriptCoreEnv(), {0: _Act()}, {0: FlatObs()})
