"""A run training in the background of a Jupyter kernel gives way to the user's cells and widgets.

The training thread and the kernel's cells share one interpreter lock. Left alone, Python hands the lock back and
forth every few milliseconds, so a cell that runs while the trainer computes takes about twice its time. While the
kernel handles a message of its shell channel (a cell from its execute request to its reply and idle status, a
widget's comm message, a completion request), a background training thread therefore pauses briefly at its natural
step boundaries (env steps of a rollout, minibatches of an update, evaluation steps): for the first
:data:`GRACE_S` seconds of the message it waits without holding the lock, then it works at most :data:`WORK_S`
seconds between pauses of up to :data:`PAUSE_S` seconds; it goes on as soon as
the kernel has handled the message and its I/O thread has sent the reply's output and idle status (a short cell costs
the run only what it computes, not a whole pause). The end of an epoch (statistics writers, histograms, evaluation,
checkpoint files) gives way between its parts as updates and env steps do. Outside
those messages, and in any thread that is not a background run (a blocking ``rc.train()`` in a cell, scripts, the
CLI), :func:`give_way` returns at once; the check is a module-global read.

The kernel's messages are followed by wrapping its ``dispatch_shell`` (ipykernel 6 and 7); where a kernel has no such
coroutine, IPython's ``pre_run_cell`` / ``post_run_cell`` events mark the cells instead.

While a background run trains in a kernel, the interpreter's switch interval is :data:`SWITCH_INTERVAL_S` instead of
5 ms: ipykernel hands every cell's output and status through its I/O thread several times per cell, and each
hand-over waits for the training thread to let go of the lock (restored when the last background run ends). The
project's kernel (:mod:`maze_lab.run.kernel_app`) saves one more hand-over per message: it reads shell messages on the
main thread, where ipykernel 7 reads them on a thread of their own and passes them on.

Each cell also costs the kernel's threads interpreter time that a training thread loses, so while maze-lab follows a
kernel it trims two costs of ipykernel and IPython that bring the user nothing: ipykernel flushes ``sys.stdout`` and
``sys.stderr`` up to seven times per cell, and every flush hands over to its I/O thread and waits for it even when
nothing was written (a flush with nothing buffered now returns at once; anything written is flushed as before, and the
idle status still follows it on the I/O thread); and while a background run trains, IPython writes its input history
to its database every :data:`HISTORY_CACHE` cells instead of after each one (written out in full when the last
background run ends, and at the kernel's exit as always). Together about a fifth of the kernel's CPU time per
trivial cell.

A message whose handler does not use the pause (it waits: ``handle.wait()``, ``time.sleep``, I/O; the kernel's main
thread ran no Python while the run paused) is probed again only after :data:`IDLE_BACKOFF_S`, so that a notebook
waiting for its run (papermill) costs the run about 2%. A long computing cell slows the run down (it keeps about a
third of its speed) instead of the run slowing the cell.
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

WORK_S = 0.002
"""Seconds a background run works between two pauses while a cell executes."""
PAUSE_S = 0.004
"""Longest pause in seconds (the lock is free for the kernel); a pause ends early when the kernel's message is done."""
GRACE_S = 0.1
"""For this long after the kernel starts handling a message, a pausing run waits without working slices in between:
an interactive cell or widget message (up to about a tenth of a second) runs as fast as in an idle kernel; a longer
one then shares the interpreter (WORK_S on, PAUSE_S off)."""
SWITCH_INTERVAL_S = 0.0005
"""The interpreter's thread switch interval while a background run trains in a kernel (Python's default is 5 ms):
every time the kernel's threads (the cell, its messages, widget updates) need the lock that the run holds, they wait
up to this long."""
ARRIVAL_S = 0.005
"""Longest wait, in seconds, of a background run for a shell message that has arrived to reach its handler (the
kernel's threads pass it on without competing with the run for the lock)."""
IDLE_BACKOFF_S = 0.2
"""After a pause the cell did not use (it waits rather than computes): seconds until the next pause."""

HISTORY_CACHE = 50
"""While a background run trains in a kernel: IPython's input history goes to its database every this many cells
(IPython's ``HistoryManager.db_cache_size``; by default after every cell, each write waking IPython's history
thread, which then takes the interpreter from the run). The history of the session stays complete in memory."""

