"""A run training in a background thread gives way to the user's cells at its step boundaries.

A background run and the cells of the kernel it lives in share one interpreter lock; left alone, Python hands the lock
back and forth every few milliseconds, so a cell that computes while the run trains takes about twice its time. So,
while a user cell runs, a thread marked as a background run (:func:`background_run`) pauses briefly at its natural
step boundaries (env steps of a rollout, the parts of an update, evaluation steps, the parts of an epoch's end) where
the trainers call :func:`give_way`: it waits on an event, without the lock, that is set when the cell ends. For the
first :data:`GRACE_S` seconds of a cell it waits until the cell ends (a short cell runs as in an idle kernel and costs
the run only what it computes); a longer cell then shares the interpreter, the run working :data:`WORK_S` seconds
between pauses of up to :data:`PAUSE_S`. A pause that the cell did not use (it waits on I/O, a sleep or the run
itself) is followed by the next one only after :data:`IDLE_BACKOFF_S`, so a notebook that waits for its run costs the
run little.

The engine knows no kernel: the run layer says when a cell starts and ends (:func:`cell_started`,
:func:`cell_finished`; :mod:`maze_lab.run.kernel_yield` connects them to IPython's cell events). Where nobody does
(a script, the CLI, a worker process) and in every thread that is not a background run (a blocking ``rc.train()`` in a
cell), :func:`give_way` returns at once; the check is a module-global read. Nothing here changes a process-wide
setting or another package's objects.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

WORK_S = 0.002
"""Seconds a background run works between two pauses while a (long) cell runs."""
PAUSE_S = 0.004
"""Longest pause in seconds past the grace period; a pause ends early when the cell ends."""
GRACE_S = 0.1
"""For this long after a cell starts, a pause lasts until the cell ends: an interactive cell (up to about a tenth of
a second) runs as fast as in an idle kernel; a longer one then shares the interpreter (WORK_S on, PAUSE_S off)."""
IDLE_BACKOFF_S = 0.2
"""After a pause the cell did not use (it waits rather than computes): seconds until the next pause."""

counts = {"pauses": 0, "unused": 0, "cut_short": 0}
"""Pauses made by the background runs of this process, those the cell did not use, and those that ended early
because the cell ended."""

_cells = 0
"""User cells running now (nested ``run_cell`` calls count each)."""
_cell_started_at = 0.0
"""perf_counter time at which the outermost running cell started."""
_cell_thread: int | None = None
"""Thread ident of the thread that runs the cell."""
_no_cell = threading.Event()
"""Set while no cell runs: a pausing run waits on it."""
_no_cell.set()
_lock = threading.Lock()
_background: dict[int, int] = {}
"""Thread idents of the background runs, each with how many ``background_run`` blocks it is in."""
_next_pause: dict[int, float] = {}
"""Per background thread: perf_counter time of its next possible pause."""


def give_way() -> None:
    """Called by the trainers at step boundaries: a background run pauses now and then while a user cell runs;
    everywhere else this returns at once."""
    if not _cells:
        return
    ident = threading.get_ident()
    if ident not in _background:
        return
    now = time.perf_counter()
    if now < _next_pause.get(ident, 0.0):
        return
    before = _cell_position()
    # without the lock; within GRACE_S of the cell's start the pause lasts until the cell ends
    done = _no_cell.wait(max(PAUSE_S, _cell_started_at + GRACE_S - now))
    used = done or _cell_position() != before  # the cell's thread ran Python while the lock was free
    _next_pause[ident] = time.perf_counter() + (WORK_S if used else IDLE_BACKOFF_S)
    counts["pauses"] += 1
    counts["unused"] += not used
    counts["cut_short"] += done


def _cell_position() -> tuple[int, int] | None:
    """Where the thread running the cell is in its innermost Python frame."""
    frame = sys._current_frames().get(_cell_thread) if _cell_thread is not None else None
    return None if frame is None else (id(frame), frame.f_lasti)


def cell_started() -> None:
    """A user cell starts running in the calling thread (background runs give way until :func:`cell_finished`)."""
    global _cells, _cell_started_at, _cell_thread
    with _lock:
        if not _cells:
            _cell_started_at = time.perf_counter()
            _cell_thread = threading.get_ident()
        _cells += 1
        _no_cell.clear()


def cell_finished() -> None:
    """A user cell has ended (one without a matching :func:`cell_started` changes nothing)."""
    global _cells
    with _lock:
        _cells = max(0, _cells - 1)
        if not _cells:
            _no_cell.set()


@contextmanager
def background_run() -> Iterator[None]:
    """Mark the calling thread as a background run for the block's duration: it gives way to running cells."""
    ident = threading.get_ident()
    with _lock:
        _background[ident] = _background.get(ident, 0) + 1
    try:
        yield
    finally:
        with _lock:
            _background[ident] -= 1
            if not _background[ident]:
                del _background[ident]
                _next_pause.pop(ident, None)
