"""Grid points as Ray tasks or local worker processes: joining or starting Ray, and running a list of independent
jobs with a bound on how many are in flight.

Used by sweeps (``RunContext(multirun=True)``, ``maze-lab sweep``), notebook batches (``maze_lab.run.notebook_batch``)
and Optuna studies (``maze_lab.run.optimize``). Ray is imported only when a Ray launcher is asked for, through
:mod:`maze_lab.distributed.ray_runtime`.

A job goes to a worker only when one is free: nothing waits queued in a worker, so nothing starts after the driver
was interrupted. Interrupted (Ctrl-C, SIGTERM turned into KeyboardInterrupt by the ``maze-lab`` command, or any error
of the driver itself), the driver ends the runs in flight cleanly (:func:`interrupt_runs`): each is asked to stop
through its run directory (it writes a checkpoint of its current weights), those that have not ended within
:data:`STOP_GRACE_S` seconds are killed with their processes, and every one is recorded ``interrupted`` with its
reason; then :class:`RunsInterrupted` (a KeyboardInterrupt) says what happened. Local worker processes run in a
session of their own (a terminal's Ctrl-C reaches only the driver, which decides) and end when the driver ends (a
driver killed with SIGKILL leaves no worker training on: their runs read ``died``).

On a cluster (``address="auto"`` on a node of it, or ``"ray://head:10001"`` from outside), every node must see
maze-lab (installed in the same environment) and the runs' ``log_base_dir`` (a shared file system): each task writes
its run directory where it runs.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import IO, Any, NoReturn

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.distributed.ray_runtime import ensure_ray, import_ray

LAUNCHERS = ("local", "ray")
"""How the runs of a grid are executed: local worker processes, or Ray tasks."""


STOP_GRACE_S = 5.0
"""Seconds an interrupted driver waits for the runs it asked to stop before it kills their processes."""


class JobLost(RuntimeError):
    """A job ended without a result (its worker process died, its Ray task was cancelled or lost); the message says
    why."""


class RayTaskFailed(JobLost):
    """A Ray task ended without a result (its worker died, it was cancelled, or Ray lost it); the message says why."""


class RunsInterrupted(KeyboardInterrupt):
    """A batch, grid or study was interrupted (Ctrl-C, SIGTERM): nothing new started, the runs in flight were stopped
    (or killed) and recorded ``interrupted``. A KeyboardInterrupt, so ``except KeyboardInterrupt`` still catches it.

    :ivar interrupted: the run directories recorded ``interrupted``.
    :ivar in_flight: jobs that had started (one may have been ended before it made its run directory).
    :ivar not_started: jobs that never started.
    :ivar cause: ``Ctrl-C``, ``SIGTERM``, or the driver's own error.
    :ivar group: the runs' group as ``maze-lab runs --group`` takes it (``batch:…``, ``sweep:…``, ``study:…``).
    """

    def __init__(self, message: str, interrupted: Sequence[Path] = (), not_started: int = 0, cause: str = "Ctrl-C",
                 group: str | None = None, in_flight: int | None = None):
        super().__init__(message)
        self.interrupted, self.not_started, self.cause, self.group = list(interrupted), not_started, cause, group
        self.in_flight = len(self.interrupted) if in_flight is None else in_flight


def run_as_ray_tasks(func: Callable[..., Any], jobs: Sequence[tuple[Any, ...]], n_jobs: int,
                     address: str | None = None, num_cpus_per_task: float = 1,
                     run_dir_of: Callable[[int], Path | None] | None = None, what: str = "jobs",
                     group: str | None = None, on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
    """Call ``func(*args)`` for each ``args`` of ``jobs`` as a Ray task, at most ``n_jobs`` at a time; returns the
    results in the order of ``jobs``, with a :class:`RayTaskFailed` in place of a task that ended without one.

    ``func`` goes to the workers pickled by reference: a function of a module the workers can import (maze-lab's
    own). A task is not retried: a run that killed its worker is reported, not started again into a second run
    directory.

    Interrupted, no further task starts and the runs of the tasks in flight are stopped and recorded ``interrupted``
    (see :func:`interrupt_runs`; the tasks are cancelled); :class:`RunsInterrupted` is raised.

    :param n_jobs: tasks in flight at once (Ray still waits for free CPUs where the cluster has fewer).
    :param address: where Ray runs, see :func:`ensure_ray`; a local Ray gets at least ``n_jobs`` CPUs.
    :param run_dir_of: the run directory of job ``index`` where it has one yet (None: none).
    :param what: what the jobs are, for the reasons recorded (``batch``, ``sweep``).
    :param group: the runs' group (``batch:<id>``), carried by :class:`RunsInterrupted`.
    :param on_done: called with the index and the result of each job as it ends (a progress bar).
    """
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1:
        raise ConfigurationError(f"n_jobs must be an int >= 1 (Ray tasks in flight at once), got {n_jobs!r}")
    ray = import_ray()
    ensure_ray(address, num_cpus=max(n_jobs, os.cpu_count() or 1) if address is None else None)
    remote = ray.remote(num_cpus=num_cpus_per_task, max_retries=0)(_call)
    results: list[Any] = [None] * len(jobs)
    pending: dict[Any, int] = {}
    queue = list(enumerate(jobs))[::-1]
    try:
        while queue or pending:
            while queue and len(pending) < n_jobs:
                index, args = queue.pop()
                pending[remote.remote(func, *args)] = index
            done, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in done:
                index = pending.pop(ref)
                try:
                    results[index] = ray.get(ref)
                except Exception as err:  # noqa: BLE001 - a lost task is one failed run, the others go on
                    results[index] = RayTaskFailed(f"Ray task {index} ended without a result: "
                                                   f"{type(err).__name__}: {' '.join(str(err).split())[:2000]}")
                if on_done is not None:
                    on_done(index, results[index])
    except BaseException as err:  # Ctrl-C (or a failure of Ray itself): the tasks in flight are ended
        refs = list(pending)

        def cancel() -> None:
            for ref in refs:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            with contextlib.suppress(Exception):  # the cancelled tasks' workers are gone once their refs resolve
                ray.wait(refs, num_returns=len(refs), timeout=5)

        _interrupted(err, sorted(pending.values()), len(queue), run_dir_of, cancel, what, group)
    return results


def _call(func: Callable[..., Any], *args: Any) -> Any:
    """The body of every task: ``func(*args)`` (one remote function for all, whatever ``func`` is)."""
    return func(*args)


# ---- local worker processes ----------------------------------------------------------------------------------------
def run_in_processes(func: Callable[..., Any], jobs: Sequence[tuple[Any, ...]], n_jobs: int,
                     run_dir_of: Callable[[int], Path | None] | None = None, what: str = "jobs",
                     group: str | None = None, on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
    """Call ``func(*args)`` for each ``args`` of ``jobs`` in ``n_jobs`` local worker processes (see
    :class:`WorkerProcesses`); returns the results in the order of ``jobs``, with a :class:`JobLost` in place of a job
    whose worker died. ``func``, the arguments and the results are pickled (``func`` by reference).

    Interrupted, no further job starts, the runs of the jobs in flight are stopped and recorded ``interrupted``
    (:func:`interrupt_runs`; the workers are killed) and :class:`RunsInterrupted` is raised; the parameters
    ``run_dir_of``, ``what``, ``group`` and ``on_done`` are those of :func:`run_as_ray_tasks`.
    """
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1:
        raise ConfigurationError(f"n_jobs must be an int >= 1 (worker processes), got {n_jobs!r}")
    results: list[Any] = [None] * len(jobs)
    pending: dict[Future, int] = {}
    queue = list(enumerate(jobs))[::-1]
    pool = WorkerProcesses()
    try:
        while queue or pending:
            while queue and len(pending) < n_jobs:
                index, args = queue.pop()
                pending[pool.submit(func, *args)] = index
            done, _ = wait(list(pending), timeout=0.5, return_when=FIRST_COMPLETED)
            for future in done:
                index = pending.pop(future)
                try:
                    results[index] = future.result()
                except JobLost as err:  # a worker that died is one failed job; the others go on
                    results[index] = err
                except Exception as err:  # noqa: BLE001 - so is a job that raised
                    results[index] = JobLost(f"{type(err).__name__}: {' '.join(str(err).split())[:2000]}")
                if on_done is not None:
                    on_done(index, results[index])
    except BaseException as err:
        _interrupted(err, sorted(pending.values()), len(queue), run_dir_of, pool.kill, what, group)
    finally:
        pool.shutdown()
    return results


class WorkerProcesses:
    """Local worker processes that take one job at a time: :meth:`submit` hands the job to a free worker (starting
    one where none is free), so a job never waits queued inside a worker; results come back as futures.

    A worker is ``python -c`` of this module in a session of its own: a terminal's Ctrl-C reaches the driver only
    (which decides what happens to the jobs), and :meth:`kill` ends a worker with everything it started (a notebook's
    kernel, env processes). A worker ends itself, with what it started, when the driver is gone (on Linux: when the
    driver's thread that started it ends, so submit from the thread that waits for the results). Jobs talk to the
    driver through the worker's standard input and output; what a job prints goes to the worker's stderr.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._workers: list[_Worker] = []
        self._closed = False

    def submit(self, func: Callable[..., Any], *args: Any) -> Future:
        """Run ``func(*args)`` in a free worker (a new one where none is free); the future holds its result, its
        error, or a :class:`JobLost` where the worker died."""
        future: Future = Future()
        future.set_running_or_notify_cancel()
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker processes were shut down")
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker(self._finished)
            with self._lock:
                self._workers.append(worker)
        worker.run(future, func, args)
        return future

    def _finished(self, worker: _Worker, alive: bool) -> None:
        with self._lock:
            if alive and not self._closed:
                self._idle.append(worker)
            elif worker in self._workers and not alive:
                self._workers.remove(worker)

    def kill(self) -> None:
        """Kill every worker at once, with the processes it started (their jobs' futures get a JobLost)."""
        with self._lock:
            self._closed = True
            workers = list(self._workers)
        for worker in workers:
            worker.kill()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Let the workers end (after their job); those that do not within ``timeout`` seconds are killed."""
        with self._lock:
            self._closed = True
            workers = list(self._workers)
        for worker in workers:
            worker.close()
        deadline = time.monotonic() + timeout
        for worker in workers:
            try:
                worker.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.kill()


_WORKER_CODE = """\
import os, pickle, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides what a Ctrl-C does to the jobs
if sys.platform.startswith("linux"):  # SIGTERM the moment the driver is gone (PR_SET_PDEATHSIG)
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))
    except Exception:
        pass
