"""A run training in the background of a Jupyter kernel gives way to the user's cells.

While a background run lives in an IPython kernel, maze-lab follows the kernel's cells through IPython's public
events (``pre_run_cell`` and ``post_run_cell``) and tells the engine when a cell runs
(:mod:`maze_lab.core.utils.yielding` says how the run then pauses at its step boundaries). The callbacks are
registered when the first background run starts and unregistered when the last one ends: afterwards the kernel is as
it was. Nothing else of the kernel, of IPython or of the interpreter is changed. Outside a kernel (a script, a
terminal IPython) a background run follows nothing and never pauses.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from maze_lab.core.utils import yielding

_lock = threading.Lock()
_runs = 0
"""Background runs of this process that follow the kernel's cells now."""
_shell: Any = None
"""The IPython shell whose events carry the callbacks while background runs train; None otherwise."""
_open = 0
"""Cells that started (``pre_run_cell``) since the callbacks were registered and have not ended yet."""


def _kernel_shell() -> Any:
    """The IPython shell of the kernel this process runs, or None (no IPython, no kernel)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None or not hasattr(shell, "events"):
        return None  # a plain script, or a terminal IPython: no kernel, nobody's cells to make room for
    return shell


def _pre_run_cell(*_: object) -> None:
    """IPython starts a cell."""
    global _open
    with _lock:
        if _shell is None:  # the callbacks were unregistered while this event was being triggered
            return
        _open += 1
        yielding.cell_started()


def _post_run_cell(*_: object) -> None:
    """IPython has run a cell (one that started before the callbacks were registered is not counted)."""
    global _open
    with _lock:
        if _shell is None or not _open:
            return
        _open -= 1
        yielding.cell_finished()


def _follow_cells() -> None:
    """A background run starts: follow the kernel's cells, if this process is a kernel (the first run registers)."""
    global _runs, _shell
    shell = _kernel_shell()
    with _lock:
        _runs += 1
        if _runs > 1 or shell is None:
            return
        shell.events.register("pre_run_cell", _pre_run_cell)
        shell.events.register("post_run_cell", _post_run_cell)
        _shell = shell


def _unfollow_cells() -> None:
    """A background run has ended: the last one unregisters the callbacks and ends the cells it saw start (a cell
    that runs while the last run ends is not followed to its end)."""
    global _runs, _shell, _open
    with _lock:
        _runs -= 1
        if _runs or _shell is None:
            return
        shell, _shell = _shell, None
        open_cells, _open = _open, 0
        for event, callback in (("pre_run_cell", _pre_run_cell), ("post_run_cell", _post_run_cell)):
            if callback in shell.events.callbacks.get(event, ()):
                shell.events.unregister(event, callback)
        for _ in range(open_cells):
            yielding.cell_finished()


@contextmanager
def background_run() -> Iterator[None]:
    """Mark the calling thread as a background run for its duration; in a kernel, it gives way to the user's cells."""
    _follow_cells()
    try:
        with yielding.background_run():
            yield
    finally:
        _unfollow_cells()