_busy = 0
"""Shell messages (cells, widget messages) the kernel is handling now; only ever above 0 inside a kernel."""
_quiet = threading.Event()
"""Set while the kernel handles no shell message: a pausing run waits on it."""
_quiet.set()
_busy_lock = threading.Lock()
_arriving = False
"""A shell message has arrived and has not reached its handler yet."""
_arrived_at = 0.0
_busy_since = 0.0
"""perf_counter time at which the kernel started handling its current message(s)."""
_dispatched = threading.Event()
"""Set when the last message that arrived has reached its handler."""
_dispatched.set()
_background: set[int] = set()
"""Thread idents of the background runs that give way."""
_next_pause: dict[int, float] = {}  # per background thread: perf_counter time of its next possible pause
_hooked: list[object] = []  # the IPython shell whose events carry our callbacks (hooked once)
_lock = threading.Lock()
_saved_interval: list[float] = []  # the switch interval before the first background run started
_saved_history_cache: list[tuple[object, int]] = []  # (IPython's history manager, its db_cache_size) during runs
counts = {"pauses": 0, "unused": 0, "cut_short": 0, "arrivals": 0}
"""Pauses made by background runs of this process, those the kernel did not use (its handler was waiting), those
that ended early because the kernel finished its message, and waits for an arrived message to reach its handler."""


def give_way() -> None:
    """Called by the trainers at step boundaries: in a background run while the kernel handles a shell message (or
    one is on its way to its handler), pause now and then."""
    if not _busy and not _arriving:
        return
    ident = threading.get_ident()
    if ident not in _background:
        return
    if not _busy:
        left = _arrived_at + ARRIVAL_S - time.perf_counter()
        if left <= 0:
            return
        _dispatched.wait(left)  # without the lock: the kernel's threads pass the message on to its handler
        counts["arrivals"] += 1
        if not _busy:
            return
    if time.perf_counter() < _next_pause.get(ident, 0.0):
        return
    before = _main_position()
    # without the lock; returns as soon as the kernel has handled its message. Within GRACE_S of the message's start
    # the pause lasts until then: a short cell or widget message is not slowed by slices of the run's work
    done = _quiet.wait(max(PAUSE_S, _busy_since + GRACE_S - time.perf_counter()))
    used = done or _main_position() != before  # the kernel's main thread ran Python while the lock was free
    _next_pause[ident] = time.perf_counter() + (WORK_S if used else IDLE_BACKOFF_S)
    counts["pauses"] += 1
    counts["unused"] += not used
    counts["cut_short"] += done


