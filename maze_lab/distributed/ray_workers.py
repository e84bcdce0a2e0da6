"""Ray worker actors: the Ray transport of maze-lab's worker protocol (:mod:`maze_lab.distributed.protocol`), for the
Ray twins of the local pools (``runner=ray`` rollout workers, ES on Ray, IMPALA on Ray).

A worker is a Ray actor hosting the very ``build`` / ``handle(state, command, data)`` / ``close`` / ``ready``
functions a local worker process serves (:func:`maze_lab.distributed.processes.serve`): a pool writes its worker side
once and runs it on either transport. The actor builds its state when it is created; a build that raises is kept and
reported as the first answer, with its traceback. Each command is one actor call answered ``("ok", value)`` or
``("error", traceback)``; a handler's :data:`~maze_lab.distributed.protocol.NO_REPLY` answers nothing.

On the driver's side :class:`RayWorker` has the operations of
:class:`~maze_lab.distributed.processes.WorkerProcess`: :meth:`~RayWorker.send` a ``(command, data)`` message,
:meth:`~RayWorker.receive` the next answer, :meth:`~RayWorker.request` both. An actor runs its calls in the order they
were made, so the answers come in the order of the messages, as through a pipe. Data that is an object reference
(``ray.put``) reaches the handler as the object: what every worker needs (an update's weights) goes into the object
store once. A worker that raised is raised as :class:`~maze_lab.distributed.protocol.WorkerRaised` with its
traceback; a dead actor (killed, out of memory, its node gone) as :class:`~maze_lab.distributed.protocol.WorkerDied`
naming the worker and its pid, with Ray's words. :func:`gather` collects one answer from each of several workers,
:func:`ready_ray_workers` says whose answers are in, :meth:`RayWorker.restart` replaces a dead actor by a fresh one
built the same way, and :func:`shutdown_ray_workers` ends workers in bounded time.

Ray never restarts these actors itself (``max_restarts=0``): a death reaches the pool, which decides.
"""

from __future__ import annotations

import contextlib
import os
import re
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle

from maze_lab.core.utils import pickling
from maze_lab.core.utils.log import get_logger
from maze_lab.distributed.protocol import NO_REPLY, WorkerDied, WorkerRaised, gather_answers
from maze_lab.distributed.ray_runtime import import_ray

_log = get_logger(__name__)

_UNANSWERED = "none"
"""The status of a call whose command is not answered (its handler returned NO_REPLY)."""

_NOT_BUILT: Any = object()


# ---- the worker side: the actor ---------------------------------------------------------------------------------


class RayWorkerHost:
    """The body of every Ray worker actor: the state ``build()`` made and the functions that serve it.

    :param spec: the cloudpickled ``(build, handle, close, ready)`` of the worker (see :meth:`RayWorker.start`).
    """

    def __init__(self, spec: bytes):
        self._state = _NOT_BUILT
        self._failure: str | None = None
        self._closed = False
        self._handle: Callable[[Any, str, Any], Any] | None = None
        self._close: Callable[[Any], None] | None = None
        self._ready: Callable[[Any], Any] | None = None
        try:
            build, self._handle, self._close, self._ready = cloudpickle.loads(spec)
            self._state = build()
        except BaseException:  # noqa: BLE001 - anything, import errors included, is the first answer's traceback
            self._failure = traceback.format_exc()

    def ready(self) -> tuple[str, Any]:
        """The first answer: ``("ok", (pid, ready(state)))``, or ``("error", (pid, traceback))`` where the build
        raised."""
        pid = os.getpid()
        if self._failure is not None:
            return "error", (pid, self._failure)
        try:
            return "ok", (pid, None if self._ready is None else self._ready(self._state))
        except BaseException:  # noqa: BLE001 - reported to the driver
            return "error", (pid, traceback.format_exc())

    def pid(self) -> int:
        """The actor's process id (named in errors)."""
        return os.getpid()

    def node_id(self) -> str:
        """The id of the Ray node the actor runs on (where a cluster placed it)."""
        return import_ray().get_runtime_context().get_node_id()

    def serve(self, command: str, data: Any) -> tuple[str, Any]:
        """One command: ``("ok", handle(state, command, data))``, ``("error", traceback)`` where it raised (the actor
        keeps serving: the driver decides), or ``("none", None)`` for a command that is not answered."""
        if self._state is _NOT_BUILT or self._closed:
            why = "building it raised" if self._failure is not None else "it was closed"
            return "error", f"RuntimeError: the worker cannot serve {command!r}: {why}"
        try:
            reply = self._handle(self._state, command, data)
        except BaseException:  # noqa: BLE001 - the traceback goes to the driver, which decides
            return "error", traceback.format_exc()
        return (_UNANSWERED, None) if reply is NO_REPLY else ("ok", reply)

    def close(self) -> tuple[str, Any]:
        """Run the worker's ``close`` hook once (flush and close its envs): ``("closed", None)``, or ``("error",
        traceback)`` where the hook raised."""
        if self._closed or self._state is _NOT_BUILT or self._close is None:
            self._closed = True
            return "closed", None
        self._closed = True
        try:
            self._close(self._state)
        except BaseException:  # noqa: BLE001 - reported; the actor is ended all the same
            return "error", traceback.format_exc()
        return "closed", None


