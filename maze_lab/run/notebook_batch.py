"""Notebook batches: one papermill execution of a parameterised notebook per combination of parameter values.

``maze-lab run NOTEBOOK -p seed 1,2,3 -p algorithm ppo,a2c --jobs 2 [--ray]`` and
``run_notebook_batch(notebook, {"seed": [1, 2, 3], "algorithm": ["ppo", "a2c"]}, n_jobs=2)`` execute the notebook
once per point of the grid, each exactly as a single ``maze-lab run`` does (``maze_lab.run.papermill_run``): its own
run directory ``<log_base_dir>/<experiment or "notebook">/<timestamp>`` holding the executed notebook. The runs of a
batch share ``batch_id`` and ``batch_name`` in their summary (``maze_lab_run.json``, with ``batch_index``,
``batch_size`` and ``batch_keys``, the swept parameters), so that :func:`compare_batch` finds them again. An
execution that fails is marked ``failed`` with its error; the others go on.

The executions run in local worker processes (``backend="local"``) or as Ray tasks (``backend="ray"``: a local Ray
started here, or a cluster given by ``address``; see ``maze_lab.run.ray_tasks``).

Interrupted (Ctrl-C, or SIGTERM of ``maze-lab run``), a batch starts nothing more; each execution in flight has its
run stopped through its run directory (a checkpoint of its current weights is written), its worker and kernel are
ended, and its run is recorded ``interrupted``, also where it had ended ``stopped`` on that request (the user
interrupted it; ``stop_reason`` and the checkpoint are kept) or where it had to be killed (the checkpoint of its last
finished epoch is kept). :class:`~maze_lab.run.ray_tasks.RunsInterrupted`, a KeyboardInterrupt, says so.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.run.run_dir import DamagedRunError, RunDirectory, default_outputs_dir
from maze_lab.run.run_status import ENDED

BACKENDS = ("local", "ray")
"""Where the executions of a batch run: local worker processes or Ray tasks."""

TABLE_COLUMNS = ("batch_index", "status", "epoch", "env_steps", "best_eval_reward", "last_eval_reward",
                 "final_train_reward", "error", "run_dir", "executed_notebook")
"""The columns of a batch table after the swept parameters."""


def batch_values(pairs: Iterable[tuple[str, str]]) -> dict[str, list[Any]]:
    """The values of each parameter from ``-p NAME VALUE`` pairs: VALUE split at commas outside brackets, braces and
    quotes (as ``maze-lab sweep`` splits ``key=a,b,c``), each piece read as YAML as ``maze-lab run -p`` reads values
    (``3``, ``0.001``, ``true``, ``[64,64]``, ``'{algorithm.lr: 0.001}'``). A parameter given twice keeps the last.
    A value that is not a plain Python literal is refused (see ``maze_lab.run.papermill_run.parse_parameter``)."""
    from maze_lab.run.config import split_values
    from maze_lab.run.papermill_run import parse_parameter

    return {name: [parse_parameter(name, piece) for piece in split_values(text)] for name, text in pairs}


def batch_grid(parameters: Mapping[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """The swept parameters and the parameters of each execution (the grid of the swept values, in order).

    A list or tuple value holds the values of that parameter (wrap a list-valued parameter in one more list:
    ``{"hidden": [[64, 64]]}``); any other value is the same for every execution. Swept are the parameters with more
    than one value.
    """
    values: dict[str, list[Any]] = {}
    for name, value in parameters.items():
        values[name] = list(value) if isinstance(value, list | tuple) else [value]
        if not values[name]:
            raise ConfigurationError(f"parameter '{name}' has no values; give at least one (e.g. [1, 2, 3])")
    swept = [name for name, vals in values.items() if len(vals) > 1]
    combos = [dict(zip(values, combo, strict=True)) for combo in itertools.product(*values.values())]
    return swept, combos


def new_batch_id(name: str) -> str:
    """A fresh batch id: the batch's name, a timestamp and a random suffix (unique across machines)."""
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def run_notebook_batch(notebook: str | Path, parameters: Mapping[str, Any], n_jobs: int = 1, backend: str = "local",
                       log_base_dir: str | Path | None = None, kernel_name: str | None = None,
                       address: str | None = None, name: str | None = None) -> Any:
    """Execute ``notebook`` once per combination of the parameter values; returns a DataFrame with one row per
    execution, in grid order: the swept parameters, status, training metrics, error, run directory and executed
    notebook. ``table.attrs`` holds ``batch_id`` and ``batch_name``.

    An execution that fails is marked ``failed`` in its run directory and listed with its error; the others go on.
    Interrupted, the executions in flight are stopped and recorded ``interrupted`` and
    :class:`~maze_lab.run.ray_tasks.RunsInterrupted` is raised (see the module docstring).

    :param parameters: name -> list of values (a grid axis) or one value (see :func:`batch_grid`).
    :param n_jobs: executions at the same time (worker processes, or Ray tasks in flight).
    :param backend: ``local`` (worker processes of this machine) or ``ray`` (Ray tasks).
    :param log_base_dir: base of the run directories (default: the default location of runs, see
        ``maze_lab.run.run_dir``); on a Ray cluster it must be a path every node sees.
    :param kernel_name: the Jupyter kernel (default: the notebook's).
    :param address: with ``backend="ray"``: None starts a local Ray (an initialized one is reused); ``auto``,
        ``host:6379`` or ``ray://host:10001`` joins a cluster.
    :param name: the batch's name (default: the notebook's file name without ``.ipynb``).
    :raises FileNotFoundError: the notebook does not exist.
    :raises ConfigurationError: an undeclared parameter, an empty list of values, a bad ``n_jobs`` or ``backend``, a
        value that is not a plain Python literal (see ``maze_lab.run.papermill_run.check_parameter``).
    """
    from maze_lab.run.papermill_run import check_parameters, notebook_parameters

    source = Path(notebook).resolve()
    if not source.is_file():
        raise FileNotFoundError(f"notebook {notebook} does not exist")
    if backend not in BACKENDS:
        raise ConfigurationError(f"backend '{backend}' is not one of {', '.join(BACKENDS)}")
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1:
        raise ConfigurationError(f"n_jobs must be an int >= 1 (executions at the same time), got {n_jobs!r}")
    swept, combos = batch_grid(parameters)
    for params in combos:  # every value as it is written into the notebook: nothing runs where one is refused
        check_parameters(params)
    # checked here once rather than failing in every execution the same way
    declared = notebook_parameters(source)
    unknown = sorted(set(parameters) - set(declared))
    if unknown:
        raise ConfigurationError(f"unknown parameter(s) {', '.join(unknown)} for {source.name}; valid parameters: "
                                 f"{', '.join(declared) or 'none (tag the cell of defaults parameters)'}")
    if "run_dir" in parameters:
        raise ConfigurationError("'run_dir' is chosen per execution (a new directory under log_base_dir); pass "
                                 "log_base_dir instead")
    name = name or source.stem
    batch_id = new_batch_id(name)
    default_base = Path(log_base_dir).resolve() if log_base_dir is not None else default_outputs_dir()
    jobs = []
    for index, params in enumerate(combos):
        # where run_notebook puts the run, decided here (the driver's working directory and environment)
        base = Path(params.get("log_base_dir") or default_base).resolve()
        fields = {"batch_id": batch_id, "batch_name": name, "batch_index": index, "batch_size": len(combos),
                  "batch_keys": swept}
        jobs.append((str(source), params, str(base), kernel_name, fields, os.getcwd()))
    from maze_lab.run.ray_tasks import JobLost, run_as_ray_tasks, run_in_processes

    def run_dir_of(index: int) -> Path | None:
        return _find_batch_run(_experiment_dir(jobs[index]), batch_id, index)

    # every execution in a worker process (one at a time for n_jobs=1): an interrupted batch ends its kernels cleanly
    run = run_as_ray_tasks if backend == "ray" else run_in_processes
    options = {"address": address} if backend == "ray" else {}
    from maze_lab.run.progress import CountProgress

    failed = [0]

    def on_done(_index: int, result: Any) -> None:
        failed[0] += int(isinstance(result, JobLost) or bool(result.get("error")))
        progress.advance(1, f"{failed[0]} failed" if failed[0] else None)

    with CountProgress(len(jobs), "batch", "execution") as progress:
        results = run(execute_batch_item, jobs, n_jobs, run_dir_of=run_dir_of, what="batch",
                      group=f"batch:{batch_id}", on_done=on_done, **options)
    results = [_lost(job, str(r)) if isinstance(r, JobLost) else r for job, r in zip(jobs, results, strict=True)]
    rows = [_batch_row(result["run_dir"], swept, job[1], index, result["error"], result["executed"])
            for index, (job, result) in enumerate(zip(jobs, results, strict=True))]
    return _table(rows, swept, batch_id, name)


