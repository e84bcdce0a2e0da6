"""Faults of runs: damaged run directories in the runs table, an existing run as run_dir, builds that fail (in the
CLI and in the background), negative epoch counts, bad checkpoints, and stop/failure races of background runs."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pandas as pd
import pytest
from run_utils import TINY, run_maze_lab, train_tiny_run

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.core.wrappers.gym_maze_env import make_gym_maze_env
from maze_lab.run.run_context import RunContext, RunFailedError
from maze_lab.run.run_dir import DamagedRunError, ExistingRunError, RunDirectory
from maze_lab.run.runs import list_runs, load_run


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished one-epoch CartPole run."""
    return train_tiny_run(tmp_path_factory.mktemp("trained"))


def copy_of(run: Path, dest: Path) -> Path:
    shutil.copytree(run, dest)
    return dest


# ---- damaged run directories --------------------------------------------------------------------------------------
def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


DAMAGES = {
    "empty summary": (lambda run: (run / "maze_lab_run.json").write_text(""), "maze_lab_run.json is empty"),
    "invalid summary": (lambda run: (run / "maze_lab_run.json").write_text('{"status": "do'),
                        "maze_lab_run.json is not valid JSON"),
    "summary not an object": (lambda run: (run / "maze_lab_run.json").write_text("[1, 2]"),
                              "maze_lab_run.json holds a JSON list"),
    "invalid config": (lambda run: (run / "config.yaml").write_text("env: [unclosed\n  wrappers: {"),
                       "config.yaml is not a valid configuration"),
    "config not a mapping": (lambda run: (run / "config.yaml").write_text("- just\n- a list\n"),
                             "config.yaml holds a YAML list"),
    "config with aliases": (lambda run: (run / "config.yaml").write_text("a: &x [1, 2]\nb: [*x, *x]\n"),
                            "config.yaml uses YAML aliases"),
    "garbage stats.arrows": (lambda run: (run / "stats.arrows").write_bytes(b"not arrow at all" * 10),
                             "stats.arrows is not a maze-lab statistics file"),
}


