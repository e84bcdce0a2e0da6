"""The worker protocol with real workers. Local processes (maze_lab.distributed.processes): answers and the
worker's traceback for a command that raised, a worker killed with SIGKILL named with its pid and signal, a worker that
exits with a code, a quiet end when the driver goes away, and a bounded shutdown of a worker that ignores the close.
Ray actors (maze_lab.distributed.ray_workers) running the very same worker (build, commands, close) on a local Ray:
answers in order, one-way messages, the worker's traceback, a killed actor named and restarted, a bounded shutdown."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from maze_lab.distributed import ray_workers as rw
from maze_lab.distributed.processes import (
    NO_REPLY,
    WorkerDied,
    WorkerError,
    WorkerProcess,
    WorkerRaised,
    run_worker,
    serve,
    shutdown_workers,
)

# the Ray workers do not have tests/ on their path: the functions of this module travel by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

CTX = mp.get_context("spawn")
DEADLINE = 60.0
"""Seconds a condition gets to come true (the machine may be loaded); no assertion is tighter than this."""


def _until(condition: Callable[[], bool], timeout: float = DEADLINE) -> bool:
    """Whether ``condition`` came true within ``timeout`` seconds (polled)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


# ---- a worker: a dict of settings as its payload --------------------------------------------------------------


def _explode(data: Any) -> Any:
    raise ValueError(f"exploded on purpose with {data!r}")


def _build(settings: dict[str, Any]) -> dict[str, Any]:
    if settings.get("fail_build"):
        raise RuntimeError("cannot build this worker")
    if settings.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return {"settings": settings, "count": 0}


def _command(state: dict[str, Any], cmd: str, data: Any) -> Any:
    if cmd == "echo":
        state["count"] += 1
        return data
    if cmd == "count":
        return state["count"]
    if cmd == "note":  # one-way
        state["count"] += 1
        return NO_REPLY
    if cmd == "explode":
        return _explode(data)
    if cmd == "exit":
        os._exit(int(data))
    if cmd == "hang":  # never reads the close
        while True:
            time.sleep(0.1)
    raise ValueError(f"unknown command {cmd!r}")


def _close(state: dict[str, Any]) -> None:
    marker = state["settings"].get("closed_marker")
    if marker:
        Path(marker).write_text(f"closed after {state['count']} commands")


def _worker_main(conn: Any, payload: bytes) -> None:
    serve(conn, lambda: _build(cloudpickle.loads(payload)), _command, close=_close, ready=lambda _: os.getpid())


def _start(index: int = 0, **settings: Any) -> WorkerProcess:
    return WorkerProcess.start(CTX, f"test worker {index}", _worker_main, cloudpickle.dumps(settings),
                               process_name=f"maze-lab-test-worker-{index}")


@pytest.fixture
def workers() -> Any:
    """The workers a test starts (append them); all are shut down at its end, whatever happened."""
    started: list[WorkerProcess] = []
    yield started
    shutdown_workers(started, timeout=5.0)


# ---- tests ----------------------------------------------------------------------------------------------------


def test_a_worker_answers_and_closes_politely(workers: list, tmp_path: Path) -> None:
    marker = tmp_path / "closed.txt"
    worker = _start(closed_marker=str(marker))
    workers.append(worker)
    assert worker.receive() == worker.pid  # the ready answer
    assert worker.request("echo", [1, 2]) == [1, 2]
    worker.send(("note", None))  # not answered
    assert worker.request("count") == 2
    shutdown_workers([worker], timeout=DEADLINE)
    assert not worker.process.is_alive() and worker.process.exitcode == 0
    assert marker.read_text() == "closed after 2 commands"  # the close hook ran before the worker exited


def test_a_command_that_raises_sends_the_workers_traceback_and_the_worker_serves_on(workers: list) -> None:
    worker = _start()
    workers.append(worker)
    worker.receive()
    with pytest.raises(WorkerRaised) as raised:
        worker.request("explode", 42)
    trace = raised.value.trace
    assert "Traceback (most recent call last)" in trace and "in _explode" in trace
    assert "ValueError: exploded on purpose with 42" in trace
    assert isinstance(raised.value, WorkerError) and raised.value.worker is worker
    assert f"test worker 0 (pid {worker.pid}) raised" in str(raised.value)
    assert worker.request("echo", "still here") == "still here"  # the driver decides what a failure means