def execute_batch_item(notebook: str, params: dict[str, Any], log_base_dir: str, kernel_name: str | None,
                       fields: dict[str, Any], cwd: str | None = None) -> dict[str, Any]:
    """One execution of a batch (in a worker process or Ray task): ``{"run_dir", "executed", "error"}``, where
    ``error`` is None for a run that went through and the reason of a failed one (also in its summary)."""
    from maze_lab.run.papermill_run import NotebookRunError, run_notebook

    try:
        with _working_dir(cwd):
            run_dir, executed = run_notebook(notebook, params, log_base_dir=log_base_dir, kernel_name=kernel_name,
                                             summary_fields=fields)
    except NotebookRunError as err:  # a cell raised: run_notebook marked the run failed
        return {"run_dir": str(err.run_dir), "executed": str(err.executed_notebook),
                "error": f"{err.ename}: {' '.join(str(err.evalue).split())}"}
    except Exception as err:  # noqa: BLE001 - e.g. the kernel died: the run is marked failed here
        return _lost((notebook, params, log_base_dir, kernel_name, fields), f"{type(err).__name__}: {err}")
    return {"run_dir": str(run_dir), "executed": str(executed), "error": None}


@contextlib.contextmanager
def _working_dir(path: str | None) -> Iterator[None]:
    """Run the block in ``path`` where this machine has it (a Ray worker starts elsewhere; the kernel inherits it)."""
    if path is None or not Path(path).is_dir() or Path(path).resolve() == Path.cwd().resolve():
        yield
        return
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def _lost(job: tuple, error: str) -> dict[str, Any]:
    """The result of an execution that ended without reporting back: its run directory (where it made one) is marked
    ``failed`` with ``error``."""
    fields = job[4]
    error = " ".join(error.split())[:2000]
    run_dir = _find_batch_run(_experiment_dir(job), fields["batch_id"], fields["batch_index"])
    if run_dir is not None:
        run = RunDirectory(run_dir)
        with contextlib.suppress(OSError, DamagedRunError):
            if run.read_summary().get("status") not in ENDED:
                run.write_summary(status="failed", error=error, finished=time.strftime("%Y-%m-%dT%H:%M:%S"))
    return {"run_dir": None if run_dir is None else str(run_dir), "executed": None, "error": error}


