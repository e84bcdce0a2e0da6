"""Shared by the notebook tests: execute a notebook of ``notebooks/`` with papermill in the ``maze-lab`` kernel
(through maze-lab's own ``run_notebook``, into a run directory) and read back what its cells produced."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
EXECUTED = REPO / "test-artifacts" / "executed"
"""Where each notebook the tests executed is kept (git-ignored): the documentation site shows these outputs instead
of executing the notebooks again (``docs/conf.py``)."""


def execute(name: str, tmp_path: Path, **parameters: Any) -> tuple[Path, dict]:
    """Execute ``notebooks/<name>`` with its defaults (plus ``parameters``) under ``tmp_path``; returns the run
    directory and the executed notebook as a dict (nbformat JSON). A copy of the executed notebook is kept as
    ``test-artifacts/executed/<name>`` for the documentation site."""
    from maze_lab.run.papermill_run import run_notebook

    run_dir, executed = run_notebook(NOTEBOOKS / name, parameters, log_base_dir=tmp_path / "outputs")
    text = executed.read_text()
    EXECUTED.mkdir(parents=True, exist_ok=True)
    part = EXECUTED / f".{Path(name).name}.{os.getpid()}.part"
    part.write_text(text)
    part.replace(EXECUTED / Path(name).name)  # whole or not at all, for a docs build reading it meanwhile
    return run_dir, json.loads(text)


def cells(nb: dict, kind: str = "code") -> list[dict]:
    """The cells of one kind, in order."""
    return [c for c in nb["cells"] if c["cell_type"] == kind]


def source(cell: dict) -> str:
    """A cell's source as one string."""
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def text_of(cell: dict) -> str:
    """Everything a code cell printed or returned as text (streams, text/plain results)."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append("".join(out["text"]) if isinstance(out["text"], list) else out["text"])
        elif "data" in out and "text/plain" in out["data"]:
            data = out["data"]["text/plain"]
            parts.append("".join(data) if isinstance(data, list) else data)
    return "".join(parts)


def all_text(nb: dict) -> str:
    """The text output of every code cell, joined."""
    return "\n".join(text_of(c) for c in cells(nb))


def cell_with(nb: dict, marker: str) -> dict:
    """The first code cell whose source contains ``marker``."""
    for c in cells(nb):
        if marker in source(c):
            return c
    raise AssertionError(f"no code cell contains {marker!r}")


def mime_types(cell: dict) -> set[str]:
    """The MIME types of a cell's rich outputs (images, widgets, HTML)."""
    return {t for out in cell.get("outputs", []) for t in out.get("data", {})}


def result_line(nb: dict, prefix: str) -> dict:
    """The JSON after ``prefix`` on the last printed line that starts with it (notebooks print their key numbers
    as ``<prefix> {...}`` for the tests, e.g. ``summary: {"reward": 195.0}``)."""
    for line in reversed(all_text(nb).splitlines()):
        if line.startswith(prefix):
            return json.loads(line[len(prefix):])
    raise AssertionError(f"no line starting with {prefix!r} in the executed notebook")


def execute_with_summary(name: str, tmp_path_factory: Any, **parameters: Any) -> tuple[Path, dict, dict]:
    """Execute ``notebooks/<name>`` once (a module fixture's work) into a fresh temporary directory: (run directory,
    executed notebook, the JSON of its ``summary:`` line)."""
    run_dir, nb = execute(name, tmp_path_factory.mktemp(Path(name).stem), **parameters)
    return run_dir, nb, result_line(nb, "summary:")


def parameters_source(name: str) -> str:
    """The source of the one cell tagged ``parameters`` of the committed ``notebooks/<name>`` (that every notebook
    has cleared outputs, the ``maze-lab`` kernel and one such cell, ``test_notebooks.py`` checks for all of them)."""
    nb = json.loads((NOTEBOOKS / name).read_text())
    tagged = [c for c in cells(nb) if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"{name}: {len(tagged)} cells tagged 'parameters'"
    return source(tagged[0])
