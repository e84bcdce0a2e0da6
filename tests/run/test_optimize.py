"""maze-lab optimize: an Optuna search over tiny PPO CartPole trials, each an ordinary run directory; best config and
params from the SQLite study, resuming it, pruning, bad search spaces, a trial as a Ray task, the command line."""

from __future__ import annotations

import os
from pathlib import Path

import optuna
import pytest
import torch
import yaml
from run_utils import run_maze_lab

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.run.optimize import load_search_space, optimize
from maze_lab.run.run_dir import RunDirectory
from maze_lab.run.runs import differing_params, list_runs

torch.set_num_threads(1)

TINY = {"n_epochs": 2, "algorithm.epoch_length": 1, "runner.concurrency": 1, "runner.eval_concurrency": 1,
        "algorithm.eval_repeats": 1, "algorithm.n_optimization_epochs": 2}
"""Two epochs of a few dozen env steps per trial (algorithm.n_rollout_steps is searched: 16 to 64)."""

SPACE_KEYS = ["algorithm.lr", "algorithm.gamma", "algorithm.gae_lambda", "algorithm.n_rollout_steps",
              "algorithm.entropy_coef"]
"""The keys of maze_lab/conf/search_space/ppo_cartpole.yaml."""


def _study(study_dir: Path, name: str = "optimize-ppo_cartpole") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{study_dir / 'study.db'}")


def _tiny_space(pruner: dict, n_epochs: int) -> dict:
    """One float key, a fixed sampler seed and the given pruner."""
    return {"name": "pruning", "overrides": {**TINY, "n_epochs": n_epochs, "algorithm.n_rollout_steps": 16},
            "study": {"n_trials": 1, "sampler": {"type": "random", "seed": 0}, "pruner": pruner},
            "params": {"algorithm.lr": {"type": "float", "low": 1e-4, "high": 1e-3, "log": True}}}


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """Three trials of the shipped ppo_cartpole space, run one at a time in this process."""
    base = tmp_path_factory.mktemp("optimize")
    result = optimize("ppo_cartpole", overrides={**TINY, "log_base_dir": str(base)}, n_trials=3, quiet=True)
    return base, result


def test_search_writes_best_trial_of_sqlite_study(search: tuple) -> None:
    """The study on disk holds three finished trials; best_params.yaml and best_config.yaml are those of its best
    trial; every trial is a run directory whose config holds the trial's values and whose summary names the trial."""
    base, result = search
    study_dir = base / "cartpole_ppo" / "optimize-ppo_cartpole"  # <log_base_dir>/<experiment_name>/optimize-<space>
    assert result.study_dir == study_dir.resolve()
    study = _study(study_dir)
    trials = study.get_trials()
    assert [t.number for t in trials] == [0, 1, 2]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    best = study.best_trial
    assert best.value == max(t.value for t in trials)
    assert (result.best_trial, result.best_value, result.best_params) == (best.number, best.value, best.params)
    assert yaml.safe_load(result.best_params_path.read_text()) == best.params
    best_run = RunDirectory(study_dir / f"trial_{best.number:04d}")
    best_config = yaml.safe_load(result.best_config_path.read_text())
    assert best_config == best_run.read_config()
    assert best_config["algorithm"]["lr"] == best.params["algorithm.lr"]
    assert best_run.read_summary()["best_eval_reward"] == best.value  # the objective: best_eval_reward
    for t in trials:
        run = RunDirectory(study_dir / f"trial_{t.number:04d}")
        summary, config = run.read_summary(), run.read_config()
        assert summary["status"] == "done" and summary["epoch"] == 2
        assert summary["optuna"]["trial"] == t.number and summary["optuna"]["state"] == "complete"
        assert summary["optuna"]["params"] == t.params
        assert summary["optuna"]["pid"] == os.getpid()  # n_jobs=1: in this process
        for key, value in t.params.items():
            section, name = key.split(".")
            assert config[section][name] == value
        # the per-epoch eval rewards were reported (steps are epochs)
        assert sorted(t.intermediate_values) == [1, 2]
        assert t.user_attrs["run_dir"] == str(run.path)
    assert list(result.table.trial) == [0, 1, 2] and list(result.table.state) == ["complete"] * 3


