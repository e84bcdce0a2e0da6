"""The worker protocol's two transports behind one interface: a pool that takes a :class:`Transport` starts, talks
to, restarts and shuts down its workers the same way whether they are local processes or Ray actors.

A worker is the protocol's ``build`` / ``handle(state, command, data)`` / ``close`` / ``ready`` functions
(:mod:`maze_lab.distributed.protocol`). :meth:`Transport.start` starts one and returns the driver's handle
(:class:`~maze_lab.distributed.processes.WorkerProcess` or :class:`~maze_lab.distributed.ray_workers.RayWorker`);
both handles ``send`` a ``(command, data)`` message, ``receive`` the next answer, ``request`` both, ``restart`` a
dead worker as a fresh one built the same way, ``describe`` themselves as errors name them, and raise
:class:`~maze_lab.distributed.protocol.WorkerRaised` with the worker's traceback or
:class:`~maze_lab.distributed.protocol.WorkerDied` naming how it ended. The transport adds what concerns several
workers: whose answers are in (:meth:`Transport.ready`), one answer from each (:meth:`Transport.gather`), jobs handed
to whichever worker is free (:func:`map_jobs`), and a shutdown in bounded time (:meth:`Transport.shutdown`).

- :class:`ProcessTransport`: ``multiprocessing`` processes (``spawn`` by default: safe in a kernel with threads),
  each with one pipe; the functions travel cloudpickled (lambdas and notebook functions work).
- :class:`RayTransport`: Ray actors of one class with the resources each reserves; Ray must be initialized.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import cloudpickle

from maze_lab.core.utils import pickling
from maze_lab.core.utils.main_guard import check_main_guard
from maze_lab.distributed.processes import NO_REPLY, WorkerProcess, ready_workers, serve, shutdown_workers
from maze_lab.distributed.protocol import gather_answers
from maze_lab.distributed.weights import SharedValue, SharedWeights


class Worker(Protocol):
    """The driver's handle of one worker, whatever carries it."""

    name: str
    restarts: int

    @property
    def pid(self) -> int | None:
        """The worker's process id (a Ray actor's: known once its first answer came)."""
        ...

    def describe(self) -> str:
        """``name (pid 1234[, detail])``."""
        ...

    def send(self, message: tuple[str, Any]) -> None:
        """Send a ``(command, data)`` message."""
        ...

    def receive(self) -> Any:
        """The value of the next answer (errors raised)."""
        ...

    def request(self, command: str, data: Any = None) -> Any:
        """Send a command and return its answer's value."""
        ...

    def restart(self, build: Callable[[], Any] | None = None) -> None:
        """Replace the worker by a fresh one built by ``build`` (None: as before); its first answer is to come."""
        ...


class Transport(Protocol):
    """What carries a pool's workers."""

    name: str
    """``processes`` or ``ray``."""

    def start(self, name: str, build: Callable[[], Any], handle: Callable[[Any, str, Any], Any],
              close: Callable[[Any], None] | None = None, ready: Callable[[Any], Any] | None = None,
              detail: str | None = None) -> Worker:
        """Start a worker (it builds itself); returns at once, its first answer is ``ready(state)`` or the build's
        traceback."""
        ...

    def ready(self, workers: Sequence[Any], timeout: float | None = None) -> list[Any]:
        """Those of ``workers`` with an answer in (or that ended), waiting up to ``timeout`` seconds for one."""
        ...

    def gather(self, workers: Sequence[Any], messages: Sequence[tuple[str, Any]] | None = None) -> list[Any]:
        """Send one message per worker (None: none) and receive one answer from each; in worker order."""
        ...

    def shutdown(self, workers: Sequence[Any], timeout: float = 10.0) -> None:
        """End ``workers`` in bounded time (their ``close`` hooks run where they still answer)."""
        ...

    def broadcast(self, workers: Sequence[Any], command: str, vector: Any) -> None:
        """Send every worker ``(command, vector)`` (an update's weights; the handler does not answer it), the vector
        stored once for all of them."""
        ...


# ---- local processes ------------------------------------------------------------------------------------------