def _experiment_dir(job: tuple) -> Path:
    """Where the execution of ``job`` makes its run directory: ``<log_base_dir>/<experiment or "notebook">``."""
    _, params, log_base_dir = job[:3]
    return Path(log_base_dir) / str(params.get("experiment") or "notebook")


def _find_batch_run(experiment_dir: Path, batch_id: str, index: int) -> Path | None:
    """The run directory of execution ``index`` of batch ``batch_id`` under ``experiment_dir`` (None: none made)."""
    from maze_lab.run.ray_tasks import find_run

    return find_run(experiment_dir, batch_id=batch_id, batch_index=index)


def _batch_row(run_dir: str | Path | None, swept: list[str], params: Mapping[str, Any], index: int,
               error: str | None, executed: str | None) -> dict[str, Any]:
    """One row of a batch table: the swept values, the run's status and metrics, the error of a failed run."""
    from maze_lab.run.runs import _row

    row: dict[str, Any] = {key: params.get(key) for key in swept}
    row.update(dict.fromkeys(TABLE_COLUMNS))
    row["batch_index"] = index
    if run_dir is None:
        row.update(status="failed", error=error)
        return row
    run = RunDirectory(run_dir)
    listed = _row(run)  # status and metrics as `maze-lab runs` lists them (damaged where unreadable)
    row.update({k: listed.get(k) for k in TABLE_COLUMNS if k in listed})
    summary: dict[str, Any] = {}
    with contextlib.suppress(OSError, DamagedRunError):
        summary = run.read_summary()
    recorded = summary.get("error") or listed.get("reason")
    if error is None and recorded and row["status"] in ("failed", "damaged"):
        error = str(recorded).strip().splitlines()[-1]  # a traceback's last line names the error
    row.update(run_dir=str(run.path), error=error,
               executed_notebook=executed or summary.get("executed_notebook"))
    return row


def _table(rows: list[dict[str, Any]], swept: list[str], batch_id: str, name: str) -> Any:
    import pandas as pd

    table = pd.DataFrame(rows, columns=[*swept, *TABLE_COLUMNS])
    table.attrs.update(batch_id=batch_id, batch_name=name)
    return table