def test_trials_are_runs_that_compare(search: tuple) -> None:
    """`maze-lab runs --base <study dir>` material and the run comparison widget: the trials' differing
    hyperparameters are the searched keys."""
    from maze_lab.widgets.comparison import RunComparison

    _, result = search
    listed = list_runs(result.study_dir)
    assert sorted(Path(p).name for p in listed.run_dir) == ["trial_0000", "trial_0001", "trial_0002"]
    assert set(listed.status) == {"done"}
    assert len(set(listed.group)) == 1 and listed.group[0] == f"study:{result.study_dir.name}"
    configs = [RunDirectory(d).read_config() for d in result.run_dirs]
    differing = differing_params(configs)
    # float ranges never repeat a value; the int and categorical keys may
    assert {"algorithm.lr", "algorithm.gamma", "algorithm.gae_lambda"} <= set(differing) <= set(SPACE_KEYS)
    cmp = RunComparison(result.run_dirs)
    try:
        assert cmp.differing_params() == differing
        table = cmp.table()
        assert sorted(table["algorithm.lr"]) == sorted(result.table["algorithm.lr"])
    finally:
        cmp.close()


def test_resume_runs_only_the_missing_trials(search: tuple) -> None:
    """Asking the same study for 4 trials runs one more (number 3); the three before stay as they were; asking
    for 4 again runs none."""
    base, result = search
    before = {t.number: (t.params, t.value, t.datetime_complete) for t in _study(result.study_dir).get_trials()}
    finished = RunDirectory(result.study_dir / "trial_0000").read_summary()["finished"]
    again = optimize("ppo_cartpole", overrides={**TINY, "log_base_dir": str(base)}, n_trials=4, quiet=True)
    assert again.study_dir == result.study_dir and again.ran == [3]
    trials = _study(result.study_dir).get_trials()
    assert [t.number for t in trials] == [0, 1, 2, 3]
    assert {t.number: (t.params, t.value, t.datetime_complete) for t in trials[:3]} == before
    assert trials[3].params != trials[0].params  # the resumed sampler does not replay its first draws
    assert RunDirectory(result.study_dir / "trial_0000").read_summary()["finished"] == finished
    assert RunDirectory(result.study_dir / "trial_0003").read_summary()["optuna"]["trial"] == 3
    assert optimize("ppo_cartpole", overrides={**TINY, "log_base_dir": str(base)}, n_trials=4, quiet=True).ran == []


def test_pruned_trial_stops_its_run(tmp_path: Path) -> None:
    """A pruner that judges every epoch from the second on as too poor (threshold above CartPole's best reward)
    prunes the trial after epoch 2 of 4: Optuna says PRUNED with the reported rewards, the run stopped there with
    its checkpoint and says why."""
    space = _tiny_space({"type": "threshold", "lower": 1000.0, "n_warmup_steps": 2}, n_epochs=4)
    result = optimize(space, overrides={"log_base_dir": str(tmp_path)}, quiet=True)
    trial = _study(result.study_dir, "optimize-pruning").get_trials()[0]
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert sorted(trial.intermediate_values) == [1, 2]
    run = RunDirectory(result.study_dir / "trial_0000")
    summary = run.read_summary()
    assert summary["status"] == "stopped" and summary["epoch"] == 2
    assert summary["stop_reason"].startswith("pruned by Optuna after epoch 2")
    assert summary["optuna"]["state"] == "pruned"
    assert trial.value == summary["last_eval_reward"] == trial.intermediate_values[2]
    assert run.last_checkpoint.exists()
    assert result.best_trial is None and not (result.study_dir / "best_config.yaml").exists()
    assert list(result.table.state) == ["pruned"]


def test_bad_search_spaces_are_refused_clearly(tmp_path: Path) -> None:
    """An unknown key lists the valid keys, a bad range and an unknown distribution say what is wrong; nothing is
    written."""
    def space(params: dict, **study: object) -> dict:
        return {"name": "bad", "params": params, "study": study}

    out = {"log_base_dir": str(tmp_path / "out")}
    with pytest.raises(ConfigurationError, match=r"params\.algorithm\.lrr: unknown config key 'algorithm\.lrr'; "
                                                 r"valid keys in 'algorithm': .*\blr\b"):
        optimize(space({"algorithm.lrr": {"type": "float", "low": 0.001, "high": 0.01}}), overrides=out)
    with pytest.raises(ConfigurationError, match=r"bad range: low \(0\.01\) must be below high \(0\.001\)"):
        optimize(space({"algorithm.lr": {"type": "float", "low": 0.01, "high": 0.001}}), overrides=out)
    with pytest.raises(ConfigurationError, match=r"a log range needs low > 0"):
        load_search_space(space({"algorithm.lr": {"type": "float", "low": 0.0, "high": 0.1, "log": True}}))
    with pytest.raises(ConfigurationError, match=r"unknown distribution type 'gaussian'; valid types: float, int, "
                                                 r"categorical"):
        load_search_space(space({"algorithm.lr": {"type": "gaussian", "mu": 0.001}}))
    with pytest.raises(ConfigurationError, match=r"expected a value of type int .*got str 'many'"):
        optimize(space({"algorithm.n_rollout_steps": ["many", "few"]}), overrides=out)
    with pytest.raises(ConfigurationError, match=r"study\.pruner: unknown type 'hyperband'; valid types: median, "
                                                 r"threshold, none"):
        load_search_space(space({"algorithm.lr": [0.001]}, pruner="hyperband"))
    with pytest.raises(ConfigurationError, match=r"unknown search space 'nope'; valid search spaces .*ppo_cartpole"):
        optimize("nope", overrides=out)
    assert not (tmp_path / "out").exists()


