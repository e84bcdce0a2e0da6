"""A run directory tells the truth about its run, and a live run takes requests from any process: a run whose
process was killed reads ``died``; ``maze-lab stop/pause/resume/checkpoint RUN_DIR`` reach a run started in another
process (a background thread of another Python process, a detached run); a detached run outlives the process that
started it; no temporary file outlives a write that was killed."""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import browser_utils
import pytest
from run_utils import maze_lab_command

from maze_lab.run.attach import attach, request_run, run_state
from maze_lab.run.run_dir import RunDirectory
from maze_lab.run.run_status import OWNER_FILE, STALE_S, RunControlError, owner_record, resolve_status
from maze_lab.run.runs import list_runs

LONG = {"algorithm.epoch_length": 2, "algorithm.n_rollout_steps": 16, "runner.concurrency": 1,
        "runner.eval_concurrency": 1, "algorithm.eval_repeats": 1, "algorithm.patience": 0}
"""A CartPole run that trains until it is stopped (epochs of a few dozen env steps, no early stopping)."""


wait_until = functools.partial(browser_utils.wait_until, timeout=120.0, interval=0.05)
"""Poll a condition against a deadline (tests/browser_utils.py), with this file's default timeout."""


def _status(run_dir: Path) -> str | None:
    try:
        return run_state(run_dir).get("status")
    except (OSError, ValueError):
        return None


def _epoch(run_dir: Path) -> int:
    try:
        return int(run_state(run_dir).get("epoch") or 0)
    except (OSError, ValueError):
        return 0


def _control(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*maze_lab_command(), *args], cwd=cwd, capture_output=True, text=True, timeout=180)


