"""Local worker processes: the local transport of maze-lab's worker protocol (:mod:`maze_lab.distributed.protocol`),
for the pools of worker processes (the subprocess vector env, the ES workers, the ``runner=processes`` rollout workers
and IMPALA's actors); :mod:`maze_lab.distributed.ray_workers` carries the same protocol over Ray.

A worker is a ``multiprocessing`` process started with a payload (cloudpickled by the caller: lambdas and notebook
functions work) and one pipe to the driver. On the worker's side :func:`serve` ignores SIGINT (the driver handles
interrupts and shuts its workers down), builds what the payload describes, answers ``("ok", value)`` once built and
then one ``("ok", value)`` or ``("error", traceback)`` per command until the driver sends ``close`` (answered with
``("closed", None)``) or goes away (then it exits quietly). On the driver's side :class:`WorkerProcess` sends the
commands and receives the answers; a worker that raised is raised as :class:`WorkerRaised` with its traceback, one
whose pipe broke as :class:`WorkerDied` naming the worker, its pid and how it ended (``signal 9 (SIGKILL)``,
``exit code 1``). :func:`shutdown_workers` ends several workers in bounded time: it asks them to close, reads what
they still send until they answer or their pipes end, then terminates and at last kills those still running.

The pools turn these errors into their own (subclasses of :class:`WorkerError`), with the words of their users.
The protocol's names are importable from here too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Any

import cloudpickle

from maze_lab.core.utils import pickling
from maze_lab.distributed.protocol import CLOSE, NO_REPLY, WorkerDied, WorkerError, WorkerRaised, died_message

__all__ = ["CLOSE", "NO_REPLY", "WorkerDied", "WorkerError", "WorkerProcess", "WorkerRaised", "died_message",
           "end_process", "how_it_ended", "ready_workers", "run_worker", "serve", "shutdown_workers"]
"""The protocol's names (:mod:`maze_lab.distributed.protocol`) and the local transport's."""

_NOT_BUILT: Any = object()


def how_it_ended(proc: Any, timeout: float = 5.0) -> str | None:
    """How a worker process whose pipe broke ended: ``signal 9 (SIGKILL)`` or ``exit code 1`` (None: still running
    after ``timeout`` seconds). The pipe breaks as the process ends; the join gives its exit status time to arrive."""
    proc.join(timeout=timeout)
    code = proc.exitcode
    if code is None:
        return None
    if code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def end_process(proc: Any, wait: float = 0.0) -> None:
    """End a worker process: wait up to ``wait`` seconds for it to exit by itself, then SIGTERM, then SIGKILL (each
    with a short join, so that no zombie is left and the caller never hangs on a stuck worker)."""
    if wait > 0:
        proc.join(timeout=wait)
    if proc.is_alive():
        proc.terminate()
        proc.join(timeout=2.0)
    if proc.is_alive() and proc.pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=1.0)


# ---- the driver side ------------------------------------------------------------------------------------------


class WorkerProcess:
    """The driver's handle of one worker process: the process and the driver's end of its pipe.

    :param name: how errors name the worker (``ES worker 1``); they add its pid.
    :param process: the started process.
    :param conn: the driver's end of the pipe.
    :param detail: more words inside the parentheses after the pid (``actors [2, 3]``).
    :param cloudpickled: commands are sent cloudpickled (they may hold lambdas); :func:`serve` must be told too.
    """

    def __init__(self, name: str, process: Any, conn: Any, detail: str | None = None, cloudpickled: bool = False):
        self.name = name
        self.process = process
        self.conn = conn
        self.detail = detail
        self.cloudpickled = cloudpickled
        self.parts: tuple[Any, Any, Any, Any] | None = None
        """The worker's ``(build, handle, close, ready)`` where a transport started it (a restart rebuilds it)."""
        self.restarts = 0
        """How often the process was replaced by a fresh one."""
        self._origin: tuple[Any, ...] | None = None  # how start() started it: (ctx, main, payload, args, name, duplex)

    @classmethod
    def start(cls, ctx: Any, name: str, main: Callable[..., None], payload: Any, *args: Any,
              process_name: str | None = None, detail: str | None = None, cloudpickled: bool = False,
              duplex: bool = True) -> WorkerProcess:
        """Start ``main(conn, payload, *args)`` in a daemon process of the multiprocessing context ``ctx``.

        :param payload: what the worker builds itself from (bytes cloudpickled by the caller, typically).
        :param args: further arguments, passed as they are (shared-memory objects of ``ctx`` must be passed so).
        :param process_name: the process's name (``multiprocessing.active_children`` shows it).
        :param duplex: False: a one-way pipe, from the worker to the driver (a worker that only reports).
        """
        if duplex:
            parent, child = ctx.Pipe()
        else:
            parent, child = ctx.Pipe(duplex=False)  # (reader, writer)
        try:
            proc = ctx.Process(target=main, args=(child, payload, *args), name=process_name, daemon=True)
            proc.start()
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()  # the worker holds the only other end: its pipe ends with EOF when the worker does
        worker = cls(name, proc, parent, detail, cloudpickled)
        worker._origin = (ctx, main, payload, args, process_name, duplex)
        return worker

    def restart(self, build: Callable[[], Any] | None = None) -> None:
        """Replace the process (dead, typically) by a fresh one started the same way; with ``build`` (a worker a
        transport started), built by ``build`` instead. Its first answer is to be received as after :meth:`start`."""
        if self._origin is None:
            raise RuntimeError(f"{self.describe()} was not started by WorkerProcess.start: it cannot be restarted")
        ctx, main, payload, args, process_name, duplex = self._origin
        if build is not None:
            if self.parts is None:
                raise RuntimeError(f"{self.describe()} runs its own main function: it cannot take another build")
            self.parts = (build, *self.parts[1:])
            payload = pickling.dumps(self.parts)
        self.kill()
        fresh = WorkerProcess.start(ctx, self.name, main, payload, *args, process_name=process_name,
                                    detail=self.detail, cloudpickled=self.cloudpickled, duplex=duplex)
        self.process, self.conn, self._origin = fresh.process, fresh.conn, fresh._origin
        self.restarts += 1

    def kill(self) -> None:
        """End the process at once (SIGKILL) and close the pipe; a dead one is left as it is."""
        with contextlib.suppress(OSError):
            self.conn.close()
        if self.process.is_alive() and self.process.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(timeout=5.0)

    @property
    def pid(self) -> int | None:
        """The worker's process id."""
        return self.process.pid

    def describe(self) -> str:
        """The worker's name, pid (and detail), as errors name it: ``ES worker 1 (pid 1234)``."""
        detail = f", {self.detail}" if self.detail else ""
        return f"{self.name} (pid {self.pid}{detail})"

    def how_it_ended(self, timeout: float = 5.0) -> str | None:
        """How the worker's process ended (see :func:`how_it_ended`)."""
        return how_it_ended(self.process, timeout)

    def died(self) -> WorkerDied:
        """The error for this worker whose pipe broke, with how it ended."""
        return WorkerDied(self, self.how_it_ended())

    def _post(self, message: Any) -> None:
        if self.cloudpickled:
            self.conn.send_bytes(pickling.dumps(message))
        else:
            self.conn.send(message)

    def send(self, message: tuple[str, Any]) -> None:
        """Send a ``(command, data)`` message; a broken pipe raises :class:`WorkerDied`."""
        try:
            self._post(message)
        except (BrokenPipeError, ConnectionError, OSError):
            raise self.died() from None

    def receive_reply(self) -> tuple[str, Any]:
        """The next ``(status, value)`` the worker sent, errors included; a broken pipe raises :class:`WorkerDied`."""
        try:
            status, data = self.conn.recv()
        except (EOFError, OSError):
            raise self.died() from None
        return status, data

    def receive(self) -> Any:
        """The value of the worker's next answer; an error report raises :class:`WorkerRaised`, a broken pipe
        :class:`WorkerDied`."""
        status, data = self.receive_reply()
        if status == "error":
            raise WorkerRaised(self, data)
        return data

    def request(self, command: str, data: Any = None) -> Any:
        """Send a command and return the value of its answer (errors as with :meth:`receive`)."""
        self.send((command, data))
        return self.receive()