def test_a_build_that_raises_is_reported_with_its_traceback(workers: list) -> None:
    worker = _start(fail_build=True)
    workers.append(worker)
    with pytest.raises(WorkerRaised, match=r"(?s)Traceback.*RuntimeError: cannot build this worker"):
        worker.receive()
    assert _until(lambda: not worker.process.is_alive()) and worker.process.exitcode == 0


def test_a_worker_killed_with_sigkill_is_named_with_its_pid_and_signal(workers: list) -> None:
    worker = _start(index=3)
    workers.append(worker)
    worker.receive()
    pid = worker.pid
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerDied) as died:
        worker.request("echo", 1)  # the send may still succeed: then the receive finds the broken pipe
    assert died.value.how == "signal 9 (SIGKILL)"
    assert f"test worker 3 (pid {pid}) died: signal 9 (SIGKILL)" in str(died.value)
    assert died.value.worker is worker and isinstance(died.value, WorkerError)


def test_a_worker_that_exits_is_named_with_its_exit_code(workers: list) -> None:
    worker = _start()
    workers.append(worker)
    worker.receive()
    worker.send(("exit", 3))
    with pytest.raises(WorkerDied, match=rf"test worker 0 \(pid {worker.pid}\) died: exit code 3"):
        worker.receive()


def test_a_worker_ends_quietly_when_the_driver_goes_away(workers: list, tmp_path: Path,
                                                           capfd: pytest.CaptureFixture) -> None:
    marker = tmp_path / "closed.txt"
    worker = _start(closed_marker=str(marker))
    workers.append(worker)
    worker.receive()
    worker.conn.close()
    assert _until(lambda: not worker.process.is_alive()), "the worker must end once its pipe is closed"
    assert worker.process.exitcode == 0 and marker.exists()  # its close hook ran all the same
    assert "Traceback" not in capfd.readouterr().err


def test_a_worker_that_ignores_the_close_is_ended_in_bounded_time(workers: list) -> None:
    """Busy for ever and deaf to SIGTERM: the shutdown waits its timeout, terminates, then kills it."""
    stubborn = _start(index=0, ignore_sigterm=True)
    polite = _start(index=1)
    workers.extend([stubborn, polite])
    stubborn.receive()
    polite.receive()
    stubborn.send(("hang", None))
    started = time.monotonic()
    shutdown_workers([stubborn, polite], timeout=1.0)
    assert _until(lambda: not stubborn.process.is_alive() and not polite.process.is_alive())
    assert time.monotonic() - started < DEADLINE
    assert stubborn.process.exitcode == -signal.SIGKILL
    assert polite.process.exitcode == 0


def _reporter_main(conn: Any, payload: bytes) -> None:
    """A worker that only reports (a one-way pipe, as IMPALA's actors): sends its items, then fails."""

    def run(items: list[Any]) -> None:
        for item in items:
            conn.send(("item", item))
        raise KeyError("no more items")

    run_worker(conn, lambda: cloudpickle.loads(payload), run)


def test_a_reporting_worker_on_a_one_way_pipe_sends_its_error_and_ends() -> None:
    worker = WorkerProcess.start(CTX, "reporter", _reporter_main, cloudpickle.dumps([1, 2]), duplex=False)
    try:
        assert [worker.receive_reply() for _ in range(2)] == [("item", 1), ("item", 2)]
        with pytest.raises(WorkerRaised, match="KeyError: 'no more items'"):
            worker.receive()
        with pytest.raises(WorkerDied, match=r"reporter \(pid \d+\) died: exit code 0"):
            worker.receive()
    finally:
        shutdown_workers([worker], timeout=5.0, ask=False)
    assert not worker.process.is_alive()


# ---- the Ray transport: the same worker in a Ray actor ------------------------------------------------------------


