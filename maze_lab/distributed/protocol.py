"""The worker protocol of maze-lab's pools, whatever carries it: local processes (:mod:`.processes`) or Ray actors
(:mod:`.ray_workers`).

A worker is built from a ``build()`` function (its envs, its policy copy ...) and answers commands with a
``handle(state, command, data)`` function; ``close(state)`` ends it (flushing its envs' event logs) and ``ready(state)``
gives the value of its first answer. A pool writes these functions once; either transport runs them. Every command
is answered with ``("ok", value)`` or ``("error", traceback)``, except that a handler returning :data:`NO_REPLY`
answers nothing (a one-way message, such as an update's weights); a failed command leaves the worker serving, the
driver decides.

On the driver's side a worker that reported an exception is raised as :class:`WorkerRaised` with its traceback, one
that ended without a report as :class:`WorkerDied` naming it and how it ended. The pools turn these into their own
errors (subclasses of :class:`WorkerError`) with the words of their users.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

CLOSE = "close"
"""The command that ends a worker (after the worker's ``close`` hook ran)."""

class _NoReply:
    """The type of :data:`NO_REPLY`: one object in every process, also where a handler that returns it travels by
    value (a notebook's function takes its globals along, and a plain ``object()`` would arrive as another one)."""

    def __repr__(self) -> str:
        return "NO_REPLY"

    def __reduce__(self) -> str:
        return "NO_REPLY"  # pickled by name: this module's object on the other side


NO_REPLY: Any = _NoReply()
"""What a worker's command handler returns for a command that is not answered (a one-way message)."""


class NamedWorker(Protocol):
    """The driver's handle of a worker, as errors name it."""

    name: str

    def describe(self) -> str:
        """The worker's name with its pid (and detail): ``ES worker 1 (pid 1234)``."""
        ...


class WorkerError(RuntimeError):
    """A worker failed: it raised (the message carries its traceback) or it died."""


class WorkerDied(WorkerError):
    """A worker ended without an error report: it was killed, ran out of memory, exited, or its node went away.

    :param worker: the worker.
    :param how: how it ended (``signal 9 (SIGKILL)``, ``exit code 1``, Ray's words about the actor); None: not known.
    """

    def __init__(self, worker: NamedWorker, how: str | None):
        super().__init__(f"{worker.describe()} died: {how or 'its pipe closed'}")
        self.worker = worker
        self.how = how


class WorkerRaised(WorkerError):
    """A worker reported an exception (building itself, or in a command); the worker is still there.

    :param worker: the worker.
    :param trace: the worker's traceback text.
    """

    def __init__(self, worker: NamedWorker, trace: str):
        super().__init__(f"{worker.describe()} raised. The worker's traceback:\n{trace}")
        self.worker = worker
        self.trace = trace


def died_message(who: str, how: str, aftermath: str, during: str | None = None) -> str:
    """The message of a worker that died without reporting an error: ``who died: how, [while during, ]without
    reporting an error (...); aftermath``."""
    while_ = f"while {during}, " if during else ""
    return (f"{who} died: {how}, {while_}without reporting an error (killed from outside, or out of memory?); "
            f"{aftermath}")


def gather_answers(workers: Sequence[Any], ready: Callable[[list[Any]], list[Any]],
                   messages: Sequence[tuple[str, Any]] | None = None) -> list[Any]:
    """Send one message per worker (None: send nothing, e.g. to read their first answers) and receive one answer from
    each as they come (``ready(waiting)``: those of the waiting workers whose answer is in); returns them in worker
    order. The first failure is raised (:class:`WorkerRaised`, :class:`WorkerDied`)."""
    if messages is not None:
        for worker, message in zip(workers, messages, strict=True):
            worker.send(message)
    position = {worker: w for w, worker in enumerate(workers)}
    replies: list[Any] = [None] * len(workers)
    waiting = list(workers)
    while waiting:
        for worker in ready(waiting):
            replies[position[worker]] = worker.receive()
            waiting.remove(worker)
    return replies
