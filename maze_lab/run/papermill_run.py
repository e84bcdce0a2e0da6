"""Notebook runs: execute a parameterised notebook with papermill into a fresh run directory.

The run directory is created first and handed to the notebook as its ``run_dir`` parameter; the executed
notebook (with all its outputs) is saved into that directory, next to the config, statistics and checkpoints
the notebook's RunContext writes there. papermill is imported only when a notebook is run.

papermill writes the parameters into the notebook as Python source (its injected-parameters cell), so a parameter's
value is only ever a plain Python literal: a string, int, float, bool or None, or a list or mapping of those (mapping
keys strings), that reads back as the same value. Anything else (bytes, dates, sets, tuples, objects, floats that are
not finite) is refused before anything runs, by :func:`check_parameter` (``run_notebook`` and the batches) and
:func:`parse_parameter` (``maze-lab run -p NAME VALUE``, which also refuses YAML tags, anchors and aliases).
"""

from __future__ import annotations

import ast
import math
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.run.run_dir import RunDirectory, default_outputs_dir, new_run_dir

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

PARAMETER_VALUES = ("a string, int, float, bool or null (None), or a list or mapping of those (mapping keys strings) "
                    "that reads back as the same value")
"""What a notebook parameter may be (it is written into the notebook as a Python literal)."""

_MAX_DEPTH = 100
"""How deeply lists and mappings of a parameter may nest."""


def _what(value: Any) -> str:
    """A value's kind in words, for a refusal."""
    import datetime

    kinds = {bytes: "bytes (e.g. YAML !!binary)", bytearray: "bytes", set: "a set (e.g. YAML !!set)",
             frozenset: "a set", tuple: "a tuple", complex: "a complex number"}
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return f"a {type(value).__name__}, {value} (YAML reads an unquoted date as one; quote it to pass the text)"
    kind = next((text for cls, text in kinds.items() if isinstance(value, cls)), None)
    if kind is None:
        kind = f"a {type(value).__module__}.{type(value).__qualname__} object"
    shown = repr(value)
    return f"{kind}, {shown[:60]}{'...' if len(shown) > 60 else ''}"


def _refusal(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` is not a plain literal (None: it is one)."""
    if depth > _MAX_DEPTH:
        return f"lists and mappings nested more than {_MAX_DEPTH} levels deep"
    kind = type(value)
    if value is None or kind in (str, int, bool):
        return None
    if kind is float:
        return None if math.isfinite(value) else f"the float {value!r} (not finite: it has no literal)"
    if kind is list:
        return next((r for r in (_refusal(v, depth + 1) for v in value) if r is not None), None)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return f"the mapping key {key!r} ({_what(key)})"
            refused = _refusal(item, depth + 1)
            if refused is not None:
                return refused
        return None
    return _what(value)


def check_parameter(name: str, value: Any) -> None:
    """Refuse a notebook parameter's value that is not a plain Python literal (see :data:`PARAMETER_VALUES`).

    :raises ConfigurationError: one line naming the parameter, what it holds and what is allowed.
    """
    refused = _refusal(value)
    if refused is None:
        try:
            same = ast.literal_eval(repr(value)) == value
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            same = False
        if not same:
            refused = f"{_what(value)} (it does not read back as the same value)"
    if refused is not None:
        raise ConfigurationError(f"notebook parameter '{name}': {refused} is not allowed; a notebook parameter is "
                                 f"{PARAMETER_VALUES}")


def check_parameters(parameters: Mapping[str, Any]) -> None:
    """:func:`check_parameter` for each ``name -> value`` (names must be strings)."""
    for name, value in parameters.items():
        if type(name) is not str:
            raise ConfigurationError(f"notebook parameter name {name!r} is not a string; parameters are named by "
                                     f"the variables of the notebook's cell tagged 'parameters'")
        check_parameter(name, value)


def parse_parameter(name: str, text: str) -> Any:
    """A ``-p NAME VALUE`` value: read as YAML (``3``, ``0.001``, ``true``, ``[64, 64]``, ``'{a: 1}'``; text that
    is not YAML stays text), then checked by :func:`check_parameter`. YAML tags (``!!binary``, ``!!set``, ...),
    anchors and aliases are refused.

    :raises ConfigurationError: one line naming the parameter.
    """
    import yaml

    try:
        tokens = list(yaml.scan(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError:
        return text  # not YAML: the text itself (as maze-lab run -p has always read it)
    tag = next((t for t in tokens if isinstance(t, yaml.TagToken)), None)
    if tag is not None:
        shown = "".join(part or "" for part in tag.value) if isinstance(tag.value, tuple) else str(tag.value)
        raise ConfigurationError(f"notebook parameter '{name}': the YAML tag {shown} is not allowed; a notebook "
                                 f"parameter is {PARAMETER_VALUES} (quote the value to pass it as text)")
    if any(isinstance(t, yaml.AnchorToken | yaml.AliasToken) for t in tokens):
        raise ConfigurationError(f"notebook parameter '{name}': YAML anchors and aliases (&name, *name) are not "
                                 f"allowed; a notebook parameter is {PARAMETER_VALUES}")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    except RecursionError:
        raise ConfigurationError(f"notebook parameter '{name}': lists and mappings nested too deeply are not "
                                 f"allowed; a notebook parameter is {PARAMETER_VALUES}") from None
    check_parameter(name, value)
    return value


def _check_written(name: str, value: Any) -> None:
    """What papermill writes into the notebook for ``value`` must read back as ``value`` (a single literal)."""
    from papermill.translators import PythonTranslator

    written = PythonTranslator.translate(value)
    try:
        same = ast.literal_eval(written) == value
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        same = False
    if not same:
        raise ConfigurationError(f"notebook parameter '{name}': {_what(value)} would be written into the notebook "
                                 f"as {written[:60]!r}, which does not read back as the same value; a notebook "
                                 f"parameter is {PARAMETER_VALUES}")


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
                 summary_fields: Mapping[str, Any] | None = None, progress_bar: bool = False) -> tuple[Path, Path]:
    """Execute ``notebook`` with papermill into a new run directory; returns ``(run_dir, executed_notebook)``.

    :param notebook: a notebook with a cell tagged ``parameters``.
    :param parameters: values for the parameters cell (names must be declared there); ``run_dir`` is set here.
    :param log_base_dir: base of the run directory ``<log_base_dir>/<experiment or "notebook">/<timestamp>``;
        a ``log_base_dir`` in ``parameters`` takes precedence; default: the default location of runs
        (``$MAZE_LAB_OUTPUTS``, else ``<project root>/outputs``, see ``maze_lab.run.run_dir``).
    :param kernel_name: the Jupyter kernel (default: the one named in the notebook's metadata).
    :param summary_fields: more fields for the run's summary, written when the directory is made (a batch's id).
    :param progress_bar: papermill's progress bar over the notebook's cells (on stderr).
    :raises NotebookRunError: a cell raised (the message carries the cell's traceback).
    :raises ConfigurationError: a parameter the notebook does not declare, or a value that is not a plain Python
        literal (see :func:`check_parameter`); nothing is made or run then.
    """
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    source = Path(notebook)
    if not source.is_file():
        raise FileNotFoundError(f"notebook {source} does not exist")
    params = dict(parameters or {})
    check_parameters(params)
    for name, value in params.items():
        _check_written(name, value)
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
                            progress_bar=progress_bar, log_output=False,
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