def ready_workers(workers: Sequence[WorkerProcess], timeout: float | None = None) -> list[WorkerProcess]:
    """Those of ``workers`` with something to read (an answer, or the end of their pipe), waiting up to ``timeout``
    seconds for one (None: until one has); the wait releases the interpreter lock."""
    by_conn = {worker.conn: worker for worker in workers}
    return [by_conn[conn] for conn in wait(list(by_conn), timeout=timeout)]


def shutdown_workers(workers: Sequence[WorkerProcess], timeout: float = 10.0, ask: bool = True) -> None:
    """End ``workers`` in bounded time: ask each to close (``ask``; a worker that only reports is told otherwise,
    e.g. by a shared flag), read what they still send (so that none blocks on a full pipe) until each has answered
    the close or its pipe ended, then close the pipes and end the processes: each still running after ``timeout``
    seconds in all is terminated, then killed (see :func:`end_process`)."""
    if ask:
        for worker in workers:
            with contextlib.suppress(Exception):
                worker._post((CLOSE, None))
    deadline = time.monotonic() + timeout
    reading = {worker.conn: worker for worker in workers if not worker.conn.closed}
    while reading:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        for conn in wait(list(reading), timeout=min(remaining, 0.25)):
            try:
                status, _ = conn.recv()  # a busy worker answers its command first
            except Exception:  # noqa: BLE001 - the end of the pipe, or a message that cannot be read
                status = "closed"
            if status == "closed":
                del reading[conn]
    for worker in workers:
        with contextlib.suppress(OSError):
            worker.conn.close()
    for worker in workers:
        end_process(worker.process, wait=max(0.1, deadline - time.monotonic()))


