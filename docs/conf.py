"""Sphinx configuration of maze-lab's documentation site: ``.venv/bin/python -m sphinx -b html docs docs/_build/html``.

Before Sphinx reads the sources, two things are generated here (both git-ignored):

- ``_generated/notebooks/NN_*.ipynb``: the user guide, one page per numbered notebook of ``notebooks/``. The
  notebooks are never executed by this build (``nb_execution_mode = "off"``): a page shows the copy the notebook
  tests executed (``test-artifacts/executed/<name>``, written by ``tests/notebook_utils.execute``; another folder
  with ``MAZE_LAB_EXECUTED_NOTEBOOKS``) when its cells are those of the committed notebook, else the committed
  notebook without outputs under an admonition that says so.
- ``api.rst``: the API reference, one autodoc entry per name of ``maze_lab.__all__``, grouped by the module that
  defines it (``maze_lab._EXPORTS``).

``-D maze_lab_generate=0`` skips both (the test of a broken cross-reference builds a tiny copy of the site).
"""

from __future__ import annotations

import inspect
import json
import os
import re
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
NOTEBOOKS = REPO / "notebooks"
GENERATED = DOCS / "_generated"
EXECUTED = Path(os.environ.get("MAZE_LAB_EXECUTED_NOTEBOOKS") or REPO / "test-artifacts" / "executed")

project = "maze-lab"
author = "the maze-lab authors"
copyright = "the maze-lab authors, MIT license"
release = version = "0.1.0"

extensions = ["myst_nb", "sphinx.ext.autodoc"]

exclude_patterns = ["_build", "**/.ipynb_checkpoints", "README*"]
html_theme = "furo"
html_title = "maze-lab"
html_static_path: list[str] = []
html_show_sourcelink = False

# MyST: links to the headings of Markdown pages (``[the console](guide.md#the-console)``), ``:::`` fences
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# the notebooks are shown as the tests executed them, never executed here
nb_execution_mode = "off"
nb_merge_streams = True
nb_output_stderr = "show"

# docstrings use reST field lists (``:param x:``), read by autodoc itself
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True}
autodoc_typehints = "signature"
autodoc_inherit_docstrings = False

# ---- the user guide: the notebooks, as the tests executed them -------------------------------------------------------

_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
_PLOTLY = "application/vnd.plotly.v1+json"
_RENDERED = {"text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg", "image/svg+xml",
             "image/gif", "application/pdf", "application/javascript"}
"""The MIME types myst-nb renders (what else an output carries is left out of the page)."""

_NOT_EXECUTED = """```{{admonition}} Not executed in this build
:class: warning

{reason} This page shows the notebook without its outputs; the documentation build never executes notebooks.
Run it in JupyterLab (`.venv/bin/maze-lab jupyter notebooks/{name}`) or execute it with
`.venv/bin/maze-lab run notebooks/{name}`; the notebook tests (`tests/test_notebook*.py`) keep the copies they
execute in `test-artifacts/executed/`, which the next build of this site shows.
```
"""

_EXECUTED = """```{{note}}
The outputs on this page are those of the test suite's papermill run of `notebooks/{name}` with {parameters}{when}.
Interactive widgets (the cockpit, the viewers) are live only in JupyterLab; here each one is named where it appeared.
```
"""

_WHERE_TO_WRITE = {"run_dir", "log_base_dir"}
"""Parameters every papermill run gets (where it writes), which change none of its numbers."""


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _cells_of(nb: dict) -> list[tuple[str, str]]:
    """A notebook's cells as (type, source), without papermill's injected parameters cell."""
    return [(c["cell_type"], _source(c).rstrip()) for c in nb.get("cells", [])
            if "injected-parameters" not in c.get("metadata", {}).get("tags", [])]


def _markdown_cell(text: str, cell_id: str) -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": text}


def _plotly_html(figure: dict) -> str | None:
    """A plotly figure (the JSON of its MIME bundle) as a static ``<div>`` drawn by plotly.js, or None without
    plotly."""
    try:
        import plotly.io as pio
    except ImportError:
        return None
    drawn = pio.to_html(figure, include_plotlyjs=False, full_html=False, validate=False,
                        config={"displaylogo": False, "responsive": True})
    # the theme loads its scripts (plotly.js among them) at the end of the page: draw once they are there
    return re.sub(r"<script([^>]*)>(.*?)</script>",
                  lambda m: f'<script{m.group(1)}>window.addEventListener("DOMContentLoaded", function () {{'
                            f'{m.group(2)}}});</script>', drawn, flags=re.S)


