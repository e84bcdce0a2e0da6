"""maze-lab's own messages (notices and warnings of runs, trainers and workers) go through Python's ``logging``, in
the ``maze_lab`` logger hierarchy (one logger per module, ``maze_lab.train.trainers.es.es`` and so on), so that an
application or a notebook can silence, filter or redirect them:

- silence the notices: ``logging.getLogger("maze_lab").setLevel(logging.WARNING)`` (everything: ``logging.ERROR``);
- send them to handlers of your own: add them to ``logging.getLogger("maze_lab")`` (or to the root logger) and
  call :func:`use_default_handler` with ``False``.

By default the ``maze_lab`` logger has one handler of its own, added to that logger only (never to the root logger,
which stays the application's): it writes INFO and above to the current ``sys.stderr`` as ``maze-lab: message``
(``maze-lab: WARNING message`` for warnings), as the command line has always printed them. Conditions in the user's
configuration that the user should fix go through ``warnings`` instead.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import TextIO

ROOT = "maze_lab"
"""The root of maze-lab's logger hierarchy."""

_lock = threading.Lock()


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a message is written (a kernel replaces it after start-up)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(_Format())

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:  # logging.StreamHandler sets it; the current sys.stderr is used
        pass


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname} "
        return f"maze-lab: {level}{record.getMessage()}"


_default: _StderrHandler | None = None


def use_default_handler(on: bool = True) -> None:
    """Add (True) or remove (False) the handler of its own that the ``maze_lab`` logger writes to stderr with."""
    global _default
    root = logging.getLogger(ROOT)
    with _lock:
        if on and _default is None:
            _default = _StderrHandler()
            root.addHandler(_default)
            if root.level == logging.NOTSET:
                root.setLevel(logging.INFO)
        elif not on and _default is not None:
            root.removeHandler(_default)
            _default = None


def get_logger(name: str) -> logging.Logger:
    """The logger of module ``name`` (its ``__name__``, in the ``maze_lab`` hierarchy)."""
    return logging.getLogger(name)


use_default_handler(True)