# ---- the worker side ------------------------------------------------------------------------------------------


def run_worker(conn: Any, build: Callable[[], Any], run: Callable[[Any], None],
               close: Callable[[Any], None] | None = None) -> None:
    """The life of a worker process: ignore SIGINT (the driver handles interrupts and shuts its workers down),
    ``state = build()``, ``run(state)``, and ``close(state)`` at the end however it came (where ``build`` returned).

    An exception of ``build`` or ``run`` goes to the driver as ``("error", traceback)``; a pipe the driver closed
    ends the worker quietly (nothing is left to report to). A failing ``close`` is ignored: it must not hide how the
    worker ended.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    state = _NOT_BUILT
    try:
        state = build()
        run(state)
    except (BrokenPipeError, EOFError, ConnectionError):
        pass  # the driver went away or closed the pipe while shutting down: nothing left to report to
    except BaseException:  # noqa: BLE001 - anything, import errors included, goes to the driver with its traceback
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc()))
    finally:
        if state is not _NOT_BUILT and close is not None:
            with contextlib.suppress(Exception):
                close(state)
        with contextlib.suppress(Exception):
            conn.close()


def serve(conn: Any, build: Callable[[], Any], handle: Callable[[Any, str, Any], Any],
          close: Callable[[Any], None] | None = None, ready: Callable[[Any], Any] | None = None,
          cloudpickled: bool = False) -> None:
    """A worker's main loop (see :func:`run_worker`): build, answer ``("ok", ready(state))``, then answer each
    command with ``("ok", handle(state, command, data))`` or ``("error", traceback)`` (the worker keeps serving: the
    driver decides) until ``close`` (``close(state)`` runs first, then ``("closed", None)`` is sent) or the driver goes
    away (then ``close(state)`` runs too).

    :param handle: answers one command; it returns :data:`NO_REPLY` for a command that is not answered.
    :param ready: the value of the first answer, from the state (None: None).
    :param cloudpickled: commands arrive cloudpickled (:class:`WorkerProcess` with ``cloudpickled=True``).
    """
    closed = False

    def close_once(state: Any) -> None:
        nonlocal closed
        if not closed:
            closed = True
            if close is not None:
                close(state)

    def answer(state: Any) -> None:
        conn.send(("ok", None if ready is None else ready(state)))
        while True:
            try:
                message = conn.recv_bytes() if cloudpickled else conn.recv()
            except (EOFError, OSError):
                return  # the driver went away
            try:
                command, data = cloudpickle.loads(message) if cloudpickled else message
                if command == CLOSE:
                    try:
                        close_once(state)
                    except BaseException:  # noqa: BLE001 - reported; the worker ends all the same
                        conn.send(("error", traceback.format_exc()))
                    conn.send(("closed", None))
                    return
                reply = handle(state, command, data)
            except (BrokenPipeError, ConnectionError):
                raise
            except BaseException:  # noqa: BLE001 - the traceback goes to the driver, which decides
                conn.send(("error", traceback.format_exc()))
                continue
            if reply is not NO_REPLY:
                conn.send(("ok", reply))

    run_worker(conn, build, answer, close_once)
