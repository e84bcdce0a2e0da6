"""Batches, sweeps and searches end cleanly: Ctrl-C (SIGINT to the terminal's process group) or SIGTERM of
``maze-lab run NB -p seed 1,2,3 --jobs 2``, ``maze-lab sweep ... --jobs 2`` and ``maze-lab optimize ... --jobs 2``
starts nothing new, stops the runs in flight and records them ``interrupted`` with their checkpoints, says so in one
line and exits within seconds (130 for SIGINT, 143 for SIGTERM); an optimize driver killed outright leaves no trial
training on (its trials' runs read ``died``)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import browser_utils
import pytest
from run_utils import maze_lab_command

from maze_lab.run.run_dir import RunDirectory
from maze_lab.run.run_status import owner_alive, read_owner
from maze_lab.run.runs import list_runs

pytestmark = pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="the checks read processes from /proc")

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "train.ipynb"
LONG = {"algorithm.epoch_length": 1, "algorithm.n_rollout_steps": 16, "runner.concurrency": 1,
        "runner.eval_concurrency": 1, "algorithm.eval_repeats": 1, "algorithm.patience": 0, "n_epochs": 100000}
"""Runs that train until they are stopped, in epochs of one short update."""
EXIT_WITHIN_S = 30.0
"""How soon after the signal the command must have exited: at once rather than after its runs (which would train
for 100,000 epochs), with room for a loaded machine (ending kernels and worker processes takes a few seconds
there)."""


wait_until = functools.partial(browser_utils.wait_until, timeout=180.0, interval=0.1)
"""Poll a condition against a deadline (tests/browser_utils.py), with this file's default timeout."""


def _runs(base: Path) -> Any:
    try:
        return list_runs(base)
    except (OSError, ValueError):  # a summary being replaced as it is read
        return None


def _training(base: Path, n: int) -> bool:
    """Whether ``n`` runs under ``base`` are running and have finished an epoch."""
    df = _runs(base)
    return df is not None and not df.empty and int(((df.status == "running") & (df.epoch.fillna(0) >= 1)).sum()) >= n