channel = os.fdopen(os.dup(0), "rb")
try:
    setup = pickle.load(channel)
except EOFError:  # the driver was gone before it set this worker up
    sys.exit(0)
sys.path[:] = list(dict.fromkeys([*setup["sys_path"], *sys.path]))  # maze-lab is found as the driver finds it
from maze_lab.run.ray_tasks import _worker_main
_worker_main(channel, setup)
"""


class _Worker:
    """One worker process of :class:`WorkerProcesses` and the thread that reads its results."""

    def __init__(self, on_finished: Callable[[_Worker, bool], None]):
        options: dict[str, Any] = {"start_new_session": True} if os.name == "posix" else \
            {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER_CODE], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, cwd=os.getcwd(), **options)
        self._on_finished = on_finished
        self._future: Future | None = None
        self._send_lock = threading.Lock()
        self._send({"sys_path": [p for p in sys.path if isinstance(p, str)], "parent": os.getpid()})
        self._reader = threading.Thread(target=self._read, name=f"maze-lab worker {self.proc.pid}", daemon=True)
        self._reader.start()

    def _send(self, message: Any) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)  # nothing is written where this fails
        with self._send_lock:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def run(self, future: Future, func: Callable[..., Any], args: tuple) -> None:
        self._future = future
        try:
            self._send((func, args))
        except (OSError, ValueError) as err:  # the worker is gone: the reader reports it
            if not future.done():
                future.set_exception(JobLost(f"the job could not be sent to its worker process: {err}"))
        except Exception as err:  # noqa: BLE001 - e.g. arguments that cannot be pickled: this job fails
            self._future = None
            future.set_exception(err)
            self._on_finished(self, True)

    def _read(self) -> None:
        while True:
            try:
                kind, value = pickle.load(self.proc.stdout)
            except EOFError:  # the worker ended
                break
            except Exception as err:  # noqa: BLE001 - a result that cannot be read: this worker cannot go on
                future, self._future = self._future, None
                if future is not None and not future.done():
                    future.set_exception(JobLost(f"the result of the job cannot be read: {type(err).__name__}: "
                                                 f"{err}"))
                self.kill()
                break
            future, self._future = self._future, None
            if future is not None and not future.done():
                if kind == "ok":
                    future.set_result(value)
                else:
                    future.set_exception(value)
            self._on_finished(self, True)
        code = self.proc.wait()
        future, self._future = self._future, None
        if future is not None and not future.done():
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            future.set_exception(JobLost(f"its worker process (pid {self.proc.pid}) {how} without a result"))
        self._on_finished(self, False)

    def close(self) -> None:
        """No more jobs: the worker ends after the one it runs."""
        with contextlib.suppress(Exception):
            self._send(None)
            self.proc.stdin.close()

    def kill(self) -> None:
        """Kill the worker and everything it started, and wait until it is gone."""
        if self.proc.poll() is None:  # not reaped yet: the pid is still this worker's
            kill_process_tree(self.proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


def _worker_main(channel_in: IO[bytes], setup: dict[str, Any]) -> None:
    """The loop of a worker process (started by :data:`_WORKER_CODE`): unpickle ``(func, args)`` from the channel of
    its stdin, pickle ``("ok", result)`` or ``("error", exception)`` to stdout, until the driver sends None or is
    gone."""
    # the channel keeps the original stdin/stdout; what a job (or a process it starts) reads or prints is /dev/null
    # and stderr
    channel_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    end_with_parent(int(setup["parent"]))
    while True:
        try:
            job = pickle.load(channel_in)
        except EOFError:
            return
        if job is None:
            return
        func, args = job
        try:
            message: tuple[str, Any] = ("ok", func(*args))
        except BaseException as err:  # noqa: BLE001 - reported to the driver
            message = ("error", portable_error(err))
        try:
            _send_result(channel_out, message)
        except OSError:  # the driver is gone
            return


def _send_result(channel: IO[bytes], message: tuple[str, Any]) -> None:
    try:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as err:  # noqa: BLE001 - a result that cannot be pickled is this job's error
        data = pickle.dumps(("error", RuntimeError(f"the job's result cannot be sent back: {type(err).__name__}: "
                                                   f"{err}")))
    channel.write(data)
    channel.flush()


def end_with_parent(parent: int) -> None:
    """End this worker and what it started once the driver ``parent`` is gone, so that no orphan trains on unseen
    (unable to report); its runs then read ``died``. On Linux the driver's death sends SIGTERM at once
    (``PR_SET_PDEATHSIG``, set by :data:`_WORKER_CODE`: tied to the driver's thread that started the worker, which
    is the one that submits jobs and waits for them); elsewhere, and in case, a thread sees this process re-parented
    within half a second."""

    def end(*_: Any) -> None:
        for pid in _descendants(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        os._exit(1)

    if os.name != "posix":
        return
    signal.signal(signal.SIGTERM, end)
    if os.getppid() != parent:  # gone before the worker was set up
        end()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        end()

    threading.Thread(target=watch, name="maze-lab driver watch", daemon=True).start()


def _descendants(pid: int) -> list[int]:
    """The processes started by ``pid``, children first, from ``/proc`` (none where there is no ``/proc``)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:  # noqa: PTH123
                text = fh.read()
            ppid = int(text[text.rfind(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found


def kill_process_tree(pid: int) -> None:
    """SIGKILL process ``pid`` and every process it started, with the process groups they lead (a kernel runs in a
    session of its own); on systems without process groups only ``pid`` is killed."""
    if os.name != "posix":
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
        return
    tree = [pid, *_descendants(pid)]
    own = os.getpgrp()
    leaders = []
    for member in tree:  # the groups are looked up first: a killed process may be reaped at once
        with contextlib.suppress(OSError):
            if os.getpgid(member) == member and member != own:
                leaders.append(member)
    for member in tree:  # first the worker, so that it cannot react to its children's death
        with contextlib.suppress(OSError):
            os.kill(member, signal.SIGKILL)
    for leader in leaders:
        with contextlib.suppress(OSError):
            os.killpg(leader, signal.SIGKILL)


# ---- interrupted drivers -------------------------------------------------------------------------------------------
def interrupt_cause(err: BaseException) -> str:
    """How a driver was interrupted: ``Ctrl-C`` for a plain KeyboardInterrupt, the signal's name where the
    ``maze-lab`` command raised it for a signal (``SIGTERM``), else the driver's own error."""
    if isinstance(err, RunsInterrupted):
        return err.cause
    if isinstance(err, KeyboardInterrupt):
        name = str(err.args[0]) if err.args else ""
        return name if name.startswith("SIG") and name != "SIGINT" else "Ctrl-C"
    return f"an error of the driver ({type(err).__name__}: {' '.join(str(err).split())[:200]})"


def interrupt_runs(find_runs: Callable[[], Iterable[Path]], kill: Callable[[], None], reason: str,
                   grace: float = STOP_GRACE_S) -> list[Path]:
    """End the runs in flight of an interrupted batch, grid or study and record them ``interrupted``; returns the run
    directories that are ``interrupted`` afterwards.

    1. Every run ``find_runs()`` names that trains now is asked to stop through its run directory (it stops after its
       current update and writes a checkpoint of its current weights, as ``maze-lab stop`` asks);
    2. up to ``grace`` seconds pass while they end;
    3. ``kill()`` ends the processes that run the jobs (worker processes with the kernels they started, Ray tasks),
       whether their runs ended or not; the driver then waits briefly until no run's owner lives;
    4. every run found then (again: one may have been made meanwhile) whose summary still says it is live (it was
       killed, or had not started training) is recorded ``interrupted`` with ``reason`` and what is kept (the
       checkpoint of its last finished epoch); one that ended ``stopped`` on this request is recorded
       ``interrupted`` as well, since the user interrupted it, with its ``stop_reason``, acknowledgement and
       checkpoint kept. A run that ended otherwise meanwhile (done, failed) keeps its status.
    """
    from maze_lab.run.run_dir import DamagedRunError, RunDirectory
    from maze_lab.run.run_status import LIVE, read_owner, resolve_status, send_request

    def summary_of(run_dir: Path) -> dict[str, Any]:
        with contextlib.suppress(OSError, DamagedRunError, ValueError):
            run = RunDirectory(run_dir)
            if run.summary_file.exists():
                return run.read_summary()
        return {}

    asked: dict[Path, int] = {}
    try:
        for run_dir in _unique(_safe(find_runs)):
            summary = summary_of(run_dir)
            if summary.get("status") in LIVE and resolve_status(run_dir, summary)["live"]:
                with contextlib.suppress(OSError):
                    asked[run_dir] = send_request(run_dir, "stop", by=f"interrupted driver {os.getpid()}")
        deadline = time.monotonic() + grace
        while asked and time.monotonic() < deadline:
            if all(summary_of(p).get("status") not in LIVE for p in asked):
                break
            time.sleep(0.05)
    finally:
        kill()
    runs = _unique([*asked, *_safe(find_runs)])
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and any(_owner_lives(read_owner(p)) for p in runs):
        time.sleep(0.05)
    interrupted: list[Path] = []
    now = time.strftime("%Y-%m-%dT%H:%M:%S")
    for run_dir in runs:
        summary = summary_of(run_dir)
        status = summary.get("status")
        ack = summary.get("control") if isinstance(summary.get("control"), dict) else {}
        stopped_here = status == "stopped" and run_dir in asked and isinstance(ack.get("seq"), int) \
            and ack["seq"] >= asked[run_dir]
        if status in LIVE:
            checkpoint = RunDirectory(run_dir).last_checkpoint.exists()
            kept = "the checkpoint of its last finished epoch is kept" if checkpoint else "no epoch had finished"
            ended = "its process was ended" if status not in ("created", "starting") else "it had not started training"
            fields = {"reason": f"{reason}; {ended}; {kept}", "finished": now}
        elif stopped_here:
            fields = {"reason": f"{reason}; stopped with a checkpoint of its current weights"}
        else:
            if status == "interrupted":
                interrupted.append(run_dir)
            continue
        with contextlib.suppress(OSError, DamagedRunError, ValueError):
            RunDirectory(run_dir).write_summary(status="interrupted", **fields)
            interrupted.append(run_dir)
    return interrupted


def _unique(paths: Iterable[Path]) -> list[Path]:
    return list(dict.fromkeys(Path(p) for p in paths))


def _safe(find_runs: Callable[[], Iterable[Path]]) -> list[Path]:
    try:
        return list(find_runs())
    except Exception:  # noqa: BLE001 - a run that cannot be found cannot be marked
        return []


def _owner_lives(owner: dict[str, Any] | None) -> bool:
    from maze_lab.run.run_status import owner_alive

    return owner is not None and "ended" not in owner and owner_alive(owner)


def _interrupted(err: BaseException, in_flight: Sequence[int], not_started: int,
                 run_dir_of: Callable[[int], Path | None] | None, kill: Callable[[], None], what: str,
                 group: str | None) -> NoReturn:
    """Stop the jobs in flight of an interrupted driver (see :func:`interrupt_runs`) and raise
    :class:`RunsInterrupted` (for a KeyboardInterrupt) or ``err`` itself."""
    cause = interrupt_cause(err)

    def find() -> list[Path]:
        if run_dir_of is None:
            return []
        return [p for p in (run_dir_of(i) for i in in_flight) if p is not None]

    interrupted = interrupt_runs(find, kill, f"interrupted ({cause}) while its {what} ran")
    if isinstance(err, KeyboardInterrupt):
        message = (f"{what} interrupted ({cause}): {len(in_flight)} job(s) in flight stopped, {len(interrupted)} "
                   f"run(s) recorded interrupted, {not_started} not started")
        raise RunsInterrupted(message, interrupted, not_started, cause, group, len(in_flight)) from err
    raise err


def find_run(experiment_dir: Path, **fields: Any) -> Path | None:
    """The run directory under ``experiment_dir`` whose summary has all ``fields`` (None: none yet)."""
    from maze_lab.run.run_dir import MARKER, DamagedRunError, RunDirectory

    if not experiment_dir.is_dir():
        return None
    for marker in experiment_dir.glob(f"*/{MARKER}"):
        with contextlib.suppress(OSError, DamagedRunError, ValueError):
            summary = RunDirectory(marker.parent).read_summary()
            if all(summary.get(key) == value for key, value in fields.items()):
                return marker.parent
    return None


def portable_error(err: BaseException, fallback: type[Exception] = RuntimeError) -> BaseException:
    """``err`` without its traceback where it survives pickling, else a ``fallback`` with its text (an exception
    class of a notebook cannot be unpickled in another process)."""
    try:
        pickle.loads(pickle.dumps(err))
    except Exception:  # noqa: BLE001 - any unpicklable exception
        err = fallback(f"{type(err).__name__}: {err}")
    err.__traceback__ = None
    return err


def mark_lost(run_dir: Path | None, error: str) -> None:
    """Record ``failed`` with ``error`` in the run directory of a job that ended without a result, unless its run
    recorded how it ended."""
    from maze_lab.run.run_dir import RunDirectory
    from maze_lab.run.run_status import ENDED

    if run_dir is None:
        return
    run = RunDirectory(run_dir)
    with contextlib.suppress(OSError, ValueError):  # a damaged summary is rewritten as well
        status = run.read_summary().get("status") if run.summary_file.exists() else None
        if status not in ENDED:
            run.write_summary(status="failed", error=" ".join(error.split())[:2000],
                              finished=time.strftime("%Y-%m-%dT%H:%M:%S"))