def _gone(pid: int) -> bool:
    """Whether no process ``pid`` runs any more (a zombie not yet reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _ray_start(index: int = 0, **settings: Any) -> rw.RayWorker:
    """A Ray worker serving the build and commands the local workers above serve."""
    actor_class = rw.remote_worker_class("_TestWorker", 1, 0.5, 0, False, "the protocol tests")
    return rw.RayWorker.start(actor_class, f"test worker {index}", lambda: _build(settings), _command, close=_close,
                              ready=lambda _: os.getpid())


@pytest.fixture
def ray_workers(local_ray: Any) -> Any:
    """The Ray workers a test starts (append them); all are shut down at its end, whatever happened."""
    started: list[rw.RayWorker] = []
    yield started
    rw.shutdown_ray_workers(started, timeout=5.0)


def test_a_ray_worker_serves_the_same_worker_in_order_and_closes_politely(ray_workers: list, local_ray: Any,
                                                                            tmp_path: Path) -> None:
    marker = tmp_path / "closed.txt"
    first, second = _ray_start(0, closed_marker=str(marker)), _ray_start(1)
    ray_workers.extend([first, second])
    assert rw.gather([first, second]) == [first.pid, second.pid]  # the ready answers: each actor's pid
    assert first.built and first.pid != os.getpid() and not _gone(first.pid)
    assert first.request("echo", [1, 2]) == [1, 2]
    first.send(("note", None))  # not answered
    assert first.request("count") == 2
    # an object reference as data reaches the worker as its object: put once for all workers
    shared = local_ray.put(list(range(5)))
    assert rw.gather([first, second], [("echo", shared), ("echo", shared)]) == [list(range(5))] * 2
    pid = first.pid
    rw.shutdown_ray_workers([first], timeout=DEADLINE)
    assert marker.read_text() == "closed after 3 commands"  # the close hook ran before the actor was ended
    assert _until(lambda: _gone(pid))


def test_a_ray_workers_exception_carries_its_traceback_and_the_worker_serves_on(ray_workers: list) -> None:
    worker = _ray_start()
    ray_workers.append(worker)
    worker.receive()
    with pytest.raises(WorkerRaised) as raised:
        worker.request("explode", 42)
    trace = raised.value.trace
    assert "Traceback (most recent call last)" in trace and "in _explode" in trace
    assert "ValueError: exploded on purpose with 42" in trace
    assert raised.value.worker is worker and isinstance(raised.value, WorkerError)
    assert f"test worker 0 (pid {worker.pid}) raised" in str(raised.value)
    assert worker.request("echo", "still here") == "still here"


def test_a_ray_workers_build_that_raises_is_its_first_answer(ray_workers: list) -> None:
    worker = _ray_start(fail_build=True)
    ray_workers.append(worker)
    with pytest.raises(WorkerRaised, match=r"(?s)Traceback.*RuntimeError: cannot build this worker"):
        worker.receive()
    assert not worker.built and worker.pid is not None
    with pytest.raises(WorkerRaised, match="cannot serve 'echo': building it raised"):
        worker.request("echo", 1)


def test_a_killed_ray_worker_is_named_and_a_restart_builds_a_fresh_one(ray_workers: list) -> None:
    worker = _ray_start(index=3)
    ray_workers.append(worker)
    worker.receive()
    pid = worker.pid
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerDied) as died:
        worker.request("echo", 1)
    assert str(died.value).startswith(f"test worker 3 (pid {pid}) died: ")
    assert died.value.worker is worker and isinstance(died.value, WorkerError) and died.value.how
    worker.restart()
    assert worker.receive() == worker.pid != pid
    assert worker.restarts == 1 and worker.request("echo", "fresh") == "fresh"


def test_a_ray_worker_that_exits_is_named(ray_workers: list) -> None:
    worker = _ray_start()
    ray_workers.append(worker)
    worker.receive()
    with pytest.raises(WorkerDied, match=rf"test worker 0 \(pid {worker.pid}\) died: "):
        worker.request("exit", 3)


def test_a_busy_ray_worker_is_ended_in_bounded_time(ray_workers: list, tmp_path: Path) -> None:
    """Busy for ever: the shutdown waits its timeout for the close, then kills it; a polite worker closes."""
    marker = tmp_path / "closed.txt"
    stubborn, polite = _ray_start(0), _ray_start(1, closed_marker=str(marker))
    ray_workers.extend([stubborn, polite])
    rw.gather([stubborn, polite])
    stubborn.send(("hang", None))
    assert rw.ready_ray_workers([stubborn], timeout=0.1) == []  # its answer is not in
    started = time.monotonic()
    rw.shutdown_ray_workers([stubborn, polite], timeout=1.0)
    assert time.monotonic() - started < DEADLINE
    assert _until(lambda: _gone(stubborn.pid) and _gone(polite.pid))
    assert marker.read_text() == "closed after 0 commands"
