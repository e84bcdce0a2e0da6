"""Maze's command lines and config names: aliases where the meaning is the same, else a message naming the
maze-lab equivalent; ``maze-run`` runs the maze-lab command a Maze command line stands for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from maze_lab.cli import BadInput, translate_maze_run
from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.run.config import compose_config

TINY = ["n_epochs=1", "algorithm.epoch_length=1", "algorithm.n_rollout_steps=16", "algorithm.eval_repeats=1"]


def _plain(**kwargs) -> dict:
    cfg = OmegaConf.to_container(compose_config(**kwargs))
    cfg.pop("log_base_dir")
    return cfg


@pytest.mark.parametrize("group, maze_name, ours", [
    ("env", "tutorial_cutting_2d_struct_masked", "cutting2d_struct_masked"),
    ("env", "tutorial_cutting_2d_flat", "cutting2d_flat"),
    ("model", "tutorial_cutting_2d_struct", "cutting2d_struct"),
    ("wrappers", "vector_obs", "observation_normalization"),
    ("wrappers", "tutorial_cutting_2d", "cutting2d"),
])
def test_maze_option_names_are_aliases(group: str, maze_name: str, ours: str) -> None:
    assert _plain(components={group: maze_name}) == _plain(components={group: ours})


def test_vector_obs_and_template_critics() -> None:
    cfg = compose_config({"model": "vector_obs", "critic": "template_state"})
    assert cfg.model._target_.endswith("TemplateModelComposer")
    assert OmegaConf.to_container(cfg.model.critic) == {
        "_target_": "maze_lab.agent.composers.critics.SharedStateCriticComposer"}
    # without a critic option a template model keeps its own critic (the default one brings networks)
    assert compose_config({"model": "vector_obs"}).model.critic == cfg.model.critic
    struct = compose_config({"model": "cutting2d_struct", "env": "cutting2d_struct"})
    assert struct.model.critic._target_.endswith("StepStateCriticComposer") and "networks" not in struct.model.critic
    step = compose_config({"model": "cutting2d_struct", "critic": "template_step_state"})
    assert step.model.critic._target_.endswith("StepStateCriticComposer")
    # custom models keep the default shared critic with its networks
    assert "networks" in compose_config().model.critic


@pytest.mark.parametrize("kwargs, message", [
    ({"components": {"runner": "sequential"}}, "'sequential' is one of Maze's rollout runners; maze-lab trains with "
                                               "runner=dev (envs in this process) or runner=local"),
    ({"overrides": {"policy": "torch_policy"}}, "unknown config key 'policy': 'policy' is a group of Maze's rollout "
                                                "config (conf_rollout), not of training; maze-lab rolls out the policy "
                                                "of a trained run with `maze-lab rollout RUN_DIR --episodes N`"),
    ({"overrides": {"hydra/launcher": "local"}}, "runs go to <log_base_dir>/<experiment_name>/<timestamp>"),
    ({"components": {"critic": "template_state_action"}}, "is critic=state_action"),
])
def test_maze_names_without_an_equivalent_say_what_to_use(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        compose_config(**kwargs)
    assert message in str(info.value)


@pytest.mark.parametrize("maze_run, maze_lab", [
    ("-cn conf_train env=gym_env env.name=CartPole-v1 algorithm=a2c algorithm.n_epochs=5",
     "train env=gym_env env.name=CartPole-v1 algorithm=a2c algorithm.n_epochs=5"),
    ("-cn conf_train -m algorithm.lr=0.001,0.0005", "sweep algorithm.lr=0.001,0.0005"),
    ("--config-name=conf_train +experiment=cartpole_ppo", "train +experiment=cartpole_ppo"),
    ("policy=torch_policy env=gym_env input_dir=outputs/x runner.n_episodes=3", "rollout outputs/x --episodes 3"),
    ("env.name=CartPole-v1 policy=torch_policy input_dir=r runner=sequential runner.record_trajectory=false",
     "rollout r --no-record"),
    ("env=gym_env env.name=CartPole-v1 runner.n_episodes=2", "demo --env CartPole-v1 --epochs 1 --episodes 2"),
])
def test_maze_run_command_lines_translate(maze_run: str, maze_lab: str) -> None:
    assert translate_maze_run(maze_run.split())[0] == maze_lab.split()


@pytest.mark.parametrize("maze_run, message", [
    ("-cn conf_my_train", "maze-lab has one root config for training, conf_train"),
    ("-cp conf -cn conf_train", "maze-lab finds your config groups in an importable package"),
    ("policy=my_heuristics env=gym_env", "maze-lab rolls out the policy of a trained run with `maze-lab rollout"),
    ("policy=torch_policy env=gym_env", "policy=torch_policy needs input_dir=RUN_DIR"),
    ("env=cutting2d_flat", "maze-lab's equivalent is `maze-lab demo --env GYM_ID --episodes N`"),
    ("policy=torch_policy input_dir=r runner.render=true", "maze-lab does not render rollouts live"),
])
def test_maze_run_without_an_equivalent_names_one(maze_run: str, message: str) -> None:
    with pytest.raises(BadInput) as info:
        translate_maze_run(maze_run.split())
    assert message in str(info.value)


def _maze_run_command() -> list[str]:
    script = Path(sys.executable).parent / "maze-run"
    return [str(script)] if script.exists() else [sys.executable, "-c",
                                                  "import sys; from maze_lab.cli import maze_run_main; "
                                                  "sys.exit(maze_run_main())"]


def test_maze_run_trains_and_rolls_out_as_in_the_seed(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MAZE_LAB_OUTPUTS"}
    train = subprocess.run([*_maze_run_command(), "-cn", "conf_train", "env.name=CartPole-v1", "algorithm=a2c",
                            "model=vector_obs", "critic=template_state", *TINY], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300, env=env)
    assert train.returncode == 0, train.stderr
    assert train.stderr.startswith("maze-run: running `maze-lab train env.name=CartPole-v1 algorithm=a2c "
                                   "model=vector_obs critic=template_state")
    run_dir = tmp_path / train.stdout.strip().splitlines()[-1].removeprefix("run directory: ")
    assert json.loads((run_dir / "maze_lab_run.json").read_text())["status"] == "done"
    rollout = subprocess.run([*_maze_run_command(), "policy=torch_policy", "env=gym_env", "env.name=CartPole-v1",
                              f"input_dir={run_dir}", "runner.n_episodes=2"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=300, env=env)
    assert rollout.returncode == 0, rollout.stderr
    assert f"maze-run: running `maze-lab rollout {run_dir} --episodes 2`" in rollout.stderr
    assert "the run's own env config is used" in rollout.stderr
    start, result = rollout.stdout.splitlines()[:2]
    assert start.startswith(f"maze-lab rollout: 2 episode(s) of the best policy (most likely actions) of {run_dir}: "
                            f"env CartPole-v1, algorithm A2C, model "), start
    assert result.startswith("2 episode(s) of the best policy")
    bad = subprocess.run([*_maze_run_command(), "-cn", "conf_train", "runner=sequential"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode == 2 and "maze-lab trains with runner=dev" in bad.stderr