def _widget_note(cell: dict) -> str:
    """Markdown standing in for a widget output: the expression that showed it (the cell's last line)."""
    lines = [line for line in _source(cell).splitlines() if line.strip() and not line.lstrip().startswith("#")]
    shown = lines[-1].split("#", 1)[0].strip() if lines else "the widget"
    return (f"*An interactive widget was shown here (`{shown}`): it is live in JupyterLab or voila and has no "
            f"static picture on this page.*")


def _for_site(nb: dict, name: str, state: str, reason: str = "") -> tuple[dict, bool]:
    """The notebook as the site shows it: the admonition saying where its outputs come from, papermill's injected
    parameters cell removed, widget outputs replaced by a note (their state is not kept), plotly figures as static
    HTML; returns the notebook and whether a page needs plotly.js."""
    needs_plotly = False
    cells = []
    for cell in nb.get("cells", []):
        cell = dict(cell)
        tags = list(cell.get("metadata", {}).get("tags", []))
        if "injected-parameters" in tags:
            cell["metadata"] = {**cell["metadata"], "tags": [*tags, "remove-cell"]}
        if cell["cell_type"] == "code":
            outputs = []
            for out in cell.get("outputs", []):
                data = out.get("data", {})
                if _WIDGET_VIEW in data:
                    data = {"text/markdown": _widget_note(cell)}
                elif _PLOTLY in data and "text/html" not in data:
                    drawn = _plotly_html(data[_PLOTLY])
                    if drawn is not None:
                        needs_plotly = True
                        data = {**data, "text/html": drawn}
                if "data" in out:
                    # myst-nb renders every MIME type of a bundle before it picks one: leave out those it cannot
                    out = {**out, "data": {k: v for k, v in data.items() if k in _RENDERED}}
                outputs.append(out)
            cell["outputs"] = outputs
        cells.append(cell)
    if state == "executed":
        papermill = nb.get("metadata", {}).get("papermill", {})
        when = papermill.get("end_time") or ""
        given = {k: v for k, v in (papermill.get("parameters") or {}).items() if k not in _WHERE_TO_WRITE}
        parameters = ("its default parameters" if not given else
                      "the parameters " + ", ".join(f"`{k} = {v!r}`" for k, v in sorted(given.items())))
        note = _EXECUTED.format(name=name, parameters=parameters,
                                when=f" (finished {when[:16].replace('T', ' ')} UTC)" if when else "")
    else:
        note = _NOT_EXECUTED.format(name=name, reason=reason)
    # after the title cell, so that the page's title stays its first heading
    at = 1 if cells and cells[0]["cell_type"] == "markdown" and _source(cells[0]).lstrip().startswith("# ") else 0
    cells.insert(at, _markdown_cell(note, "maze-lab-docs-outputs-note"))
    metadata = {k: v for k, v in nb.get("metadata", {}).items() if k != "widgets"}
    return {**nb, "metadata": metadata, "cells": cells}, needs_plotly


