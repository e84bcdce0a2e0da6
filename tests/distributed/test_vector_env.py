"""Sequential and subprocess vector envs: seeding, auto-reset, statistics, worker errors and shutdown."""

from __future__ import annotations

import time

import numpy as np
import pytest
from scripted_env import make_script_env
from training_utils import cartpole_factory

from maze_lab.core.log_stats.base_events import BaseEnvEvents
from maze_lab.core.log_stats.writers import StatsStore
from maze_lab.train.vector_env import SequentialVectorEnv, SubprocVectorEnv, VectorEnvWorkerError


def _drive(venv, n_steps=60, seed=3):
    venv.seed(seed)
    obs = venv.reset()
    rng = np.random.default_rng(0)
    trace = [obs["observation"].copy()]
    for _ in range(n_steps):
        obs, rewards, terminated, truncated, infos = venv.step({"action": rng.integers(0, 2, size=venv.n_envs)})
        trace.append(obs["observation"].copy())
    return np.stack(trace)


def test_sequential_and_subprocess_agree():
    seq = SequentialVectorEnv([cartpole_factory] * 3)
    sub = SubprocVectorEnv([cartpole_factory] * 3, n_workers=2)
    try:
        np.testing.assert_array_equal(_drive(seq), _drive(sub))
        seq.write_epoch_stats()
        sub.write_epoch_stats()
        for name in ("episode_count", "mean", "total_step_count"):
            assert seq.get_stats_value(BaseEnvEvents.reward, name) == sub.get_stats_value(BaseEnvEvents.reward, name)
        assert seq.get_stats_value(BaseEnvEvents.reward, "episode_count") > 0
    finally:
        seq.close()
        sub.close()
    assert all(not p.is_alive() for p in sub.processes)


def test_seeds_differ_per_env_and_repeat():
    venv = SequentialVectorEnv([cartpole_factory] * 2)
    venv.seed(7)
    first = venv.reset()["observation"]
    assert not np.array_equal(first[0], first[1])
    venv.seed(7)
    np.testing.assert_array_equal(venv.reset()["observation"], first)


def test_auto_reset_and_terminal_observation():
    venv = SequentialVectorEnv([lambda: make_script_env(2)] * 2)
    venv.reset()
    venv.step({"n": np.array([1, 1])})
    obs, rewards, terminated, truncated, infos = venv.step({"n": np.array([2, 3])})
    assert terminated.tolist() == [True, True]
    assert rewards.tolist() == [2.0, 3.0]
    assert infos[0]["terminal_observation"]["t"].tolist() == [2.0]
    assert obs["t"].tolist() == [[0.0], [0.0]]  # already reset


def test_statistics_reach_writers():
    store = StatsStore()
    venv = SequentialVectorEnv([lambda: make_script_env(2)] * 2, logging_prefix="train", writers=[store])
    venv.reset()
    for actions in ([1, 2], [3, 0]):
        venv.step({"n": np.array(actions)})
    venv.write_epoch_stats()
    df = store.to_dataframe()
    mean = df[(df.event == "reward") & (df.name == "mean")]
    assert mean.value.tolist() == [3.0]  # episode returns 1+3 and 2+0
    assert (df.prefix == "train").all()


def test_wrong_action_batch_shape():
    venv = SequentialVectorEnv([cartpole_factory] * 2)
    venv.reset()
    message = r"action 'action' has shape \(3,\); a vector env of 2 envs expects \(2, ...\)"
    with pytest.raises(ValueError, match=message):
        venv.step({"action": np.zeros(3, dtype=np.int64)})


class _Boom(Exception):
    pass


def _exploding_factory():
    from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv

    class Exploding(GymMazeEnv):
        def step(self, action):
            if self.get_env_time() >= 3:
                raise _Boom("the env exploded at step 3")
            return super().step(action)

    return Exploding("CartPole-v1", render_mode=None)


def test_worker_exception_surfaces_with_traceback_and_no_process_is_left():
    venv = SubprocVectorEnv([_exploding_factory, cartpole_factory])
    venv.reset()
    with pytest.raises(VectorEnvWorkerError) as info:
        for _ in range(10):
            venv.step({"action": np.zeros(2, dtype=np.int64)})
    message = str(info.value)
    assert "the env exploded at step 3" in message
    assert "Traceback" in message and "in step" in message
    deadline = time.time() + 5
    while any(p.is_alive() for p in venv.processes) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(p.is_alive() for p in venv.processes)


def test_worker_factory_error_surfaces():
    def bad_factory():
        raise RuntimeError("cannot build this env")

    with pytest.raises(VectorEnvWorkerError, match="cannot build this env"):
        SubprocVectorEnv([bad_factory])


def _slow_factory():
    from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv

    class Slow(GymMazeEnv):
        def step(self, action):
            time.sleep(0.05)
            return super().step(action)

    return Slow("CartPole-v1", render_mode=None)


def test_interrupt_while_stepping_shuts_workers_down():
    import _thread
    import threading

    venv = SubprocVectorEnv([_slow_factory, _slow_factory])
    venv.reset()
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        for _ in range(200):
            venv.step({"action": np.zeros(2, dtype=np.int64)})
    deadline = time.time() + 5
    while any(p.is_alive() for p in venv.processes) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(p.is_alive() for p in venv.processes)
    with pytest.raises(RuntimeError, match="closed"):
        venv.step({"action": np.zeros(2, dtype=np.int64)})


def test_failing_call_leaves_workers_running():
    from maze_lab.train.vector_env import VectorEnvCallError

    venv = SubprocVectorEnv([cartpole_factory] * 2)
    try:
        venv.reset()
        with pytest.raises(VectorEnvCallError, match="no_such_method"):
            venv.call("no_such_method")
        assert all(p.is_alive() for p in venv.processes)
        assert venv.call("get_env_time") == [0, 0]
        venv.step({"action": np.zeros(2, dtype=np.int64)})
    finally:
        venv.close()


@pytest.mark.parametrize("when", ["before_send", "while_stepping"])
def test_a_killed_worker_is_named_with_its_signal_and_the_others_shut_down_quietly(capfd, when):
    """SIGKILL on worker 1: one clear error naming the worker, its pid and the signal; no BrokenPipeError noise."""
    import os
    import signal

    venv = SubprocVectorEnv([cartpole_factory, _slow_factory if when == "while_stepping" else cartpole_factory])
    venv.reset()
    victim = venv.processes[1]
    if when == "before_send":
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(timeout=30)
        assert victim.exitcode == -signal.SIGKILL
        steps = 1
    else:
        import threading

        threading.Timer(0.2, os.kill, args=(victim.pid, signal.SIGKILL)).start()
        steps = 10_000
    with pytest.raises(VectorEnvWorkerError) as info:
        for _ in range(steps):
            venv.step({"action": np.zeros(2, dtype=np.int64)})
    assert f"vector env worker 1 (pid {victim.pid}) died: signal 9 (SIGKILL)" in str(info.value)
    assert info.value.__cause__ is None
    for proc in venv.processes:
        proc.join(timeout=30)
    assert not any(p.is_alive() for p in venv.processes)
    err = capfd.readouterr().err
    assert "BrokenPipeError" not in err and "Traceback" not in err, err
