"""The seed a run records is the seed it used, whether the algorithm came as a name, a dict or an object: each is
trained twice with ``seed=3`` and gives the same statistics both times (and another seed gives others); the
recorded configuration holds the object's values."""

from __future__ import annotations

from pathlib import Path

import pytest

from maze_lab import RunContext, load_run
from maze_lab.train.trainers.ppo import PPOAlgorithmConfig

SETTINGS = {"n_epochs": 2, "epoch_length": 2, "n_rollout_steps": 16, "batch_size": 32, "eval_repeats": 1}
RUNNER = {"runner.concurrency": 2, "runner.eval_concurrency": 1}


def _algorithm(kind: str) -> object:
    if kind == "name":
        return "ppo"
    if kind == "dict":
        return {"_target_": "maze_lab.train.trainers.ppo.PPOAlgorithmConfig", **SETTINGS}
    return PPOAlgorithmConfig(**SETTINGS)


def _train(kind: str, seed: int, base: Path) -> tuple[list[float], Path]:
    overrides = {"seed": seed, "log_base_dir": str(base), **RUNNER}
    if kind == "name":
        overrides.update({f"algorithm.{k}": v for k, v in SETTINGS.items() if k != "n_epochs"},
                         n_epochs=SETTINGS["n_epochs"])
    rc = RunContext(algorithm=_algorithm(kind), overrides=overrides, silent=True)
    rc.train()
    stats = rc.stats
    values = [float(v) for v in stats[~stats.event.str.startswith("time")].sort_values(
        ["epoch", "prefix", "topic", "event", "name"]).value]
    rc.close()
    return values, rc.run_dir


@pytest.mark.parametrize("kind", ["name", "dict", "object"])
def test_the_recorded_seed_is_the_one_used(kind: str, tmp_path: Path) -> None:
    first, run_dir = _train(kind, 3, tmp_path)
    second, _ = _train(kind, 3, tmp_path)
    other, _ = _train(kind, 4, tmp_path)
    assert first == second
    assert first != other
    run = load_run(run_dir)
    assert run.summary["seed"] == 3 and run.config["seed"] == 3
    if kind == "object":
        recorded = run.config["algorithm"]
        assert recorded["_object_"].endswith("PPOAlgorithmConfig")
        assert recorded["seed"] == 3 and recorded["n_rollout_steps"] == 16 and recorded["n_epochs"] == 2


def test_an_object_keeps_its_own_seed_and_the_run_records_it(tmp_path: Path) -> None:
    rc = RunContext(algorithm=PPOAlgorithmConfig(**SETTINGS, seed=11), overrides={"seed": 3, **RUNNER,
                                                                                  "log_base_dir": str(tmp_path)},
                    silent=True)
    rc.train()
    run = load_run(rc.run_dir)
    assert run.summary["seed"] == 11 and run.config["seed"] == 11 and run.config["algorithm"]["seed"] == 11
    assert rc.trainer.config.seed == 11
    rc.close()


def test_the_users_object_is_not_changed(tmp_path: Path) -> None:
    algorithm = PPOAlgorithmConfig(**SETTINGS)
    rc = RunContext(algorithm=algorithm, overrides={"seed": 3, "n_epochs": 1, **RUNNER,
                                                    "log_base_dir": str(tmp_path)}, silent=True)
    assert rc.training_plan() == "training for 1 epochs"
    rc.train()
    assert algorithm.seed is None and algorithm.n_epochs == 2
    assert rc.trainer.config.seed == 3 and rc.trainer.epoch == 1
    rc.close()