def _write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` unless the file holds it already (Sphinx re-reads a page whose file changed); atomically, for a
    second build reading it meanwhile."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    part.write_text(text, encoding="utf-8")
    part.replace(path)


PLOTLY_PAGES: set[str] = set()
"""Pages (docnames) with plotly figures: plotly.js is added to these only."""

def generate_notebooks() -> dict[str, str]:
    """``_generated/notebooks/``: every numbered notebook of ``notebooks/`` as the site shows it; returns each one's
    state: ``executed``, ``missing`` (no executed copy), ``stale`` (its cells differ from the committed notebook's)
    or ``unreadable``."""
    out = GENERATED / "notebooks"
    states: dict[str, str] = {}
    sources = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    for path in sources:
        committed = json.loads(path.read_text(encoding="utf-8"))
        nb, state, reason = committed, "missing", "No executed copy of this notebook was at hand."
        executed_path = EXECUTED / path.name
        if executed_path.is_file():
            try:
                executed = json.loads(executed_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                state, reason = "unreadable", f"The executed copy {executed_path.name} could not be read."
            else:
                if _cells_of(executed) == _cells_of(committed):
                    nb, state = executed, "executed"
                else:
                    state, reason = "stale", "The executed copy at hand is of an older version of this notebook."
        states[path.stem] = state
        shown, needs_plotly = _for_site(nb, path.name, state, reason)
        if needs_plotly:
            PLOTLY_PAGES.add(f"_generated/notebooks/{path.stem}")
        _write_if_changed(out / path.name, json.dumps(shown, indent=1, ensure_ascii=False) + "\n")
    wanted = {p.name for p in sources}
    for old in out.glob("*.ipynb"):  # a notebook renamed or removed since the last build
        if old.name not in wanted:
            old.unlink()
    try:
        import plotly
    except ImportError:
        return states
    _write_if_changed(GENERATED / "_static" / "plotly.min.js",
                      (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text(encoding="utf-8"))
    return states


# ---- the API reference: every name of maze_lab.__all__ ---------------------------------------------------------------

_API_INTRO = """\
API reference
=============

Everything a notebook imports from ``maze_lab`` (``from maze_lab import RunContext, GymMazeEnv, PPO``), grouped by
the module that defines it. ``import maze_lab`` is light: each name is imported on first use, so ``dir(maze_lab)``
lists all of them without loading torch. The widgets (``maze_lab.widgets``) and the Cutting-2D example
(``maze_lab.examples.cutting2d``) are imported from their own modules; the notebooks of the user guide show them.
This page is generated from the docstrings when the site is built.
"""


def _directive(obj: Any) -> str:
    if inspect.isclass(obj):
        return "autoexception" if issubclass(obj, BaseException) else "autoclass"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return "autofunction"
    return "autodata"


def generate_api() -> None:
    """``api.rst``: one autodoc entry per public name, under the module that defines it (``_EXPORTS``' order)."""
    import maze_lab

    by_module: dict[str, list[str]] = {}
    for module, names in maze_lab._EXPORTS.items():
        by_module.setdefault(module, []).extend(n for n in names if n in maze_lab.__all__)
    listed = {n for names in by_module.values() for n in names}
    missing = sorted(set(maze_lab.__all__) - listed)
    if missing:  # a name exported some other way: documented all the same
        by_module.setdefault("maze_lab", []).extend(missing)
    # the page's table of contents: the modules and their names, not every method of every class
    lines = [_API_INTRO, "", ".. raw:: html", "", "   <style>.toc-tree ul ul ul ul { display: none; }</style>", ""]
    for module, names in by_module.items():
        lines += ["", module, "-" * len(module), ""]
        for name in names:
            obj = getattr(maze_lab, name)
            lines += [f".. {_directive(obj)}:: maze_lab.{name}"]
            if inspect.isclass(obj) and obj.__bases__ != (object,):
                lines += ["   :show-inheritance:"]
            lines += [""]
    _write_if_changed(DOCS / "api.rst", "\n".join(lines) + "\n")


# ---- Sphinx hooks ----------------------------------------------------------------------------------------------------

def _generate(app: Any, config: Any) -> None:
    if str(config.maze_lab_generate).strip().lower() in ("0", "false", "no", "off"):
        return
    from sphinx.util import logging

    states = generate_notebooks()
    executed = [name for name, state in states.items() if state == "executed"]
    others = ", ".join(f"{name} ({state})" for name, state in states.items() if state != "executed")
    logging.getLogger(__name__).info(f"maze-lab: {len(executed)} of {len(states)} notebooks with the outputs of the "
                                     f"tests' executions from {EXECUTED}" + (f"; without outputs: {others}"
                                                                             if others else ""))
    generate_api()
    if (GENERATED / "_static").is_dir():
        config.html_static_path = [*config.html_static_path, str(GENERATED / "_static")]


def _plotly_js(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    if pagename in PLOTLY_PAGES:
        app.add_js_file("plotly.min.js", priority=200)


def setup(app: Any) -> dict[str, Any]:
    app.add_config_value("maze_lab_generate", True, "env", types=frozenset({bool, int, str}))
    app.connect("config-inited", _generate)
    app.connect("html-page-context", _plotly_js)
    return {"parallel_read_safe": True}