def test_damaged_runs_are_listed_as_damaged_with_the_reason(trained: Path, tmp_path: Path) -> None:
    base = tmp_path / "outputs"
    good = copy_of(trained, base / "good" / "run")
    for i, (damage, _) in enumerate(DAMAGES.values()):
        damage(copy_of(trained, base / "damaged" / f"run_{i}"))
    df = list_runs(base)
    assert len(df) == 1 + len(DAMAGES)
    rows = {Path(r).name: row for r, row in zip(df.run_dir, df.to_dict("records"), strict=True)}
    assert rows["run"]["status"] == "done" and pd.isna(rows["run"]["reason"])
    assert rows["run"]["algorithm"] == "PPOAlgorithmConfig" and rows["run"]["env"] == "CartPole-v1"
    for i, (_, reason) in enumerate(DAMAGES.values()):
        row = rows[f"run_{i}"]
        assert row["status"] == "damaged" and reason in row["reason"], row

    proc = run_maze_lab("runs", "--base", str(base), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"{len(DAMAGES)} damaged run directories:" in proc.stdout
    for _, reason in DAMAGES.values():
        assert reason in proc.stdout
    assert str(good) in proc.stdout


def test_a_damaged_run_is_refused_in_one_line(trained: Path, tmp_path: Path) -> None:
    run = copy_of(trained, tmp_path / "run")
    (run / "config.yaml").write_text("env: [unclosed")
    with pytest.raises(DamagedRunError, match="config.yaml is not a valid configuration"):
        load_run(run).policy()
    proc = run_maze_lab("rollout", str(run), "--no-record", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "config.yaml is not a valid configuration" in proc.stderr
    (run / "maze_lab_run.json").write_text("")
    with pytest.raises(DamagedRunError, match="maze_lab_run.json is empty"):
        load_run(run).summary  # noqa: B018


# ---- an existing run as run_dir ---------------------------------------------------------------------------------
def _fingerprint(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def test_an_existing_run_is_not_overwritten(trained: Path, tmp_path: Path) -> None:
    run = copy_of(trained, tmp_path / "run")
    before = _fingerprint(run)
    with pytest.raises(ExistingRunError) as info:
        RunContext(overrides={**TINY, "log_base_dir": str(tmp_path)}, run_dir=run, silent=True)
    message = str(info.value)
    assert f"run_dir {run} already holds a run (status done)" in message
    assert "overrides={'input_dir'" in message and "overwrite=True" in message
    assert _fingerprint(run) == before


def test_an_existing_run_continues_when_resumed_in_place(trained: Path, tmp_path: Path) -> None:
    run = copy_of(trained, tmp_path / "run")
    epochs_before = sorted(set(load_run(run).stats.to_dataframe().epoch))
    rc = RunContext(overrides={**TINY, "input_dir": str(run), "log_base_dir": str(tmp_path)}, run_dir=run,
                    silent=True)
    rc.train()
    rc.close()
    loaded = load_run(run)
    assert loaded.summary["status"] == "done" and loaded.summary["epoch"] == 2
    assert sorted(set(loaded.stats.to_dataframe().epoch)) == [*epochs_before, 2]  # the earlier epochs are kept


def test_an_existing_run_is_replaced_with_overwrite(trained: Path, tmp_path: Path) -> None:
    run = copy_of(trained, tmp_path / "run")
    (run / "trajectories").mkdir()
    (run / "notes.txt").write_text("mine")
    RunDirectory(run).write_summary(stale_field="from the earlier run")
    rc = RunContext(overrides={**TINY, "log_base_dir": str(tmp_path), "seed": 9}, run_dir=run, overwrite=True,
                    silent=True)
    assert rc.run_dir == run  # the run directory is taken on first use
    assert not (run / "trajectories").exists() and not (run / "checkpoints").exists()
    rc.train()
    rc.close()
    summary = load_run(run).summary
    assert summary["seed"] == 9 and summary["status"] == "done" and "stale_field" not in summary
    assert (run / "notes.txt").read_text() == "mine"  # only maze-lab's own files were replaced


def test_a_directory_prepared_for_a_notebook_run_is_not_an_existing_run(tmp_path: Path) -> None:
    run = tmp_path / "prepared"
    run.mkdir()
    RunDirectory(run).write_summary(status="created", notebook="train.ipynb")  # what `maze-lab run` prepares
    rc = RunContext(overrides={**TINY, "log_base_dir": str(tmp_path)}, run_dir=run, silent=True)
    assert rc.run_dir == run
    assert load_run(run).summary["notebook"] == "train.ipynb"


# ---- builds that fail --------------------------------------------------------------------------------------------
def _only_run_dir(base: Path) -> Path:
    found = [p.parent for p in base.glob("**/maze_lab_run.json")]
    assert len(found) == 1, found
    return found[0]


def test_train_with_a_corrupt_checkpoint_fails_in_one_line(trained: Path, tmp_path: Path) -> None:
    source = copy_of(trained, tmp_path / "source")
    _truncate(source / "checkpoints" / "state_dict_last.pt")
    outputs = tmp_path / "outputs"
    args = ["train", f"input_dir={source}", f"log_base_dir={outputs}", *(f"{k}={v}" for k, v in TINY.items())]
    proc = run_maze_lab(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("maze-lab train: error: ")
    assert "state_dict_last.pt is truncated or corrupt" in lines[0] and "marked failed" in lines[0]
    assert "--debug shows the traceback" in lines[0] and "Traceback" not in proc.stderr
    run_dir = _only_run_dir(outputs)
    summary = json.loads((run_dir / "maze_lab_run.json").read_text())
    assert summary["status"] == "failed" and "truncated or corrupt" in summary["error"]

    debug = run_maze_lab(*args, "--debug", cwd=tmp_path)
    assert debug.returncode == 2 and "Traceback" in debug.stderr and "CheckpointError" in debug.stderr


BROKEN_ENV = '''
def make_env(**kwargs):
    raise RuntimeError("the env of this project is broken on purpose")
'''


def test_train_whose_env_raises_fails_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "broken_env_project.py").write_text(BROKEN_ENV)
    outputs = tmp_path / "outputs"
    proc = run_maze_lab("train", "env._target_=broken_env_project.make_env", f"log_base_dir={outputs}",
                    *(f"{k}={v}" for k, v in TINY.items()), cwd=tmp_path, pythonpath=tmp_path)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "the env of this project is broken on purpose" in lines[0]
    assert "Traceback" not in proc.stderr
    summary = json.loads((_only_run_dir(outputs) / "maze_lab_run.json").read_text())
    assert summary["status"] == "failed" and "broken on purpose" in summary["reason"]


def test_a_failed_build_marks_the_run_failed_in_python_too(tmp_path: Path) -> None:
    def broken() -> None:
        raise RuntimeError("cannot make the env")

    rc = RunContext(env=broken, overrides={**TINY, "log_base_dir": str(tmp_path)}, silent=True)
    with pytest.raises(RuntimeError, match="cannot make the env"):
        rc.trainer  # noqa: B018
    summary = load_run(rc.run_dir).summary
    assert summary["status"] == "failed" and "cannot make the env" in summary["error"]


# ---- negative epoch counts ---------------------------------------------------------------------------------------
def test_negative_n_epochs_are_refused(tmp_path: Path) -> None:
    rc = RunContext(overrides={**TINY, "log_base_dir": str(tmp_path)}, silent=True)
    for call in (rc.train, rc.train_async, rc.training_plan):
        with pytest.raises(ConfigurationError, match="n_epochs must be >= 0 .* got -1"):
            call(-1)
    with pytest.raises(ConfigurationError, match="n_epochs must be an int >= 0"):
        rc.train(1.5)
    assert not (tmp_path / "default").exists()  # refused before a run directory was made
    with pytest.raises(ConfigurationError, match=r"algorithm\.n_epochs must be >= 0 \(0 or null: until early "
                                                 r"stopping\), got -2"):
        RunContext(overrides={"algorithm.n_epochs": -2}, silent=True)
    with pytest.raises(ConfigurationError, match=r"^n_epochs must be >= 0"):
        RunContext(overrides={"n_epochs": -3}, silent=True)
    proc = run_maze_lab("train", "algorithm.n_epochs=-2", cwd=tmp_path)
    assert proc.returncode == 2 and "algorithm.n_epochs must be >= 0" in proc.stderr
    assert proc.stderr.count("\n") == 1


# ---- checkpoints of a loaded run --------------------------------------------------------------------------------
def test_a_bad_checkpoint_of_a_loaded_run_gives_maze_labs_message(trained: Path, tmp_path: Path) -> None:
    import torch

    from maze_lab.train.trainers.common.checkpoints import CheckpointError

    run = copy_of(trained, tmp_path / "run")
    _truncate(run / "checkpoints" / "state_dict_best.pt")
    with pytest.raises(CheckpointError, match="state_dict_best.pt is truncated or corrupt and was not loaded"):
        load_run(run).policy("best")
    torch.save({"model": {}, "payload": threading.Lock}, run / "checkpoints" / "state_dict_last.pt")
    with pytest.raises(CheckpointError, match="contains code-bearing Python objects"):
        load_run(run).policy("last")
    proc = run_maze_lab("rollout", str(run), "--which", "last", "--no-record", cwd=tmp_path)
    assert proc.returncode == 2 and "contains code-bearing Python objects" in proc.stderr
    assert proc.stderr.count("\n") == 1
    torch.save({"model": {"nothing": torch.zeros(1)}}, run / "checkpoints" / "state_dict_last.pt")
    with pytest.raises(CheckpointError, match="state_dict_last.pt does not fit the model that .*config.yaml describes"):
        load_run(run).policy("last")
    # weights of another env's run: one line naming the policy key, the parameter and both shapes
    state = torch.load(trained / "checkpoints" / "state_dict_last.pt", weights_only=True)
    first = next(iter(state["model"]))
    name = next(iter(state["model"][first]))
    state["model"][first][name] = torch.zeros(*[d + 1 for d in state["model"][first][name].shape])
    torch.save(state, run / "checkpoints" / "state_dict_last.pt")
    with pytest.raises(CheckpointError) as err:
        load_run(run).policy("last")
    assert f"parameter {name} has shape" in str(err.value) and "do not belong together" in str(err.value)
    assert "\n" not in str(err.value)


# ---- background runs: failures and stops at the start ----------------------------------------------------------
def test_a_background_run_that_fails_at_once_reports_it(tmp_path: Path) -> None:
    def broken() -> None:
        raise RuntimeError("no env today")

    handle = RunContext(env=broken, overrides={**TINY, "log_base_dir": str(tmp_path)}, silent=True).train_async()
    with pytest.raises(RunFailedError, match="no env today"):
        handle.wait()
    assert handle.status == "failed" and not handle.running
    assert "no env today" in handle.traceback
    summary = load_run(handle.run_dir).summary
    assert summary["status"] == "failed" and "no env today" in summary["error"]


def _gated_env(gate: threading.Event, fail: bool):
    def factory():
        assert gate.wait(300), "the test never opened the gate"
        if fail:
            raise RuntimeError("failed while the stop was on its way")
        return make_gym_maze_env("CartPole-v1")
    return factory


def test_stop_while_the_run_is_built_returns_at_once_and_is_honoured(tmp_path: Path) -> None:
    gate = threading.Event()
    rc = RunContext(env=_gated_env(gate, fail=False), overrides={**TINY, "log_base_dir": str(tmp_path)}, silent=True)
    handle = rc.train_async(5)
    stopped = threading.Event()
    stopper = threading.Thread(target=lambda: (handle.stop(timeout=0), stopped.set()))
    stopper.start()
    try:
        # stop() does not wait for the build to finish (the env factory waits for the gate until the assertion)
        assert stopped.wait(120), "stop() waited for the run to be built"
        assert handle.status == "stopping" and handle.running
    finally:
        gate.set()
        stopper.join()
    assert handle.wait() == "stopped"
    assert rc.trainer.epoch == 0 and rc.trainer.stop_reason == "stopped"
    assert load_run(handle.run_dir).summary["status"] == "stopped"
    rc.close()


def test_a_stop_that_meets_a_failure_leaves_the_run_failed(tmp_path: Path) -> None:
    gate = threading.Event()
    rc = RunContext(env=_gated_env(gate, fail=True), overrides={**TINY, "log_base_dir": str(tmp_path)}, silent=True)
    handle = rc.train_async(5)
    stopper = threading.Thread(target=handle.stop, kwargs={"timeout": None})
    stopper.start()
    gate.set()
    stopper.join()
    with pytest.raises(RunFailedError, match="failed while the stop was on its way"):
        handle.wait()
    assert handle.status == "failed"
    handle.stop()  # a stop after the end changes nothing
    assert handle.status == "failed"
    with pytest.raises(RunFailedError):
        handle.wait()
