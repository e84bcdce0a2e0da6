"""What the ``maze-lab`` commands share, in the run layer so that the commands the run layer implements (notebook
batches, studies) and ``maze_lab.cli`` use the same: bad input as one line, and the first Ctrl-C or SIGTERM turned
into a clean interrupt with a one-line report."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any


class BadInput(Exception):
    """Input the command cannot use; reported as one line with exit code 2."""


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


class _Caught:
    """The signal that interrupted a command (None: none caught here, e.g. a plain KeyboardInterrupt)."""

    signum: int | None = None

    @property
    def name(self) -> str:
        return "Ctrl-C" if self.signum in (None, signal.SIGINT) else signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process ended by it: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + int(self.signum or signal.SIGINT)


@contextlib.contextmanager
def interrupt_once() -> Iterator[_Caught]:
    """In this command's own process: the first Ctrl-C or SIGTERM interrupts the run (a KeyboardInterrupt whose
    argument names the signal); further ones are ignored until the run, batch, grid or study has recorded how it ended
    (a second Ctrl-C used to cut that short and leave the run `running`). Yields what was caught."""
    caught = _Caught()

    def interrupt(signum: int, _frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        caught.signum = signum
        raise KeyboardInterrupt(signal.Signals(signum).name)

    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    saved = signal.signal(signal.SIGINT, interrupt), signal.signal(signal.SIGTERM, interrupt)
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, saved[0])
        signal.signal(signal.SIGTERM, saved[1])


def report_interrupted(command: str, err: KeyboardInterrupt, caught: _Caught, things: str, after: str = "") -> int:
    """One line on stderr for a batch, grid or study that was interrupted (what was stopped, what never started, the
    group to list); returns the exit code: 130 for Ctrl-C (SIGINT), 143 for SIGTERM."""
    from maze_lab.run.run_dir import RunDirectory

    interrupted = getattr(err, "interrupted", None)
    text = f"maze-lab {command}: interrupted ({caught.name})"
    if interrupted is not None:
        kept = sum(RunDirectory(path).last_checkpoint.exists() for path in interrupted)
        text += (f": {err.in_flight} {things} in flight stopped, {len(interrupted)} run(s) recorded interrupted "
                 f"({kept} with a checkpoint), {err.not_started} not started")
        if getattr(err, "group", None):
            text += f"; maze-lab runs --group {err.group}"
    print(("\n" if caught.name == "Ctrl-C" else "") + text + after, file=sys.stderr, flush=True)
    return caught.exit_code