def test_failed_trial_does_not_stop_the_study(tmp_path: Path) -> None:
    """Trials whose env cannot be built are marked failed with their error (study and run directory) and the next
    trial still runs; a trial left running by an interrupted optimize is marked failed when the study resumes."""
    space = {"name": "failing", "overrides": TINY, "study": {"n_trials": 2, "pruner": "none"},
             "params": {"env.name": {"type": "categorical", "choices": ["NoSuchEnv-v0"]}}}
    result = optimize(space, overrides={"log_base_dir": str(tmp_path)}, quiet=True)
    assert result.ran == [0, 1] and result.best_trial is None
    study = _study(result.study_dir, "optimize-failing")
    for t in study.get_trials():
        assert t.state == optuna.trial.TrialState.FAIL
        assert "NoSuchEnv-v0" in t.user_attrs["error"]
        summary = RunDirectory(result.study_dir / f"trial_{t.number:04d}").read_summary()
        assert summary["status"] == "failed" and "NoSuchEnv-v0" in summary["error"]
        assert summary["optuna"]["state"] == "fail"
    stale = study.ask()  # as an optimize killed while this trial trained would leave it
    again = optimize(space, overrides={"log_base_dir": str(tmp_path)}, quiet=True)
    assert again.ran == []  # the two failed trials count as done; the stale one does not
    left = _study(result.study_dir, "optimize-failing").get_trials()[stale.number]
    assert left.state == optuna.trial.TrialState.FAIL and left.user_attrs["interrupted"] is True


def test_unreachable_cluster_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """An address where no Ray cluster listens is one clear error, not minutes of Ray's retries."""
    with pytest.raises(ConfigurationError, match=r"no Ray cluster answers at 127\.0\.0\.1:1 .*ray start --head"):
        optimize("ppo_cartpole", overrides={"log_base_dir": str(tmp_path / "out")}, backend="ray",
                 address="127.0.0.1:1")
    assert not (tmp_path / "out").exists()


def test_trial_as_ray_task(tmp_path: Path, local_ray: object) -> None:
    """A trial run as a Ray task (another process) reports its per-epoch rewards to the driver's study."""
    space = _tiny_space({"type": "none"}, n_epochs=2)
    result = optimize(space, overrides={"log_base_dir": str(tmp_path)}, backend="ray", quiet=True)
    assert local_ray.is_initialized()  # the module's Ray was used, not shut down
    trial = _study(result.study_dir, "optimize-pruning").get_trials()[0]
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert sorted(trial.intermediate_values) == [1, 2]  # reported from the task through the storage proxy
    summary = RunDirectory(result.study_dir / "trial_0000").read_summary()
    assert summary["optuna"]["pid"] != os.getpid()
    assert summary["status"] == "done" and trial.value == summary["best_eval_reward"]


def test_cli(tmp_path: Path) -> None:
    """`maze-lab optimize` with two worker processes prints the table of trials and writes the best files; a bad
    space is one line with exit code 2."""
    words = [f"{k}={v}" for k, v in TINY.items()]
    proc = run_maze_lab("optimize", "--space", "ppo_cartpole", "--trials", "2", "--jobs", "2", *words,
                        f"log_base_dir={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    study_dir = tmp_path / "cartpole_ppo" / "optimize-ppo_cartpole"
    study = _study(study_dir)
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE", "COMPLETE"]
    header = next(line for line in proc.stdout.splitlines() if line.split()[:3] == ["trial", "state", "value"])
    assert "algorithm.lr" in header
    assert yaml.safe_load((study_dir / "best_params.yaml").read_text()) == study.best_params
    assert "2 to run (2 worker process(es))" in proc.stdout
    runs = run_maze_lab("runs", "--base", str(study_dir), cwd=tmp_path)
    assert runs.returncode == 0 and "trial_0000" in runs.stdout and "trial_0001" in runs.stdout
    bad = run_maze_lab("optimize", "--space", "nope", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("maze-lab optimize: error: unknown search space 'nope'")
    assert len(bad.stderr.strip().splitlines()) == 1