def _main_position() -> tuple[int, int] | None:
    """Where the main thread (the one running cells) is in its innermost Python frame."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    return None if frame is None else (id(frame), frame.f_lasti)


def _enter(*_: object) -> None:
    """The kernel starts handling a message (or a cell starts)."""
    global _busy, _arriving, _busy_since
    with _busy_lock:
        if not _busy:
            _busy_since = time.perf_counter()
        _busy += 1
        _quiet.clear()
        _arriving = False
        _dispatched.set()


def _leave(*_: object) -> None:
    """The kernel has handled a message (or a cell has ended)."""
    global _busy
    with _busy_lock:
        _busy = max(0, _busy - 1)
        if not _busy:
            _quiet.set()


def _arrival() -> None:
    """A shell message has arrived (called in the thread that receives the kernel's shell messages)."""
    global _arriving, _arrived_at
    _arrived_at = time.perf_counter()
    _dispatched.clear()
    _arriving = True


def _follow_arrivals(kernel: object) -> bool:
    """Mark each shell message as it arrives, before the kernel's threads pass it on to its handler."""
    stream = getattr(kernel, "shell_stream", None)
    callback = getattr(stream, "_recv_callback", None)
    if callback is None:
        return False

    def on_recv(msg: object) -> object:
        _arrival()
        return callback(msg)

    stream._recv_callback = on_recv  # type: ignore[union-attr]  # pyzmq's ZMQStream keeps its one callback here
    return True


def _leave_after_sends(kernel: object) -> None:
    """The kernel has handled a message; the run goes on once the kernel's I/O thread has sent what the handler
    published (the reply's output and the idle status, which the user waits for): ``_leave`` is queued behind them."""
    schedule = getattr(getattr(kernel, "iopub_thread", None), "schedule", None)
    if schedule is None:
        _leave()
        return
    try:
        schedule(_leave)  # runs in the I/O thread after the sends queued before it (at once if that thread is gone)
    except Exception:  # noqa: BLE001 - a closing kernel: never keep the run paused
        _leave()


def _follow_dispatch(kernel: object) -> bool:
    """Wrap the kernel's ``dispatch_shell`` coroutine so that every shell message it handles marks the kernel busy."""
    original = getattr(kernel, "dispatch_shell", None)
    if original is None or not inspect.iscoroutinefunction(original):
        return False

    async def dispatch_shell(*args: object, **kwargs: object) -> object:
        _enter()
        try:
            return await original(*args, **kwargs)
        finally:
            _leave_after_sends(kernel)

    dispatch_shell.__wrapped__ = original  # type: ignore[attr-defined]
    kernel.dispatch_shell = dispatch_shell  # type: ignore[attr-defined]
    return True


def _lighten_flushes() -> None:
    """An ipykernel output stream's ``flush`` with nothing buffered returns at once instead of handing over to the
    kernel's I/O thread and waiting for it (streams of another make are left as they are; called once, when the
    kernel is hooked)."""
    for stream in (sys.stdout, sys.stderr):
        if stream is None or not all(
                hasattr(stream, name) for name in ("_buffers", "_flush_pending", "_subprocess_flush_pending", "echo")):
            continue
        full_flush = stream.flush

        def flush(stream: object = stream, full_flush: object = full_flush) -> None:
            # written since the last flush, a flush pending, a subprocess's output pending, or a terminal echo
            if stream._buffers or stream._flush_pending or stream._subprocess_flush_pending or stream.echo is not None:
                full_flush()

        flush.__wrapped__ = full_flush  # type: ignore[attr-defined]
        stream.flush = flush


def _defer_history(shell: object) -> None:
    """While background runs train: IPython writes its input history every HISTORY_CACHE cells."""
    manager = getattr(shell, "history_manager", None)
    size = getattr(manager, "db_cache_size", None)
    if isinstance(size, int) and getattr(manager, "enabled", False) and size < HISTORY_CACHE:
        _saved_history_cache.append((manager, size))
        manager.db_cache_size = HISTORY_CACHE  # type: ignore[union-attr]


def _restore_history() -> None:
    """The last background run has ended: IPython's history setting back, and what it cached written out now."""
    while _saved_history_cache:
        manager, size = _saved_history_cache.pop()
        manager.db_cache_size = size  # type: ignore[attr-defined]
        flag = getattr(manager, "save_flag", None)
        if flag is not None:
            flag.set()  # IPython's history thread writes the cache out


def hook_kernel_cells() -> bool:
    """Follow the shell messages (cells, widget messages) of the IPython kernel this process runs (once); False where
    there is none."""
    if _hooked:
        return True
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "events") or getattr(shell, "kernel", None) is None:
        return False  # a plain script, or a terminal IPython: no kernel, nobody's cells to make room for
    _lighten_flushes()
    if _follow_dispatch(shell.kernel):
        _follow_arrivals(shell.kernel)
    else:  # a kernel without ipykernel's dispatch coroutine: follow its cells only
        shell.events.register("pre_run_cell", _enter)
        shell.events.register("post_run_cell", _leave)
    _hooked.append(shell)
    return True


@contextmanager
def background_run() -> Iterator[None]:
    """Mark the calling thread as a background run for its duration (it gives way to cells where a kernel runs)."""
    ident = threading.get_ident()
    in_kernel = hook_kernel_cells()
    with _lock:
        if in_kernel and not _background:
            _saved_interval.append(sys.getswitchinterval())
            sys.setswitchinterval(min(SWITCH_INTERVAL_S, _saved_interval[-1]))
            _defer_history(_hooked[0])
        _background.add(ident)
    try:
        yield
    finally:
        with _lock:
            _background.discard(ident)
            _next_pause.pop(ident, None)
            if not _background and _saved_interval:
                sys.setswitchinterval(_saved_interval.pop())
                _restore_history()