def _serve_parts(conn: Any, spec: bytes, shared: SharedWeights | None = None) -> None:
    """A worker process serving the cloudpickled ``(build, handle, close, ready)`` of ``spec`` (an unpickling error,
    e.g. a module the process cannot import, is the first answer's traceback); a :class:`SharedValue` as a message's
    data reaches the handler as the vector in ``shared``."""
    parts: list[Any] = []
    held = [-1]

    def handle(state: Any, command: str, data: Any) -> Any:
        if isinstance(data, SharedValue) and shared is not None:
            version, vector = shared.read(held[0])
            if vector is None:  # a newer vector came with an earlier message: this one is held already
                return NO_REPLY
            held[0], data = version, vector
        return parts[1](state, command, data)

    def build() -> Any:
        parts.extend(cloudpickle.loads(spec))
        return parts[0]()

    def close(state: Any) -> None:
        if parts[2] is not None:
            parts[2](state)

    serve(conn, build, handle, close=close,
          ready=lambda state: None if parts[3] is None else parts[3](state), cloudpickled=True)


class ProcessTransport:
    """Workers in local processes.

    :param start_method: the ``multiprocessing`` start method (``spawn``: safe in a kernel with threads; a script
        must guard its entry with ``if __name__ == "__main__":``, which is checked before anything starts).
    :param what: the workers, for the main-guard message (``rollout worker processes``).
    :param process_name: the processes' names (``multiprocessing.active_children`` shows them), ``-{index}`` added.
    :param close_timeout: seconds a shutdown waits for the workers' ``close`` hooks before it ends them.
    :param broadcast_size: float32 values of the vectors :meth:`broadcast` sends (an update's weights): they go
        through one shared-memory array that every worker reads, instead of a pickled copy per worker. None: no
        broadcast.
    """

    name = "processes"

    def __init__(self, start_method: str = "spawn", what: str = "worker processes",
                 process_name: str = "maze-lab-worker", close_timeout: float = 10.0,
                 broadcast_size: int | None = None):
        check_main_guard(start_method, what)
        self.ctx = mp.get_context(start_method)
        self.process_name = process_name
        self.close_timeout = close_timeout
        self.shared = None if broadcast_size is None else SharedWeights(broadcast_size, self.ctx)
        self._version = 0
        self._started = 0

    def start(self, name: str, build: Callable[[], Any], handle: Callable[[Any, str, Any], Any],
              close: Callable[[Any], None] | None = None, ready: Callable[[Any], Any] | None = None,
              detail: str | None = None) -> WorkerProcess:
        """Start a worker process; its first answer is ``ready(state)`` (None without it) or the build's traceback."""
        parts = (build, handle, close, ready)
        worker = WorkerProcess.start(self.ctx, name, _serve_parts, pickling.dumps(parts), self.shared,
                                     process_name=f"{self.process_name}-{self._started}", detail=detail,
                                     cloudpickled=True)
        worker.parts = parts
        self._started += 1
        return worker

    def ready(self, workers: Sequence[WorkerProcess], timeout: float | None = None) -> list[WorkerProcess]:
        """Those of ``workers`` with something to read (see :func:`~maze_lab.distributed.processes.ready_workers`)."""
        return ready_workers(workers, timeout)

    def gather(self, workers: Sequence[WorkerProcess],
               messages: Sequence[tuple[str, Any]] | None = None) -> list[Any]:
        """One answer from each worker (after sending ``messages``), as they come; the wait releases the interpreter
        lock. The first failure is raised."""
        return gather_answers(workers, ready_workers, messages)

    def shutdown(self, workers: Sequence[WorkerProcess], timeout: float | None = None) -> None:
        """Ask the workers to close, then end those still running (see
        :func:`~maze_lab.distributed.processes.shutdown_workers`)."""
        shutdown_workers(workers, self.close_timeout if timeout is None else timeout)

    def broadcast(self, workers: Sequence[WorkerProcess], command: str, vector: Any) -> None:
        """Write ``vector`` into the shared array once and send each worker ``(command, vector)``: the message
        carries only the vector's version, the worker's side hands its handler the vector (a worker that already
        holds a newer one skips it). One-way: the handler's answer is not read."""
        if self.shared is None:
            raise RuntimeError("this ProcessTransport was made without broadcast_size: it cannot broadcast")
        self._version += 1
        self.shared.write(vector, self._version)
        for worker in workers:
            worker.send((command, SharedValue(self._version)))


