"""A model file that brings its own critic composes with the default critic option: the model's critic is kept
(the Maze-like Cutting-2D model's per-step critics), as a template model keeps its own."""

from __future__ import annotations

from pathlib import Path

from run_utils import run_maze_lab

from maze_lab.run.config import compose_config


def test_a_model_with_its_own_critic_keeps_it() -> None:
    cfg = compose_config({"env": "cutting2d_struct_masked", "model": "cutting2d_struct_masked_maze"})
    assert cfg.model.critic._target_.endswith("StepStateCriticComposer")
    assert cfg.model.critic.networks._target_.endswith("MazeLikeValueNet")


def test_the_command_line_trains_it(tmp_path: Path) -> None:
    done = run_maze_lab("train", "env=cutting2d_struct_masked", "model=cutting2d_struct_masked_maze", "n_epochs=1",
                        "algorithm.epoch_length=1", "algorithm.n_rollout_steps=20", "algorithm.eval_repeats=1",
                        f"log_base_dir={tmp_path}", "--silent", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
