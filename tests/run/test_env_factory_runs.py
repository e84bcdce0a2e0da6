"""A run trained with ``env=make_env`` (a Python factory, notebook 13's pattern) can be opened again: an importable
factory is recorded by name and re-created under the trust rule (``trust=[its module]``); a factory that cannot
be imported (a lambda, a notebook's function) is given back with ``env_factory=``; ``load_run``, its rollout,
``maze-lab rollout`` and ``AgentDeployment.from_run(load_run(...))`` all take the same way."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest
from run_utils import maze_lab_command

from maze_lab import GymMazeEnv, RunContext, load_run
from maze_lab.agent.deployment import AgentDeployment
from maze_lab.core.utils.factory import TrustError

TINY = {"n_epochs": 1, "algorithm.epoch_length": 1, "algorithm.n_rollout_steps": 16, "runner.concurrency": 1,
        "runner.eval_concurrency": 1, "algorithm.eval_repeats": 1}
MODULE = "gridnav_factory_for_tests"


@pytest.fixture(scope="module")
def factory_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("user_code")
    (folder / f"{MODULE}.py").write_text(textwrap.dedent("""
        from maze_lab import GymMazeEnv


        def make_env():
            return GymMazeEnv("CartPole-v1")
        """))
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))
    sys.modules.pop(MODULE, None)


def _drive(deployment: AgentDeployment) -> int:
    external = gym.make("CartPole-v1")
    state, _ = external.reset(seed=0)
    reward, done, truncated, steps = 0.0, False, False, 0
    while not (done or truncated) and steps < 50:
        action = deployment.act(state, reward, done)
        state, reward, done, truncated, _ = external.step(action)
        steps += 1
    return steps


def test_an_importable_factory_is_recorded_and_rebuilt_under_trust(factory_module: Path, tmp_path: Path) -> None:
    import importlib

    make_env = importlib.import_module(MODULE).make_env
    rc = RunContext(env=make_env, overrides={**TINY, "log_base_dir": str(tmp_path)}, silent=True)
    rc.train()
    rc.close()
    run = load_run(rc.run_dir)
    assert run.config["env"]["factory"] == f"{MODULE}.make_env"
    with pytest.raises(TrustError, match=rf"{MODULE}\.make_env.*trust=\['{MODULE}'\]"):
        run.rollout(n_episodes=1, record_trajectory=False)
    trusted = load_run(rc.run_dir, trust=[MODULE])
    assert len(trusted.rollout(n_episodes=2, seed=1, record_trajectory=False).episode_rewards) == 2
    deployment = AgentDeployment.from_run(trusted)
    assert _drive(deployment) > 0
    deployment.close()

    env = {"PYTHONPATH": f"{factory_module}:{Path(__file__).resolve().parents[2]}", "PATH": "/usr/bin:/bin",
           "HOME": str(tmp_path)}
    refused = subprocess.run([*maze_lab_command(), "rollout", str(rc.run_dir), "--episodes", "1"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300, env=env)
    assert refused.returncode == 2 and f"--trust {MODULE}" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    done = subprocess.run([*maze_lab_command(), "rollout", str(rc.run_dir), "--episodes", "1", "--trust", MODULE],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr


def test_a_factory_that_cannot_be_imported_is_given_back(tmp_path: Path) -> None:
    rc = RunContext(env=lambda: GymMazeEnv("CartPole-v1"), overrides={**TINY, "log_base_dir": str(tmp_path)},
                    silent=True)
    rc.train()
    rc.close()
    run = load_run(rc.run_dir)
    assert "factory" not in run.config["env"]
    with pytest.raises(ValueError, match=r"<lambda>.*env_factory=") as err:
        run.rollout(n_episodes=1, record_trajectory=False)
    assert "SequentialRolloutRunner" not in str(err.value)
    given = load_run(rc.run_dir, env_factory=lambda: GymMazeEnv("CartPole-v1"))
    assert len(given.rollout(n_episodes=1, seed=2, record_trajectory=False).episode_rewards) == 1
    deployment = given.deployment()
    assert _drive(deployment) > 0
    deployment.close()
