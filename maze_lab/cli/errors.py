"""How the commands report what went wrong: bad input in one line with exit code 2, faults of what a run stands on
(a full disk, a worker that died) in one line with exit code 1; ``--debug`` adds the traceback."""

from __future__ import annotations

import argparse
import sys
import traceback

from maze_lab.run.commands import BadInput, one_line

EXIT_BAD_INPUT = 2


def _bad_input_types() -> tuple[type[BaseException], ...]:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from maze_lab.core.utils.factory import ConfigurationError
    from maze_lab.run.run_dir import DamagedRunError, ExistingRunError, NotARunDirectoryError

    types: tuple[type[BaseException], ...] = (BadInput, ConfigurationError, NotARunDirectoryError, DamagedRunError,
                                              ExistingRunError, HydraException, OmegaConfBaseException)
    # a CheckpointError can only have been raised where its module (which imports torch) is loaded
    checkpoints = sys.modules.get("maze_lab.train.trainers.common.checkpoints")
    if checkpoints is not None:
        types += (checkpoints.CheckpointError,)
    return types


def _report(args: argparse.Namespace, err: BaseException, context: str = "") -> None:
    """One line on stderr for ``err`` (the traceback before it with ``--debug``)."""
    if getattr(args, "debug", False):
        traceback.print_exception(err, file=sys.stderr)
    hint = "" if getattr(args, "debug", False) else " (--debug shows the traceback)"
    print(f"maze-lab {args.command}: error: {one_line(err)}{context}{hint if context else ''}", file=sys.stderr)


def _run_fault_types() -> tuple[type[BaseException], ...]:
    """Failures of what a run stands on rather than of its code: the disk (full, gone, no permission) and worker
    processes that died or raised (their message names the worker and carries its traceback)."""
    types: tuple[type[BaseException], ...] = (OSError,)
    for module, name in (("maze_lab.train.ray_rollouts", "RayWorkerError"),
                         ("maze_lab.train.process_rollouts", "ProcessWorkerError"),
                         ("maze_lab.train.vector_env", "VectorEnvWorkerError"),
                         ("maze_lab.train.trainers.es.workers", "ESWorkerError"),
                         ("maze_lab.train.trainers.impala.actors", "ImpalaActorError")):
        loaded = sys.modules.get(module)  # raised only where its module was loaded
        if loaded is not None:
            types += (getattr(loaded, name),)
    return types


def _report_fault(args: argparse.Namespace, err: BaseException, context: str) -> None:
    """One line on stderr for a run fault: the first line of its message (a worker's traceback follows it there),
    ``context``, and where the rest is (the traceback before it with ``--debug``)."""
    if getattr(args, "debug", False):
        traceback.print_exception(err, file=sys.stderr)
    lines = [line for line in str(err).splitlines() if line.strip()]
    first = " ".join(lines[0].split()) if lines else type(err).__name__
    rest = "its whole message and the traceback" if len(lines) > 1 else "the traceback"
    notes = [note for note in (context, "" if getattr(args, "debug", False) else f"--debug shows {rest}") if note]
    where = f" ({'; '.join(notes)})" if notes else ""
    print(f"maze-lab {args.command}: error: {type(err).__name__}: {first}{where}", file=sys.stderr)