def _processes_in(cwd: Path) -> list[int]:
    """The processes whose working directory is ``cwd`` (the command's workers and kernels, which inherit it)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(os.readlink(f"/proc/{entry}/cwd")) == cwd:
                    found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.fixture
def command(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen]]:
    """Start ``maze-lab ...`` in ``tmp_path/work`` in a session of its own (its process group is the terminal's
    foreground job: a Ctrl-C there signals the whole group); whatever is left is killed at the end."""
    started: list[subprocess.Popen] = []
    workdir = tmp_path / "work"
    workdir.mkdir()

    def start(*args: str) -> subprocess.Popen:
        proc = subprocess.Popen([*maze_lab_command(), *args], cwd=workdir, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        with contextlib.suppress(OSError):  # the group outlives its leader where workers are left in it
            os.killpg(proc.pid, signal.SIGKILL)
    for pid in _processes_in(workdir):  # a worker or kernel that outlived a failed test
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for proc in started:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=30)


def _interrupt(proc: subprocess.Popen, sig: int, group: bool) -> tuple[str, float]:
    """Send ``sig`` (to the process group, as a terminal's Ctrl-C does, or to the command alone, as a supervisor's
    SIGTERM does); returns stderr and how long the command took to exit."""
    sent = time.monotonic()
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=3 * EXIT_WITHIN_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running {3 * EXIT_WITHIN_S:g} s after the signal "
                             f"(exit code {proc.poll()})") from None
    return err, time.monotonic() - sent


def _check_interrupted(base: Path, workdir: Path, n_runs: int, err: str, took: float, code: int,
                       expected_code: int, what: str) -> Any:
    """The command exited at once with one line; exactly ``n_runs`` runs were made and each is recorded
    ``interrupted`` with its checkpoint; no process of the command is left."""
    assert took < EXIT_WITHIN_S, f"exited {took:.1f} s after the signal\n{err}"
    assert code == expected_code, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) <= 2 and "Traceback" not in err, err
    assert f"{n_runs} {what} in flight stopped, {n_runs} run(s) recorded interrupted ({n_runs} with a checkpoint), " \
           f"1 not started" in lines[-1], err
    wait_until(lambda: not _processes_in(workdir), timeout=10, what="the workers and kernels to be gone")
    df = list_runs(base)
    assert len(df) == n_runs, df[["status", "run_dir"]]  # nothing started after the signal
    assert list(df.status) == ["interrupted"] * n_runs, df[["status", "reason"]]
    for run_dir, epoch, reason in zip(df.run_dir, df.epoch, df.reason, strict=True):
        assert "interrupted" in reason and "checkpoint" in reason, reason
        assert epoch >= 1 and RunDirectory(run_dir).last_checkpoint.exists()
        owner = read_owner(run_dir)  # the kernel or worker that trained it is gone
        assert owner is None or "ended" in owner or not owner_alive(owner)
    return df


def test_ctrl_c_of_a_notebook_batch_stops_the_executions_in_flight(command: Callable, tmp_path: Path) -> None:
    pytest.importorskip("papermill")
    pytest.importorskip("ipykernel")
    base = tmp_path / "outputs"
    overrides = "{" + ", ".join(f"{k}: {v}" for k, v in LONG.items() if k != "n_epochs") + "}"
    proc = command("run", str(NOTEBOOK), "-p", "seed", "1,2,3", "--jobs", "2", "--log-base-dir", str(base),
                   "-p", "n_epochs", "100000", "-p", "epoch_length", "1", "-p", "overrides", overrides)
    wait_until(lambda: _training(base, 2) or proc.poll() is not None, what="both first executions training")
    assert proc.poll() is None, proc.communicate(timeout=30)
    err, took = _interrupt(proc, signal.SIGINT, group=True)
    df = _check_interrupted(base, tmp_path / "work", 2, err, took, proc.returncode, 130, "execution(s)")
    assert sorted(RunDirectory(p).read_summary()["batch_index"] for p in df.run_dir) == [0, 1]
    assert "batch:train-" in err  # where to list the batch


def test_sigterm_of_a_sweep_stops_the_runs_in_flight(command: Callable, tmp_path: Path) -> None:
    base = tmp_path / "outputs"
    proc = command("sweep", "seed=1,2,3", *(f"{k}={v}" for k, v in LONG.items()), f"log_base_dir={base}",
                   "--jobs", "2")
    wait_until(lambda: _training(base, 2) or proc.poll() is not None, what="both first runs training")
    assert proc.poll() is None, proc.communicate(timeout=30)
    err, took = _interrupt(proc, signal.SIGTERM, group=False)
    df = _check_interrupted(base, tmp_path / "work", 2, err, took, proc.returncode, 143, "run(s)")
    assert all("SIGTERM" in reason for reason in df.reason)


def _optimize(command: Callable, base: Path) -> subprocess.Popen:
    return command("optimize", "--space", "ppo_cartpole", *(f"{k}={v}" for k, v in LONG.items()),
                   f"log_base_dir={base}", "--trials", "3", "--jobs", "2")


def test_ctrl_c_of_an_optimize_stops_its_trials(command: Callable, tmp_path: Path) -> None:
    optuna = pytest.importorskip("optuna")
    base = tmp_path / "outputs"
    proc = _optimize(command, base)
    wait_until(lambda: _training(base, 2) or proc.poll() is not None, what="both first trials training")
    assert proc.poll() is None, proc.communicate(timeout=30)
    err, took = _interrupt(proc, signal.SIGINT, group=True)
    _check_interrupted(base, tmp_path / "work", 2, err, took, proc.returncode, 130, "trial(s)")
    study_dir = base / "cartpole_ppo" / "optimize-ppo_cartpole"
    study = optuna.load_study(study_name="optimize-ppo_cartpole", storage=f"sqlite:///{study_dir / 'study.db'}")
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "FAIL"] and all(t.user_attrs["interrupted"] for t in trials)
    for t in trials:
        assert RunDirectory(study_dir / f"trial_{t.number:04d}").read_summary()["optuna"]["state"] == "fail"


def test_the_trials_of_a_killed_optimize_read_died(command: Callable, tmp_path: Path) -> None:
    """A driver killed outright records nothing; its worker processes end with it (none trains on unseen, unable
    to report to the study), so its trials' runs read died."""
    base = tmp_path / "outputs"
    proc = _optimize(command, base)
    wait_until(lambda: _training(base, 2) or proc.poll() is not None, what="both first trials training")
    assert proc.poll() is None, proc.communicate(timeout=30)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    def died() -> Any:
        df = _runs(base)
        return df is not None and not df.empty and set(df.status) == {"died"} and len(df)

    assert wait_until(died, timeout=EXIT_WITHIN_S, what="the trials' runs to read died") == 2
    assert not list_runs(base).live.any()
    wait_until(lambda: not _processes_in(tmp_path / "work"), timeout=10, what="the workers to be gone")
    _, err = proc.communicate(timeout=30)  # the workers ended silently (no failed report to the gone driver)
    assert "Traceback" not in err, err