def compare_batch(batch_id: str, base_dir: str | Path | None = None) -> Any:
    """The table of a batch run earlier (as :func:`run_notebook_batch` returned it), read from the run directories
    under ``base_dir`` (default: the default location of runs) whose summary has this ``batch_id``."""
    from maze_lab.run.runs import find_run_dirs

    base = Path(base_dir) if base_dir is not None else default_outputs_dir()
    found: list[tuple[int, Path, dict[str, Any]]] = []
    for path in find_run_dirs(base):
        with contextlib.suppress(OSError, DamagedRunError):
            summary = RunDirectory(path).read_summary()
            if summary.get("batch_id") == batch_id:
                found.append((int(summary.get("batch_index", -1)), path, summary))
    if not found:
        raise ConfigurationError(f"no run of batch '{batch_id}' under {base}; the batch id is printed by "
                                 f"`maze-lab run` and kept in table.attrs['batch_id']")
    found.sort(key=lambda item: item[0])
    swept = list(found[0][2].get("batch_keys") or [])
    rows = [_batch_row(path, swept, summary.get("parameters") or {}, index, None, None)
            for index, path, summary in found]
    return _table(rows, swept, batch_id, str(found[0][2].get("batch_name", "")))


# ---- maze-lab run -p key a,b,c --jobs N [--ray] ----------------------------------------------------------------
def is_batch_command(args: Any) -> bool:
    """Whether a ``maze-lab run`` command line asks for a batch: a ``-p`` value with several comma-separated values,
    ``--jobs`` or ``--ray``."""
    from maze_lab.run.config import split_values

    several = any(len(split_values(text)) > 1 for _, text in (args.parameters or []))
    return several or bool(getattr(args, "jobs", None)) or bool(getattr(args, "ray", False))


def run_batch_command(args: Any) -> int:
    """``maze-lab run`` for a batch: executes the grid, prints the table; exit code 1 where an execution failed."""
    import sys

    from maze_lab.run.commands import BadInput, interrupt_once, one_line, report_interrupted

    if not getattr(args, "ray", False) and args.address:
        raise BadInput("--address names a Ray cluster; add --ray")
    values = batch_values(args.parameters or [])
    swept, combos = batch_grid(values)
    n_jobs = args.jobs if args.jobs is not None else 1
    backend = "ray" if getattr(args, "ray", False) else "local"
    where = " as Ray tasks" + (f" on {args.address}" if args.address else "") if backend == "ray" else ""
    grid = " x ".join(f"{key} ({len(values[key])} values)" for key in swept) or "one combination"
    print(f"maze-lab run: {len(combos)} executions of {args.notebook} over {grid}, {n_jobs} at a time{where} "
          f"(each notebook's output goes into its executed copy) ...", flush=True)
    started = time.monotonic()
    # Ctrl-C or SIGTERM: nothing more starts, the executions in flight are stopped and recorded interrupted, one line
    with interrupt_once() as caught:
        try:
            table = run_notebook_batch(args.notebook, values, n_jobs=n_jobs, backend=backend,
                                       log_base_dir=args.log_base_dir, kernel_name=args.kernel, address=args.address,
                                       name=getattr(args, "batch_name", None))
        except FileNotFoundError as err:
            raise BadInput(str(err)) from err
        except KeyboardInterrupt as err:
            return report_interrupted("run", err, caught, "execution(s)")
    failed = table[~table.status.isin(["done", "stopped", "early-stopped"])]
    columns = [*swept, "status", "epoch", "env_steps", "best_eval_reward", "last_eval_reward", "final_train_reward",
               "run_dir"]
    print(f"maze-lab run: batch {table.attrs['batch_id']} ended in {time.monotonic() - started:.0f} s")
    print(table[columns].to_string(index=False))
    for _, row in failed.iterrows():
        print(f"maze-lab run: execution {row.batch_index} ({', '.join(f'{k}={row[k]!r}' for k in swept)}) "
              f"{row.status}: {one_line(Exception(row.error or 'no error recorded'))[:500]}", file=sys.stderr)
    if len(failed):
        print(f"maze-lab run: {len(failed)} of {len(table)} executions did not finish (their maze_lab_run.json "
              f"and executed notebooks say why)", file=sys.stderr)
        return 1
    return 0