_host_classes: dict[str, type] = {}


def remote_worker_class(title: str, n_workers: int, num_cpus_per_worker: float, num_gpus_per_worker: float,
                        owns_ray: bool, what: str) -> Any:
    """The Ray actor class of a pool's workers, with the resources each reserves, after checking that the cluster can
    place ``n_workers`` of them: a Ray started by this run (``owns_ray``) never grows, so too few CPUs is an error
    there; on a cluster it is a warning (the workers wait for nodes to join).

    :param title: the actor class's name, which Ray shows as the process title (``ray::_RolloutWorker``).
    :param what: the workers, for messages (``runner=ray``, ``ES on Ray``).
    """
    ray = import_ray()
    need, have = n_workers * num_cpus_per_worker, ray.cluster_resources().get("CPU", 0.0)
    if need > have:
        message = (f"{what}: {n_workers} workers x {num_cpus_per_worker:g} CPUs need {need:g} CPUs; the Ray cluster "
                   f"has {have:g}. Lower runner.n_workers or runner.num_cpus_per_worker")
        if owns_ray:
            raise RuntimeError(message)
        _log.warning(f"{message}, or add nodes (the workers wait until the cluster has room)")
    host = _host_classes.get(title)
    if host is None:
        host = _host_classes[title] = type(title, (RayWorkerHost,), {"__doc__": f"A Ray worker actor ({what})."})
    return ray.remote(num_cpus=num_cpus_per_worker, num_gpus=num_gpus_per_worker, max_restarts=0)(host)


# ---- the driver side --------------------------------------------------------------------------------------------


def _plain(text: str) -> str:
    """Ray's error text without its terminal colour codes."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


class RayWorker:
    """The driver's handle of one Ray worker actor; the operations of a local
    :class:`~maze_lab.distributed.processes.WorkerProcess`.

    :param name: how errors name the worker (``ES Ray worker 1``); they add its pid.
    :param actor_class: the Ray actor class (:func:`remote_worker_class`).
    :param parts: the worker's ``(build, handle, close, ready)``.
    :param detail: more words inside the parentheses after the pid (``actors [2, 3]``).
    """

    def __init__(self, name: str, actor_class: Any, parts: tuple[Any, Any, Any, Any], detail: str | None = None):
        self.name = name
        self.detail = detail
        self.actor_class = actor_class
        self.parts = parts
        self.actor: Any = None
        self.pid: int | None = None
        """The actor's process id, known once its first answer came."""
        self.built = False
        """Whether the worker answered that it was built."""
        self.restarts = 0
        """How often the actor was replaced by a fresh one."""
        self._pending: deque[tuple[Any, bool]] = deque()  # (the reference of a call, whether it is the first answer)

    @classmethod
    def start(cls, actor_class: Any, name: str, build: Callable[[], Any], handle: Callable[[Any, str, Any], Any],
              close: Callable[[Any], None] | None = None, ready: Callable[[Any], Any] | None = None,
              detail: str | None = None) -> RayWorker:
        """Create the actor, which runs ``state = build()``; its first answer (:meth:`receive`) is ``ready(state)``
        (None without ``ready``) or the build's traceback. Returns at once: a pool starts all its workers, then
        receives their first answers.

        :param build: makes the worker's state (cloudpickled: partials of module functions, lambdas).
        :param handle: answers one command, as for :func:`~maze_lab.distributed.processes.serve`.
        :param close: ends the state (flush and close the envs) when the worker is shut down.
        """
        worker = cls(name, actor_class, (build, handle, close, ready), detail)
        worker._create()
        return worker

    def _create(self) -> None:
        self.actor = self.actor_class.remote(pickling.dumps(self.parts))
        self.pid, self.built = None, False
        self._pending.clear()
        self._pending.append((self.actor.ready.remote(), True))

    def describe(self) -> str:
        """The worker's name, pid (and detail), as errors name it: ``ES Ray worker 1 (pid 1234)``."""
        detail = f", {self.detail}" if self.detail else ""
        return f"{self.name} (pid {self.pid}{detail})"

    @property
    def waiting(self) -> bool:
        """Whether answers (or calls not answered) are still to be received."""
        return bool(self._pending)

    def send(self, message: tuple[str, Any]) -> None:
        """Send a ``(command, data)`` message (an object reference as data reaches the handler as its object)."""
        command, data = message
        self._pending.append((self.actor.serve.remote(command, data), False))

    def receive(self) -> Any:
        """The value of the worker's next answer (after the calls before it, which are not answered); an error
        report raises :class:`WorkerRaised`, a dead actor :class:`WorkerDied`."""
        while self._pending:
            ref, first = self._pending.popleft()
            status, value = self._get(ref)
            if first:
                self.pid, value = value
                self.built = status == "ok"
            if status == "error":
                raise WorkerRaised(self, value)
            if status != _UNANSWERED:
                return value
        raise RuntimeError(f"{self.describe()}: no answer is to come (no command waits for one)")

    def request(self, command: str, data: Any = None) -> Any:
        """Send a command and return the value of its answer (errors as with :meth:`receive`)."""
        self.send((command, data))
        return self.receive()

    def _get(self, ref: Any) -> tuple[str, Any]:
        ray = import_ray()
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as err:
            text = _plain(str(err))
            self._pending.clear()  # every call after this one fails alike
            if "creation task" in text:  # Ray could not create the actor (the build itself reports its errors)
                raise WorkerRaised(self, text) from None
            raise WorkerDied(self, " ".join(text.split())) from None
        except ray.exceptions.RayTaskError as err:  # outside the handler: e.g. a message that cannot be unpickled
            raise WorkerRaised(self, _plain(str(err))) from None

    def forget(self) -> None:
        """Drop the answers not received yet (after an interrupt: the next answer is that of the next message)."""
        self._pending.clear()

    def restart(self, build: Callable[[], Any] | None = None) -> None:
        """Replace the actor (dead, typically) by a fresh one built by ``build`` (None: as before); its first answer
        is to be received as after :meth:`start`."""
        self.kill()
        if build is not None:
            self.parts = (build, *self.parts[1:])
        self.restarts += 1
        self._create()

    def kill(self) -> None:
        """End the actor at once (a dead one is left as it is)."""
        self._pending.clear()
        if self.actor is not None:
            with contextlib.suppress(Exception):
                import_ray().kill(self.actor)