@pytest.fixture
def background_process(tmp_path: Path) -> Iterator[Callable[[], tuple[subprocess.Popen, Path]]]:
    """Start a Python process that trains a run in a background thread (``train_async``) and waits for it; yields
    a starter returning the process and the run directory."""
    started: list[subprocess.Popen] = []

    def start() -> tuple[subprocess.Popen, Path]:
        code = textwrap.dedent(f"""
            from maze_lab.run.run_context import RunContext
            rc = RunContext(overrides={{**{LONG!r}, "log_base_dir": {str(tmp_path / 'outputs')!r}}}, silent=True)
            handle = rc.train_async(100000)
            print(handle.run_dir, flush=True)
            print("ended:", handle.wait(), flush=True)
        """)
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=tmp_path)
        started.append(proc)
        run_dir = Path(proc.stdout.readline().strip())
        return proc, run_dir

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def test_a_killed_run_reads_died_within_seconds(background_process: Callable, tmp_path: Path) -> None:
    proc, run_dir = background_process()
    wait_until(lambda: _epoch(run_dir) >= 1, what="the first epoch")
    row = list_runs(tmp_path / "outputs").iloc[0]
    assert (row.status, row.live) == ("running", True)

    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    killed = time.monotonic()
    wait_until(lambda: list_runs(tmp_path / "outputs").iloc[0].status == "died", timeout=10, what="status died")
    assert time.monotonic() - killed < 10
    row = list_runs(tmp_path / "outputs").iloc[0]
    assert not row.live and "last seen" in row.reason and str(proc.pid) in row.reason
    # the summary itself still says running: only a reader that knows the owner is gone can tell
    assert RunDirectory(run_dir).read_summary()["status"] == "running"
    # asking a dead run for anything is one clear line, exit 1
    result = _control("stop", str(run_dir), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0 and "died" in result.stderr, result.stderr


def test_stop_pause_resume_and_checkpoint_from_another_process(background_process: Callable, tmp_path: Path) -> None:
    proc, run_dir = background_process()
    wait_until(lambda: _epoch(run_dir) >= 1, what="the first epoch")

    paused = _control("pause", str(run_dir), cwd=tmp_path)
    assert paused.returncode == 0, paused.stderr
    assert _status(run_dir) == "paused"
    epoch = _epoch(run_dir)
    # while paused no epoch completes: a checkpoint is still written on request (at once: the run holds)
    ckpt = RunDirectory(run_dir).last_checkpoint
    before = ckpt.stat().st_mtime_ns if ckpt.exists() else 0
    written = _control("checkpoint", str(run_dir), cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    assert ckpt.exists() and ckpt.stat().st_mtime_ns > before
    assert _epoch(run_dir) == epoch and _status(run_dir) == "paused"

    resumed = _control("resume", str(run_dir), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    wait_until(lambda: _epoch(run_dir) > epoch, what="training to go on after resume")

    stopped = _control("stop", str(run_dir), cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    state = run_state(run_dir)
    assert state["status"] == "stopped" and "checkpoint" in state["reason"]
    assert RunDirectory(run_dir).last_checkpoint.exists()
    out, _ = proc.communicate(timeout=60)
    assert "ended: stopped" in out  # the process that started the run sees it stopped too
    # a finished run: one line, exit 1
    again = _control("pause", str(run_dir), cwd=tmp_path)
    assert again.returncode == 1 and "has ended (status stopped)" in again.stderr


def test_a_detached_run_outlives_the_process_that_started_it(tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        from maze_lab.run.run_context import RunContext
        rc = RunContext(overrides={{**{LONG!r}, "log_base_dir": {str(tmp_path / 'outputs')!r}}}, silent=True)
        handle = rc.train_async(100000, detach=True)
        print(handle.run_dir, flush=True)
    """)
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    run_dir = Path(out.stdout.strip().splitlines()[-1])
    # the starting process has exited; the run trains on
    epoch = wait_until(lambda: _epoch(run_dir), what="the detached run's first epoch")
    wait_until(lambda: _epoch(run_dir) > epoch, what="the detached run to go on")
    state = run_state(run_dir)
    assert state["status"] == "running" and state["live"] and state["mode"] == "detached"
    owner = json.loads((run_dir / OWNER_FILE).read_text())
    assert owner["pid"] != os.getpid()
    assert time.monotonic() - started < 120

    handle = attach(run_dir)
    assert handle.running and handle.stats.epoch.max() >= 1
    stopped = _control("stop", str(run_dir), cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    assert handle.status == "stopped" and handle.latest_checkpoint is not None
    assert "stopping after the current update" not in (run_dir / "console.log").read_text()  # asked, not signalled
    wait_until(lambda: not _alive(owner["pid"]), timeout=30, what="the detached process to exit")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:  # noqa: PTH123
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_detached_run_takes_requests_made_before_it_is_up_and_sigterm_stops_it(tmp_path: Path) -> None:
    from maze_lab.run.run_context import RunContext

    rc = RunContext(overrides={**LONG, "log_base_dir": str(tmp_path / "outputs")}, silent=True)
    handle = rc.train_async(100000, detach=True)
    # asked at once, while the child is still importing torch: honoured once it trains
    handle.pause(timeout=120)
    assert handle.status == "paused"
    handle.resume(timeout=60)
    wait_until(lambda: _epoch(handle.run_dir) >= 1, what="the first epoch")
    pid = json.loads((handle.run_dir / OWNER_FILE).read_text())["pid"]
    os.kill(pid, signal.SIGTERM)  # e.g. a machine shutting down: stops as a stop request does
    wait_until(lambda: handle.status == "stopped", timeout=60, what="status stopped after SIGTERM")
    assert handle.latest_checkpoint is not None


def test_an_early_stopped_run_says_why(tmp_path: Path) -> None:
    from maze_lab.run.run_context import RunContext

    rc = RunContext(overrides={**LONG, "algorithm.patience": 1, "algorithm.eval_repeats": 1,
                               "log_base_dir": str(tmp_path)}, silent=True)
    rc.train(50)
    rc.close()
    state = run_state(rc.run_dir)
    if state["epoch"] >= 50:
        pytest.skip("the evaluation improved in every epoch: no early stop to look at")
    assert state["status"] == "early-stopped" and state["reason"] == "early stopping: no improvement for 1 epochs"
    assert list_runs(tmp_path).iloc[0].status == "early-stopped"


# ---- the rules behind `died`, without training ----------------------------------------------------------------------
def _run_dir(tmp_path: Path, status: str, owner: dict[str, Any] | None, name: str = "run") -> Path:
    run = RunDirectory(tmp_path / name)
    run.path.mkdir()
    run.write_summary(status=status, experiment="x")
    if owner is not None:
        (run.path / OWNER_FILE).write_text(json.dumps(owner))
    return run.path


def test_an_owner_on_another_machine_is_trusted_while_its_heartbeat_is_fresh(tmp_path: Path) -> None:
    owner = {**owner_record(), "host": "another-machine", "heartbeat": time.time()}
    run_dir = _run_dir(tmp_path, "running", owner)
    assert resolve_status(run_dir, {"status": "running"})["status"] == "running"
    (run_dir / OWNER_FILE).write_text(json.dumps({**owner, "heartbeat": time.time() - STALE_S - 5}))
    state = resolve_status(run_dir, {"status": "running"})
    assert state["status"] == "died" and not state["live"]


def test_a_reused_pid_is_not_taken_for_the_owner(tmp_path: Path) -> None:
    owner = owner_record()  # this very process ...
    assert resolve_status(_run_dir(tmp_path, "running", owner), {"status": "running"})["status"] == "running"
    stale = {**owner, "process_start": (owner["process_start"] or 0) - 1}  # ... but one that started earlier
    (tmp_path / "run" / OWNER_FILE).write_text(json.dumps(stale))
    if owner["process_start"] is None:
        pytest.skip("no /proc: process start times are not known here")
    assert resolve_status(tmp_path / "run", {"status": "running"})["status"] == "died"


def test_a_fifo_as_owner_file_does_not_hang_a_reader(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, "running", None)
    os.mkfifo(run_dir / OWNER_FILE)
    started = time.monotonic()
    assert list_runs(tmp_path).iloc[0].status == "running"  # nothing known about an owner: the summary's word
    assert time.monotonic() - started < 10


def test_a_request_to_a_run_nobody_trains_is_refused_in_one_line(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, "created", None)
    with pytest.raises(RunControlError, match="not training"):
        request_run(run_dir, "stop", timeout=1)
    done = _run_dir(tmp_path, "done", None, name="finished")
    with pytest.raises(RunControlError, match=r"has ended \(status done\)"):
        request_run(done, "pause", timeout=1)
    bad = _control("stop", str(tmp_path / "nothing-here"), cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "not a directory" in bad.stderr


def test_a_write_killed_midway_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "state_dict_last.pt"
    target.write_bytes(b"old")
    code = textwrap.dedent(f"""
        import os, signal
        from maze_lab.core.utils import atomic
        real = os.write
        def write_then_die(fd, data):
            real(fd, bytes(data[:10]))
            os.kill(os.getpid(), signal.SIGKILL)
        atomic.os.write = write_then_die
        atomic.write_atomic({str(target)!r}, b"x" * 1_000_000)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert result.returncode == -signal.SIGKILL
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state_dict_last.pt"]


def test_the_owner_record_names_this_machine() -> None:
    record = owner_record()
    assert record["host"] == socket.gethostname() and record["pid"] == os.getpid()


@pytest.mark.parametrize("signals", [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM,)], ids=["double-ctrl-c", "term"])
def test_maze_lab_train_interrupted_records_interrupted(tmp_path: Path, signals: tuple[int, ...]) -> None:
    overrides = [f"{k}={v}" for k, v in LONG.items()]
    proc = subprocess.Popen([*maze_lab_command(), "train", "--silent", f"log_base_dir={tmp_path}",
                             "algorithm.n_epochs=100000", *overrides], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        run_dir = wait_until(lambda: next((p.parent for p in tmp_path.glob("*/*/maze_lab_run.json")), None),
                             what="the run directory")
        wait_until(lambda: _epoch(run_dir) >= 1, what="the first epoch")
        for sig in signals:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    state = run_state(run_dir)
    assert state["status"] == "interrupted" and "checkpoint" in state["reason"]
    assert RunDirectory(run_dir).last_checkpoint.exists()
    assert "Traceback" not in err
