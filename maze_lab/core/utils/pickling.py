"""What maze-lab sends to its worker processes (env factories, policy copies, rollout jobs): cloudpickle, keeping the
source file of code pickled by value.

cloudpickle pickles functions and classes of modules a worker cannot import (a notebook's cells, a test module, a
script run as ``__main__``) by value, code objects included. From cloudpickle 3.1.3 on, such code objects arrive
named ``<dynamic-code>`` instead of their file, so the traceback of an env that fails in a worker no longer says
where the env was defined. :func:`dumps` pickles them with their file name kept; what it writes loads with plain
``cloudpickle.loads`` / ``pickle.loads`` (the restoring function lives here, importable by every worker).
"""

from __future__ import annotations

import io
import types
from collections import ChainMap
from typing import Any

import cloudpickle


def _code_with_file(constructor: Any, args: tuple[Any, ...], filename: str) -> types.CodeType:
    """In the worker: the code object as cloudpickle rebuilds it, with its source file set back."""
    code = constructor(*args)
    return code if code.co_filename == filename else code.replace(co_filename=filename)


_plain_code_reduce = cloudpickle.Pickler.dispatch_table.get(types.CodeType)


def _reduce_code(code: types.CodeType) -> tuple[Any, ...]:
    """cloudpickle's reduction of a code object, and its file name beside it."""
    constructor, args = _plain_code_reduce(code)
    return _code_with_file, (constructor, args, code.co_filename)


class _Pickler(cloudpickle.Pickler):
    """cloudpickle's pickler, but a code object keeps its ``co_filename`` (the table is a class attribute: the C
    pickler reads it when a pickler is made)."""

    dispatch_table = ChainMap({types.CodeType: _reduce_code} if _plain_code_reduce is not None else {},
                              cloudpickle.Pickler.dispatch_table)


def dumps(obj: Any, protocol: int | None = None) -> bytes:
    """``cloudpickle.dumps`` that keeps the source file of code pickled by value (see the module's doc)."""
    with io.BytesIO() as file:
        _Pickler(file, protocol=protocol if protocol is not None else cloudpickle.DEFAULT_PROTOCOL).dump(obj)
        return file.getvalue()