# ---- Ray ------------------------------------------------------------------------------------------------------


class RayTransport:
    """Workers as Ray actors of one class (Ray must be initialized).

    :param title: the actor class's name, which Ray shows as the process title (``ray::_RolloutWorker``).
    :param n_workers: how many workers the pool starts (checked against the cluster's CPUs).
    :param num_cpus_per_worker: CPUs each actor reserves.
    :param num_gpus_per_worker: GPUs each actor reserves.
    :param owns_ray: whether this run started Ray (a local Ray never grows: too few CPUs is an error).
    :param what: the workers, for messages (``runner=ray``).
    :param close_timeout: seconds a shutdown waits for the workers' ``close`` hooks before it kills them.
    """

    name = "ray"

    def __init__(self, title: str, n_workers: int, num_cpus_per_worker: float = 1, num_gpus_per_worker: float = 0,
                 owns_ray: bool = False, what: str = "Ray workers", close_timeout: float = 30.0):
        from maze_lab.distributed.ray_workers import remote_worker_class

        self.actor_class = remote_worker_class(title, n_workers, num_cpus_per_worker, num_gpus_per_worker, owns_ray,
                                               what)
        self.close_timeout = close_timeout

    def start(self, name: str, build: Callable[[], Any], handle: Callable[[Any, str, Any], Any],
              close: Callable[[Any], None] | None = None, ready: Callable[[Any], Any] | None = None,
              detail: str | None = None) -> Any:
        """Create a worker actor (see :meth:`~maze_lab.distributed.ray_workers.RayWorker.start`)."""
        from maze_lab.distributed.ray_workers import RayWorker

        return RayWorker.start(self.actor_class, name, build, handle, close=close, ready=ready, detail=detail)

    def ready(self, workers: Sequence[Any], timeout: float | None = None) -> list[Any]:
        """Those of ``workers`` whose answers are all in (or whose actor died)."""
        from maze_lab.distributed.ray_workers import ready_ray_workers

        return ready_ray_workers(workers, timeout)

    def gather(self, workers: Sequence[Any], messages: Sequence[tuple[str, Any]] | None = None) -> list[Any]:
        """One answer from each worker (after sending ``messages``), as they come; the first failure is raised."""
        from maze_lab.distributed.ray_workers import gather

        return gather(workers, messages)

    def shutdown(self, workers: Sequence[Any], timeout: float | None = None) -> None:
        """Ask the workers to close, then kill them all (see
        :func:`~maze_lab.distributed.ray_workers.shutdown_ray_workers`)."""
        from maze_lab.distributed.ray_workers import shutdown_ray_workers

        shutdown_ray_workers(workers, self.close_timeout if timeout is None else timeout)

    def broadcast(self, workers: Sequence[Any], command: str, vector: Any) -> None:
        """Put ``vector`` into Ray's object store once and send each worker ``(command, reference)``: Ray hands the
        handler the vector. One-way: the handler must not answer (a failure shows in the next answer)."""
        from maze_lab.distributed.ray_runtime import import_ray

        reference = import_ray().put(vector)
        for worker in workers:
            worker.send((command, reference))


# ---- jobs over a pool -----------------------------------------------------------------------------------------


def map_jobs(transport: Transport, workers: Sequence[Any], command: str, jobs: Iterable[Any],
             on_answer: Callable[[int, Any], None] | None = None) -> list[Any]:
    """Run ``(command, job)`` for every job on whichever worker is free (one job in flight per worker, so nothing
    waits queued in a worker); returns the answers in job order. The first failure is raised (the caller shuts the
    workers down).

    :param on_answer: called with ``(job index, answer)`` as each answer comes (progress).
    """
    queue = list(enumerate(jobs))
    queue.reverse()
    answers: list[Any] = [None] * len(queue)
    in_flight: dict[Any, int] = {}
    idle = list(workers)
    while queue or in_flight:
        while queue and idle:
            worker = idle.pop(0)
            index, job = queue.pop()
            worker.send((command, job))
            in_flight[worker] = index
        for worker in transport.ready(list(in_flight)):
            index = in_flight.pop(worker)
            answers[index] = worker.receive()
            if on_answer is not None:
                on_answer(index, answers[index])
            idle.append(worker)
    return answers
