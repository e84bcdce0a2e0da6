"""notebooks/17_sweeps_and_search.ipynb: a local Ray started by the notebook, a sweep of PPO on CartPole as Ray
tasks, an Optuna search with its trials as Ray tasks, resumed once, its best trial, and the comparison widget over
the sweep's runs and the trials; executed once with papermill in the ``maze-lab`` kernel with its default
parameters, asserting on the numbers it printed and on what it left on disk (run directories, the SQLite study)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch
import yaml
from notebook_utils import (
    NOTEBOOKS,
    all_text,
    cell_with,
    cells,
    execute_with_summary,
    mime_types,
    parameters_source,
    source,
    text_of,
)

optuna = pytest.importorskip("optuna")
pytest.importorskip("ray")

from maze_lab.run.run_dir import RunDirectory  # noqa: E402
from maze_lab.run.runs import find_run_dirs  # noqa: E402

NAME = "17_sweeps_and_search.ipynb"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
EVAL_REWARD = "eval/BaseEnvEvents/reward/mean"

N_EPOCHS, LRS, N_SEEDS, N_TRIALS, FIRST_TRIALS, SEED = 2, [0.001, 0.0003], 2, 4, 2, 1234
"""The notebook's defaults (the first test checks that they still are)."""
SEARCHED = {"algorithm.lr": (1e-4, 3e-3), "algorithm.gamma": (0.9, 0.999)}
"""The ranges of the search space the notebook writes."""


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """The notebook executed once with its defaults: (run directory, executed notebook, summary line)."""
    return execute_with_summary(NAME, tmp_path_factory)


def test_committed_notebook_is_clean_and_parameterised() -> None:
    src = parameters_source(NAME)
    for name in ("n_epochs", "lrs", "n_seeds", "n_trials", "first_trials", "n_jobs", "num_cpus", "ray_address",
                 "seed", "run_dir", "log_base_dir"):
        assert f"{name} =" in src, name
    assert all("#" in line for line in src.splitlines() if "=" in line)  # every default is explained
    for default in (f"n_epochs = {N_EPOCHS} ", f"lrs = {LRS} ", f"n_seeds = {N_SEEDS} ", f"n_trials = {N_TRIALS} ",
                    f"first_trials = {FIRST_TRIALS} ", f"seed = {SEED} ", 'ray_address = "" '):
        assert default in src, default
    # the cluster commands are shown as text, never executed by the notebook
    nb = json.loads((NOTEBOOKS / NAME).read_text())
    prose = "\n".join(source(c) for c in cells(nb, "markdown"))
    assert "ray start --head" in prose and "ray start --address=HEAD_IP:6379" in prose
    assert 'ray.init(address="auto")' in prose and "shared file system" in prose
    assert not any("ray start" in source(c) or "subprocess" in source(c) for c in cells(nb))


def test_sweep_ran_as_ray_tasks_into_the_run_directories_of_its_table(executed: tuple) -> None:
    """One run per learning rate x seed, each trained for the notebook's epochs into a run directory under
    ``<run_dir>/sweep``: the directories on disk are exactly the rows of the table, each with its grid values."""
    run_dir, nb, summary = executed
    assert summary["run_dir"] == str(run_dir)
    assert summary["ray_cpus"] == 2  # the notebook's own local Ray, num_cpus=2
    sweep = summary["sweep"]
    assert sweep["rows"] == len(LRS) * N_SEEDS == len(sweep["runs"])
    assert sweep["grid_keys"] == ["algorithm.lr", "seed"]
    assert sweep["status"] == ["done"] * sweep["rows"]
    table_dirs = [r["run_dir"] for r in sweep["runs"]]
    found = find_run_dirs(run_dir / "sweep")
    assert sorted(str(p) for p in found) == sorted(table_dirs)
    assert sweep["on_disk"] == sweep["rows"]
    assert sorted((r["lr"], r["seed"]) for r in sweep["runs"]) == \
        sorted(itertools.product(LRS, [SEED + i for i in range(N_SEEDS)]))
    for r in sweep["runs"]:
        run = RunDirectory(r["run_dir"])
        assert run.path.parent == run_dir / "sweep" / "cartpole_ppo"
        config, run_summary = run.read_config(), run.read_summary()
        assert (config["algorithm"]["lr"], config["seed"]) == (r["lr"], r["seed"])
        assert run_summary["status"] == "done" and run_summary["epoch"] == N_EPOCHS
        assert (run.path / "stats.arrows").is_file() and run.last_checkpoint.is_file()
    assert "the same: True" in text_of(cell_with(nb, "list_runs(root / \"sweep\")"))


