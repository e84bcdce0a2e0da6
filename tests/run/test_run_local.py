"""The `local` runner: training envs in worker processes, from config names and from an env factory object."""

from __future__ import annotations

import pytest

from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.run.run_context import RunContext

TINY = {"n_epochs": 1, "runner.concurrency": 2, "algorithm.epoch_length": 2, "algorithm.n_rollout_steps": 16,
        "algorithm.eval_repeats": 1}


@pytest.mark.parametrize("env", ["gym_env", lambda: GymMazeEnv("CartPole-v1", render_mode=None)])
def test_local_runner_trains_in_worker_processes(tmp_path, env):
    rc = RunContext(env=env, runner="local", overrides={**TINY, "log_base_dir": str(tmp_path)}, silent=True)
    rc.train()
    venv = rc.trainer.env
    processes = list(venv.processes)
    assert len(processes) == 2 and all(p.is_alive() for p in processes)
    assert rc.trainer.env_steps == 2 * 2 * 16
    df = rc.stats
    assert not df[(df.prefix == "train") & (df.event == "reward") & (df.name == "episode_count")].empty
    rc.close()
    for p in processes:
        p.join(5)
    assert not any(p.is_alive() for p in processes)
