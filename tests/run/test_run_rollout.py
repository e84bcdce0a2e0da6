"""Rollouts of trained runs: RunContext.rollout, load_run(...).rollout, `maze-lab rollout`, and the viewer."""

from __future__ import annotations

import subprocess
import sys

import pytest

from maze_lab.run.run_context import RunContext
from maze_lab.run.runs import load_run

TINY = {"n_epochs": 1, "runner.concurrency": 2, "algorithm.epoch_length": 2, "algorithm.n_rollout_steps": 16,
        "algorithm.eval_repeats": 1}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    rc = RunContext(experiment="cutting2d_masked_ppo", overrides={**TINY, "log_base_dir": str(base)}, silent=True)
    rc.train()
    yield rc
    rc.close()


def test_run_context_rollout_records_episodes(trained):
    result = trained.rollout(n_episodes=2, seed=5)
    assert len(result.episode_rewards) == 2 and result.episode_lengths == [180, 180]
    files = sorted((trained.run_dir / "trajectories").glob("*.trajectory.zip"))
    assert len(files) == 2
    from maze_lab.widgets.trajectory_viewer import TrajectoryViewer

    viewer = TrajectoryViewer(trained.run_dir / "trajectories")
    viewer.show_step(3)
    assert viewer.image.value[:8] == b"\x89PNG\r\n\x1a\n"  # the Cutting-2D renderer drew the step


def test_loaded_run_rollout_and_cli(trained):
    run = load_run(trained.run_dir)
    result = run.rollout(n_episodes=1, which="last", seed=1)
    assert result.episode_lengths == [180]
    assert run.summary["last_rollout"]["policy"] == "last"
    out = subprocess.run([sys.executable, "-m", "maze_lab.cli", "rollout", str(trained.run_dir), "--episodes", "1",
                          "--seed", "1", "--which", "last"], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "1 episode(s) of the last policy: mean reward" in out.stdout
    assert f"{result.mean_reward:.3f}" in out.stdout  # same seed, same deterministic policy, same episode
    assert len(run.trajectories()) >= 2


def test_rollout_of_a_directory_that_is_not_a_run(tmp_path):
    out = subprocess.run([sys.executable, "-m", "maze_lab.cli", "rollout", str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2
    assert "is not a maze-lab run directory" in out.stderr