def test_an_interrupted_driver_starts_nothing_queued_and_ends_its_workers_at_once(tmp_path: Path) -> None:
    """Two of three jobs in flight in worker processes: a KeyboardInterrupt of the driver ends both workers at once
    and the third job never starts (nothing waits queued inside a worker)."""
    import _thread
    import threading

    from maze_lab.run.ray_tasks import RunsInterrupted, run_in_processes

    # a job that would run for an hour: its worker can only be gone in time because it was ended
    code = "import os, pathlib, time; pathlib.Path({!r}).write_text(str(os.getpid())); time.sleep(3600)"
    markers = [tmp_path / f"job{i}" for i in range(3)]

    def interrupt_once_both_started() -> None:
        wait_until(lambda: markers[0].exists() and markers[1].exists(), what="both workers to start their job")
        _thread.interrupt_main()

    threading.Thread(target=interrupt_once_both_started, daemon=True).start()
    with pytest.raises(RunsInterrupted) as caught:
        run_in_processes(exec, [(code.format(str(m)),) for m in markers], 2, what="test")
    assert (caught.value.in_flight, caught.value.not_started, caught.value.interrupted) == (2, 1, [])
    assert isinstance(caught.value, KeyboardInterrupt) and caught.value.cause == "Ctrl-C"
    pids = [int(m.read_text()) for m in markers[:2]]
    # a condition, not a stopwatch: on a loaded machine the kill and the reaping may take a while
    wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids), timeout=120, what="the workers gone")
    assert not markers[2].exists()


def test_runs_that_do_not_stop_are_killed_and_recorded_interrupted(tmp_path: Path) -> None:
    """A run whose process does not take the stop request within the grace period is ended and recorded
    interrupted; so is one that had not started training; one that has ended keeps its status."""
    import sys

    from maze_lab.run.ray_tasks import interrupt_runs
    from maze_lab.run.run_status import OWNER_FILE, owner_record

    stubborn = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        runs = {name: tmp_path / name for name in ("running", "created", "done")}
        for name, path in runs.items():
            path.mkdir()
            RunDirectory(path).write_summary(status=name)
        (runs["running"] / OWNER_FILE).write_text(json.dumps(owner_record(stubborn.pid)))
        killed: list[bool] = []

        def kill() -> None:
            stubborn.kill()
            stubborn.wait(10)
            killed.append(True)

        started = time.monotonic()
        marked = interrupt_runs(lambda: list(runs.values()), kill, "interrupted (test)", grace=0.5)
        # ended after its grace period, not waited for (it would sleep 120 s); generous for a loaded machine
        assert time.monotonic() - started < 60 and killed == [True]
    finally:
        if stubborn.poll() is None:
            stubborn.kill()
        stubborn.wait(10)
    assert sorted(marked) == sorted([runs["running"], runs["created"]])
    summaries = {name: RunDirectory(path).read_summary() for name, path in runs.items()}
    assert summaries["running"]["status"] == "interrupted"
    assert summaries["running"]["reason"] == ("interrupted (test); its process was ended; no epoch had finished")
    assert summaries["created"]["status"] == "interrupted" and "had not started training" in \
        summaries["created"]["reason"]
    assert summaries["done"]["status"] == "done"
    assert json.loads((runs["running"] / "control.json").read_text())["action"] == "stop"  # it was asked first
