"""Notebook runs: execute a parameterised notebook with papermill into a fresh run directory.

The run directory is created first and handed to the notebook as its ``run_dir`` parameter; the executed
notebook (with all its outputs) is saved into that directory, next to the config, statistics and checkpoints
the notebook's RunContext writes there. papermill is imported only when a notebook is run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.run.run_dir import RunDirectory, default_outputs_dir, new_run_dir

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class NotebookRunError(RuntimeError):
    """A cell of a notebook run raised; the message names the cell and carries its traceback.

    :ivar ename: the exception's class name inside the kernel (e.g. ``ConfigurationError``).
    :ivar evalue: the exception's message.
    :ivar traceback: the cell's traceback as plain text.
    :ivar run_dir: the run directory.
    :ivar executed_notebook: the executed notebook (saved up to and including the failing cell).
    """

    def __init__(self, message: str, ename: str, evalue: str, traceback: str, run_dir: Path,
                 executed_notebook: Path):
        super().__init__(message)
        self.ename, self.evalue, self.traceback = ename, evalue, traceback
        self.run_dir, self.executed_notebook = run_dir, executed_notebook


def notebook_parameters(notebook: str | Path) -> dict[str, Any]:
    """The parameters a notebook declares in its cell tagged ``parameters`` (name -> default as written)."""
    import papermill as pm

    declared = pm.inspect_notebook(str(notebook))
    return {name: spec.get("default") for name, spec in declared.items()}


def run_notebook(notebook: str | Path, parameters: Mapping[str, Any] | None = None,
                 log_base_dir: str | Path | None = None, kernel_name: str | None = None,
                 summary_fields: Mapping[str, Any] | None = None) -> tuple[Path, Path]:
    """Execute ``notebook`` with papermill into a new run directory; returns ``(run_dir, executed_notebook)``.

    :param notebook: a notebook with a cell tagged ``parameters``.
    :param parameters: values for the parameters cell (names must be declared there); ``run_dir`` is set here.
    :param log_base_dir: base of the run directory ``<log_base_dir>/<experiment or "notebook">/<timestamp>``;
        a ``log_base_dir`` in ``parameters`` takes precedence; default: the default location of runs
        (``$MAZE_LAB_OUTPUTS``, else ``<project root>/outputs``, see ``maze_lab.run.run_dir``).
    :param kernel_name: the Jupyter kernel (default: the one named in the notebook's metadata).
    :param summary_fields: more fields for the run's summary, written when the directory is made (a batch's id).
    :raises NotebookRunError: a cell raised (the message carries the cell's traceback).
    :raises ConfigurationError: a parameter the notebook does not declare.
    """
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    source = Path(notebook)
    if not source.is_file():
        raise FileNotFoundError(f"notebook {source} does not exist")
    params = dict(parameters or {})
    declared = notebook_parameters(source)
    if not declared:
        raise ConfigurationError(f"{source} has no cell tagged 'parameters'; tag the cell that holds the defaults "
                                 f"(View > Cell toolbar > Tags in Jupyter, or the property inspector in JupyterLab)")
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise ConfigurationError(f"unknown parameter(s) {', '.join(unknown)} for {source.name}; valid parameters: "
                                 f"{', '.join(declared)}")
    if params.get("run_dir"):
        raise ConfigurationError("'run_dir' is chosen by run_notebook (a new directory under log_base_dir); "
                                 "pass log_base_dir instead")
    base = Path(params.get("log_base_dir") or log_base_dir or default_outputs_dir())
    if "log_base_dir" in declared:
        params["log_base_dir"] = str(base)
    run_dir = new_run_dir(base, str(params.get("experiment") or "notebook")).resolve()
    params["run_dir"] = str(run_dir)
    executed = run_dir / source.name
    run = RunDirectory(run_dir)
    run.write_summary(status="created", notebook=str(source.resolve()), executed_notebook=str(executed),
                      parameters=params, created=time.strftime("%Y-%m-%dT%H:%M:%S"), **dict(summary_fields or {}))
    try:
        # the kernel's own log (a warning about unencrypted local TCP on every start) is noise for a notebook run;
        # errors still show, and everything the cells print is in the executed notebook
        pm.execute_notebook(str(source), str(executed), parameters=params, kernel_name=kernel_name,
                            progress_bar=False, log_output=False,
                            extra_arguments=["--IPKernelApp.log_level=ERROR"])
    except PapermillExecutionError as err:
        tb = _ANSI.sub("", "\n".join(err.traceback))
        run.write_summary(status="failed", error=f"{err.ename}: {err.evalue}",
                          finished=time.strftime("%Y-%m-%dT%H:%M:%S"))
        raise NotebookRunError(
            f"{source.name} failed in cell In [{err.exec_count}]: {err.ename}: {err.evalue}\n"
            f"{tb}\nexecuted notebook (up to the failing cell): {executed}",
            err.ename, err.evalue, tb, run_dir, executed) from None
    summary = run.read_summary()
    # the run's config names the experiment file ("default" without one); list the run under its directory
    run.write_summary(experiment=run_dir.parent.name)
    if summary.get("status") == "created":
        # the notebook ran through without training (no RunContext wrote to the directory)
        run.write_summary(status="done", finished=time.strftime("%Y-%m-%dT%H:%M:%S"))
    return run_dir, executed