def test_search_study_holds_the_trials_and_resuming_ran_only_the_missing_ones(executed: tuple) -> None:
    """The SQLite study has every trial complete; the first call ran trials 0..first_trials-1, the resumed one only
    the rest, after those had finished, leaving them as they were."""
    run_dir, nb, summary = executed
    search = summary["search"]
    study_dir = run_dir / "search"
    assert search["study_dir"] == str(study_dir)
    study = optuna.load_study(study_name=search["study_name"], storage=f"sqlite:///{study_dir / 'study.db'}")
    trials = study.get_trials()
    assert [t.number for t in trials] == list(range(N_TRIALS)) and search["trials"] == N_TRIALS
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert search["first_ran"] == list(range(FIRST_TRIALS))
    assert search["resumed_ran"] == list(range(FIRST_TRIALS, N_TRIALS))
    # what the first trials were when the first call returned is what the study still holds
    assert sorted(int(n) for n in search["first_study"]) == list(range(FIRST_TRIALS)) and search["kept"] is True
    for number, before in search["first_study"].items():
        t = trials[int(number)]
        assert (t.value, t.datetime_complete.isoformat()) == (before["value"], before["completed"])
    first_finished = max(t.datetime_complete for t in trials[:FIRST_TRIALS])
    assert all(t.datetime_start >= first_finished for t in trials[FIRST_TRIALS:])
    # each trial is a run directory of the study, trained in a Ray worker (not the kernel) with the trial's values
    for t in trials:
        run = RunDirectory(study_dir / f"trial_{t.number:04d}")
        info, config = run.read_summary(), run.read_config()
        assert info["status"] == "done" and info["epoch"] == N_EPOCHS
        assert info["optuna"]["trial"] == t.number and info["optuna"]["state"] == "complete"
        assert info["optuna"]["params"] == t.params and set(t.params) == set(SEARCHED)
        assert info["optuna"]["pid"] != summary["kernel_pid"]
        assert search["trial_pids"][str(t.number)] == info["optuna"]["pid"]
        assert t.value == info["best_eval_reward"]  # the space's objective
        assert sorted(t.intermediate_values) == list(range(1, N_EPOCHS + 1))  # reported from the task each epoch
        for key, (low, high) in SEARCHED.items():
            section, name = key.split(".")
            assert config[section][name] == t.params[key] and low <= t.params[key] <= high
    text = text_of(cell_with(nb, "result = optimize("))
    assert f"the resumed call ran {list(range(FIRST_TRIALS, N_TRIALS))}" in text
    assert f"{N_TRIALS} trials wanted, {FIRST_TRIALS} finished, {N_TRIALS - FIRST_TRIALS} to run" in text


def test_best_params_and_config_are_those_of_the_best_trial(executed: tuple) -> None:
    run_dir, nb, summary = executed
    search = summary["search"]
    study_dir = run_dir / "search"
    study = optuna.load_study(study_name=search["study_name"], storage=f"sqlite:///{study_dir / 'study.db'}")
    best = study.best_trial
    assert best.value == max(t.value for t in study.get_trials())
    assert (search["best_trial"], search["best_value"], search["best_params"]) == (best.number, best.value,
                                                                                   best.params)
    assert search["best_params_file"] == str(study_dir / "best_params.yaml")
    assert yaml.safe_load(Path(search["best_params_file"]).read_text()) == best.params
    best_config = yaml.safe_load(Path(search["best_config_file"]).read_text())
    assert best_config == RunDirectory(study_dir / f"trial_{best.number:04d}").read_config()
    assert best_config["algorithm"]["lr"] == best.params["algorithm.lr"]
    assert best_config["algorithm"]["gamma"] == best.params["algorithm.gamma"]
    assert f"best trial {best.number}: {best.value:g}" in text_of(cell_with(nb, "best_params_path.read_text()"))


def test_comparison_widget_shows_sweep_and_trials(executed: tuple) -> None:
    """The widget is displayed over the sweep's runs and the trials; the hyperparameters that differ are the swept
    and searched keys, and every run has an evaluation reward per epoch."""
    _, nb, summary = executed
    assert WIDGET_VIEW in mime_types(cell_with(nb, "RunComparison(compared_dirs)"))
    comparison = summary["comparison"]
    assert comparison["rows"] == summary["sweep"]["rows"] + N_TRIALS
    assert sorted(comparison["params"]) == ["algorithm.gamma", "algorithm.lr", "seed"]
    points = comparison["eval_points"]
    assert len(points) == comparison["rows"] and set(points.values()) == {N_EPOCHS}
    assert sum(name.startswith("search/trial_") for name in points) == N_TRIALS
    assert "text/html" in mime_types(cell_with(nb, "comparison.table()"))


def test_no_error_and_ray_shut_down(executed: tuple) -> None:
    _, nb, summary = executed
    assert "Traceback" not in all_text(nb)
    assert not [out for c in cells(nb) for out in c.get("outputs", []) if out.get("output_type") == "error"]
    assert summary["ray_after_shutdown"] is False
    assert "Ray still running: False" in text_of(cell_with(nb, "ray.shutdown()"))
