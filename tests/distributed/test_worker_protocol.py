"""The worker protocol with real workers.

Local processes started with their own main function (maze_lab.distributed.processes, as the vector env's and
IMPALA's workers are): a quiet end when the driver goes away, a bounded shutdown of a worker that ignores the close and
SIGTERM, a reporting worker on a one-way pipe.

Then one worker (build, commands, close, ready) on both transports through one interface
(maze_lab.distributed.transport: local processes and Ray actors on a local Ray), each test run on both: answers in
order, one-way messages, an object put once for all workers, the worker's traceback with the worker serving on, a
build that raises as the first answer, a killed worker named and restarted as a fresh one, a worker that exits named,
a busy worker ended in bounded time while a polite one closes, and jobs handed to whichever worker is free."""

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
from maze_lab.distributed.transport import ProcessTransport, RayTransport, map_jobs

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


# ---- both transports: the same worker through one interface ------------------------------------------------------


def _gone(pid: int) -> bool:
    """Whether no process ``pid`` runs any more (a zombie not yet reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


class Pool:
    """A transport and the workers a test started on it (all shut down at the test's end)."""

    def __init__(self, transport: Any):
        self.transport = transport
        self.workers: list[Any] = []

    @property
    def ray(self) -> bool:
        return self.transport.name == "ray"

    def start(self, index: int = 0, **settings: Any) -> Any:
        worker = self.transport.start(f"test worker {index}", lambda: _build(settings), _command, close=_close,
                                      ready=lambda _: os.getpid())
        self.workers.append(worker)
        return worker


@pytest.fixture(params=["processes", "ray"])
def pool(request: pytest.FixtureRequest) -> Any:
    """A pool of test workers on each transport in turn."""
    if request.param == "ray":
        request.getfixturevalue("local_ray")
        transport: Any = RayTransport("_TestWorker", 1, 0.5, 0, False, "the protocol tests", close_timeout=5.0)
    else:
        transport = ProcessTransport(process_name="maze-lab-test-worker", close_timeout=5.0)
    started = Pool(transport)
    yield started
    transport.shutdown(started.workers, timeout=5.0)


def test_a_worker_serves_in_order_and_closes_politely(pool: Pool, tmp_path: Path) -> None:
    marker = tmp_path / "closed.txt"
    first, second = pool.start(0, closed_marker=str(marker)), pool.start(1)
    assert pool.transport.gather([first, second]) == [first.pid, second.pid]  # the ready answers: each one's pid
    assert first.pid != os.getpid() and first.pid != second.pid and not _gone(first.pid)
    assert first.request("echo", [1, 2]) == [1, 2]
    first.send(("note", None))  # not answered
    assert first.request("count") == 2
    assert pool.transport.gather([first, second], [("echo", "a"), ("echo", "b")]) == ["a", "b"]
    if pool.ray:  # an object reference as data reaches the worker as its object: put once for all workers
        import ray

        shared = ray.put(list(range(5)))
        assert pool.transport.gather([first, second], [("echo", shared)] * 2) == [list(range(5))] * 2
    pid = first.pid
    pool.transport.shutdown([first], timeout=DEADLINE)
    assert marker.read_text().startswith("closed after ")  # the close hook ran before the worker ended
    assert marker.read_text() == f"closed after {4 if pool.ray else 3} commands"
    assert _until(lambda: _gone(pid))


def test_a_commands_exception_carries_the_workers_traceback_and_the_worker_serves_on(pool: Pool) -> None:
    worker = pool.start()
    worker.receive()
    with pytest.raises(WorkerRaised) as raised:
        worker.request("explode", 42)
    trace = raised.value.trace
    assert "Traceback (most recent call last)" in trace and "in _explode" in trace
    assert "ValueError: exploded on purpose with 42" in trace
    assert raised.value.worker is worker and isinstance(raised.value, WorkerError)
    assert f"test worker 0 (pid {worker.pid}) raised" in str(raised.value)
    assert worker.request("echo", "still here") == "still here"  # the driver decides what a failure means


def test_a_build_that_raises_is_the_first_answer(pool: Pool) -> None:
    worker = pool.start(fail_build=True)
    with pytest.raises(WorkerRaised, match=r"(?s)Traceback.*RuntimeError: cannot build this worker"):
        worker.receive()
    assert worker.pid is not None
    if pool.ray:  # the actor stays, and says why it cannot serve
        with pytest.raises(WorkerRaised, match="cannot serve 'echo': building it raised"):
            worker.request("echo", 1)
    else:  # the process ends after its report
        assert _until(lambda: not worker.process.is_alive()) and worker.process.exitcode == 0


def test_a_killed_worker_is_named_and_a_restart_builds_a_fresh_one(pool: Pool) -> None:
    worker = pool.start(index=3)
    worker.receive()
    pid = worker.pid
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerDied) as died:
        worker.request("echo", 1)  # the send may still succeed: then the receive finds the end
    assert str(died.value).startswith(f"test worker 3 (pid {pid}) died: ")
    assert died.value.worker is worker and isinstance(died.value, WorkerError) and died.value.how
    if not pool.ray:
        assert died.value.how == "signal 9 (SIGKILL)"
    worker.restart()
    assert worker.receive() == worker.pid != pid
    assert worker.restarts == 1 and worker.request("echo", "fresh") == "fresh"
    worker.restart(lambda: _build({"fail_build": True}))  # a restart with another build
    with pytest.raises(WorkerRaised, match="cannot build this worker"):
        worker.receive()
    assert worker.restarts == 2


def test_a_worker_that_exits_is_named(pool: Pool) -> None:
    worker = pool.start()
    worker.receive()
    with pytest.raises(WorkerDied, match=rf"test worker 0 \(pid {worker.pid}\) died: ") as died:
        worker.request("exit", 3)
    if not pool.ray:
        assert died.value.how == "exit code 3"


def test_a_busy_worker_is_ended_in_bounded_time(pool: Pool, tmp_path: Path) -> None:
    """Busy for ever: the shutdown waits its timeout for the close, then ends it; a polite worker closes."""
    marker = tmp_path / "closed.txt"
    stubborn, polite = pool.start(0), pool.start(1, closed_marker=str(marker))
    pool.transport.gather([stubborn, polite])
    stubborn.send(("hang", None))
    assert pool.transport.ready([stubborn], timeout=0.1) == []  # its answer is not in
    started = time.monotonic()
    pool.transport.shutdown([stubborn, polite], timeout=1.0)
    assert time.monotonic() - started < DEADLINE
    assert _until(lambda: _gone(stubborn.pid) and _gone(polite.pid))
    assert marker.read_text() == "closed after 0 commands"


def test_jobs_go_to_whichever_worker_is_free(pool: Pool) -> None:
    """Seven jobs on two workers, one in flight per worker: every answer in job order, both workers used, a
    progress call per answer; a job that raises is raised with its traceback."""
    workers = [pool.start(0), pool.start(1)]
    pids = pool.transport.gather(workers)
    seen: list[int] = []
    answers = map_jobs(pool.transport, workers, "echo", [f"job {i}" for i in range(7)],
                       on_answer=lambda i, _: seen.append(i))
    assert answers == [f"job {i}" for i in range(7)] and sorted(seen) == list(range(7))
    assert sorted(w.request("count") for w in workers) != [0, 7] and sum(w.request("count") for w in workers) == 7
    assert pids == [w.pid for w in workers]
    with pytest.raises(WorkerRaised, match="exploded on purpose with 'x'"):
        map_jobs(pool.transport, workers[:1], "explode", ["x"])
