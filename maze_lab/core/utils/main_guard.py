"""Refuse to spawn worker processes from a script that trains at import time.

Worker processes started with ``spawn`` or ``forkserver`` import the main script again (as ``__mp_main__``). A
script that starts training at its top level, outside ``if __name__ == "__main__":``, would then train once more in
every worker, each of which would start workers of its own. Python only notices that when a worker tries to start
a process while it is still importing; maze-lab notices before the first worker starts.
"""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

MAX_SCRIPT_BYTES = 4 * 1024**2
"""Largest main script that is read to find its ``if __name__ == "__main__":`` blocks."""


class UnguardedMainError(RuntimeError):
    """Worker processes were about to start from training code at the top level of the main script."""


def _is_main_test(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    mains = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(mains) == 1


def _guarded_lines(source: str) -> list[tuple[int, int]]:
    tree = ast.parse(source)
    return [(node.lineno, node.end_lineno or node.lineno) for node in ast.walk(tree)
            if isinstance(node, ast.If) and _is_main_test(node.test)]


def check_main_guard(start_method: str | None, what: str) -> None:
    """Raise :class:`UnguardedMainError` where processes started with ``start_method`` would import a main script
    whose top-level code, outside ``if __name__ == "__main__":``, is what is starting them (``what``: e.g. "ES
    workers"). Nothing is checked for ``fork``, or where the main module is not a script file (a kernel, an
    interactive session) or did not start this call from its top level."""
    if start_method == "fork":
        return
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or not str(path).endswith(".py"):
        return
    frame = inspect.currentframe()
    line = None
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is main.__dict__:
            line = frame.f_lineno
            break
        frame = frame.f_back
    del frame
    if line is None:
        return
    try:
        with open(path, "rb") as fh:  # noqa: PTH123
            data = fh.read(MAX_SCRIPT_BYTES + 1)
        if len(data) > MAX_SCRIPT_BYTES:
            return
        guarded = _guarded_lines(data.decode("utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return  # a script that cannot be read back is not judged
    if any(start <= line <= end for start, end in guarded):
        return
    raise UnguardedMainError(
        f"{what} start in processes of their own ({start_method or 'spawn'}), which import {Path(path).name} again: "
        f"line {line} of it starts training outside an `if __name__ == \"__main__\":` block, so every worker would "
        f"train too. Put the code that trains under `if __name__ == \"__main__\":` (see 'Safe importing of main "
        f"module' in Python's multiprocessing documentation)")