def ready_ray_workers(workers: Sequence[RayWorker], timeout: float | None = None) -> list[RayWorker]:
    """Those of ``workers`` whose answers are all in (or whose actor died), waiting up to ``timeout`` seconds for one
    (None: until one is); workers with nothing to receive are left out."""
    ray = import_ray()
    by_ref = {worker._pending[-1][0]: worker for worker in workers if worker._pending}  # an actor answers in order
    if not by_ref:
        return []
    ready, rest = ray.wait(list(by_ref), num_returns=1, timeout=timeout)
    if ready and rest:
        more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
        ready += more
    return [by_ref[ref] for ref in ready]


def gather(workers: Sequence[RayWorker], messages: Sequence[tuple[str, Any]] | None = None) -> list[Any]:
    """Send one message per worker (None: send nothing, e.g. to read their first answers) and receive one answer from
    each, as they come; returns them in worker order. The first failure is raised (:class:`WorkerRaised`,
    :class:`WorkerDied`); then, or where the wait is interrupted, the answers not received are dropped."""
    if messages is not None:
        for worker, message in zip(workers, messages, strict=True):
            worker.send(message)
    idle = [worker.describe() for worker in workers if not worker.waiting]
    if idle:
        raise RuntimeError(f"{', '.join(idle)}: no answer is to come (no command waits for one)")
    try:
        return gather_answers(workers, ready_ray_workers)
    except BaseException:
        for worker in workers:
            worker.forget()
        raise


def shutdown_ray_workers(workers: Sequence[RayWorker], timeout: float = 30.0) -> None:
    """End ``workers`` in bounded time: ask each to close (its ``close`` hook flushes and closes its envs, after the
    calls it is busy with), wait up to ``timeout`` seconds for those that still answer, then kill them all. A dead or
    failing worker cannot flush; the others still do."""
    ray = import_ray()
    live = [worker for worker in workers if worker.actor is not None]
    if not live or not ray.is_initialized():
        return  # nothing started, or Ray was shut down already and the actors went with it
    refs = []
    for worker in live:
        with contextlib.suppress(Exception):
            refs.append(worker.actor.close.remote())
    if refs:
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        for ref in ready:
            with contextlib.suppress(Exception):
                ray.get(ref)
    for worker in live:
        worker.kill()
