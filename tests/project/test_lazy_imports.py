"""Short imports: ``from maze_lab import GymMazeEnv, RunContext, PPO, ...`` resolve lazily; ``import maze_lab`` is
light (no torch, no matplotlib)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import maze_lab

NOTEBOOK_NAMES = ["CoreEnv", "MazeEnv", "StructuredEnv", "ActorID", "GymMazeEnv", "GymnasiumEnvAdapter",
                  "RunContext", "PPO", "A2C", "PPOAlgorithmConfig", "A2CAlgorithmConfig", "RewardAggregatorInterface",
                  "KpiCalculator", "ObservationConversionInterface", "ActionConversionInterface", "Renderer",
                  "define_episode_stats",
                  "define_step_stats", "define_epoch_stats", "Pubsub", "LogStatsWrapper", "TorchPolicy",
                  "SequentialRolloutRunner", "list_runs", "load_run", "ConfigurationError"]


def test_import_maze_lab_is_light() -> None:
    code = ("import sys\nimport maze_lab\nfrom maze_lab import __version__\n"
            "print(sorted(m for m in ('torch', 'matplotlib', 'pandas', 'omegaconf') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("name", maze_lab.__all__)
def test_every_short_name_resolves_to_its_module_object(name: str) -> None:
    import importlib

    value = getattr(maze_lab, name)
    module = maze_lab._MODULE_OF[name]
    assert value is getattr(importlib.import_module(module), name)


def test_the_names_a_notebook_uses_are_there() -> None:
    assert set(NOTEBOOK_NAMES) <= set(maze_lab.__all__)
    assert set(maze_lab.__all__) <= set(dir(maze_lab))
    namespace: dict = {}
    exec("from maze_lab import CoreEnv, MazeEnv, StructuredEnv, GymMazeEnv, RunContext, PPO, A2C", namespace)
    assert namespace["PPO"].__name__ == "PPO" and namespace["GymMazeEnv"].__name__ == "GymMazeEnv"


def test_an_unknown_name_lists_the_short_imports() -> None:
    with pytest.raises(AttributeError, match="module 'maze_lab' has no attribute 'PPOTrainer'; the short imports "
                                             "are: .*PPO"):
        maze_lab.PPOTrainer  # noqa: B018
    with pytest.raises(ImportError):
        exec("from maze_lab import PPOTrainer", {})
