"""Two tabs of the cockpit about one run: its whole configuration as a searchable table, and its console log.

``ConfigView`` lists every value of the run's ``config.yaml`` by its dotted key (every hyperparameter, the env, the
model, the runner), with the seed and the versions the run recorded, filtered by a search box. ``ConsoleView`` shows
the tail of the run's ``console.log`` (its epoch lines; a detached run's whole console), followed while the run
lives. Both read the run directory with the same checks as every other reader: bounded reads, no symlink leaving
the run, no FIFO or device, nothing instantiated.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w

from maze_lab.run.run_dir import RunDirectory

MAX_ROWS = 2000
"""The most rows the configuration table shows at once (a filter narrows them)."""


def flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted.key, value)`` for every leaf of nested mappings and lists (lists by index: ``wrappers.0.name``)."""
    if isinstance(value, dict):
        items = [(f"{prefix}.{k}" if prefix else str(k), v) for k, v in value.items()]
    elif isinstance(value, list | tuple) and value and any(isinstance(v, dict | list | tuple) for v in value):
        items = [(f"{prefix}.{i}", v) for i, v in enumerate(value)]
    else:
        return [(prefix, value)]
    out: list[tuple[str, Any]] = []
    for key, item in items:
        out.extend(flatten(item, key) if isinstance(item, dict | list | tuple) else [(key, item)])
    return out


class ConfigView:
    """The run's configuration, seed and versions as one searchable table."""

    def __init__(self, source: Any):
        self.source = source
        self.rows: list[tuple[str, str]] = []
        """Every ``(key, value)`` the table can show, in the order of the configuration."""
        self.search = w.Text(placeholder="search keys and values, e.g. lr seed env.name",
                             layout=w.Layout(width="360px"))
        self.count = w.HTML()
        self.table = w.HTML()
        self.table.add_class("maze-lab-config-table")
        self.search.observe(lambda _: self._draw(), names="value")
        self.widget = w.VBox([w.HBox([self.search, self.count], layout=w.Layout(align_items="center",
                                                                               grid_gap="10px")), self.table])
        self._loaded = False

    def update(self, force: bool = False) -> bool:
        """Read the configuration once it exists (it does not change afterwards)."""
        if self._loaded and not force:
            return False
        run_dir = getattr(self.source, "run_dir", None)
        if run_dir is None:
            self.table.value = "<i>statistics only: no run directory, so no configuration to show</i>"
            return False
        directory = RunDirectory(run_dir)
        if not directory.config_file.exists():
            self.table.value = "<i>the run has not written its configuration yet</i>"
            return False
        config = directory.read_config()
        summary = directory.read_summary() if directory.summary_file.exists() else {}
        rows = [(key, _text(value)) for key, value in flatten(config)]
        recorded = [("seed (recorded)", summary.get("seed"))]
        recorded += [(f"versions.{k}", v) for k, v in (summary.get("versions") or {}).items()]
        self.rows = rows + [(key, _text(value)) for key, value in recorded if value is not None]
        self._loaded = True
        self._draw()
        return True

    def matching(self) -> list[tuple[str, str]]:
        """The rows whose key or value holds every word of the search (case does not matter)."""
        words = self.search.value.lower().split()
        return [(k, v) for k, v in self.rows if all(word in f"{k} {v}".lower() for word in words)]

    def _draw(self) -> None:
        rows = self.matching()
        shown = rows[:MAX_ROWS]
        body = "".join(f"<tr><td style='padding:1px 10px 1px 0;font-family:monospace'>{html.escape(k)}</td>"
                       f"<td style='padding:1px 0;font-family:monospace'>{html.escape(v)}</td></tr>"
                       for k, v in shown)
        self.count.value = (f"{len(rows)} of {len(self.rows)} values" if self.search.value.strip()
                            else f"{len(self.rows)} values") + (f" (first {MAX_ROWS} shown)" if len(rows) > MAX_ROWS
                                                               else "")
        self.table.value = ("<div style='max-height:420px;overflow:auto'><table style='border-collapse:collapse;"
                            f"font-size:12px'>{body}</table></div>" if shown else "<i>no value matches</i>")

    def close(self) -> None:
        for widget in (self.search, self.count, self.table, self.widget.children[0], self.widget):
            widget.close()


class ConsoleView:
    """The tail of the run's console log (its epoch lines), followed while the run lives; the newest line at the
    bottom, in view."""

    MAX_BYTES = 64 * 1024
    """How much of the end of the log is shown."""

    def __init__(self, source: Any):
        self.source = source
        self.text = ""
        """The text shown (the tail of the log)."""
        self.html = w.HTML()
        self.html.add_class("maze-lab-console-log")
        self.widget = w.VBox([self.html])
        self._seen: tuple[int, int] | None = None

    def update(self, force: bool = False) -> bool:
        """Read the log's tail where the file changed since the last read."""
        run_dir = getattr(self.source, "run_dir", None)
        if run_dir is None:
            self.html.value = "<i>statistics only: no run directory, so no console log</i>"
            return False
        directory = RunDirectory(run_dir)
        try:
            info = directory.console_log.lstat()
            mark = (info.st_size, info.st_mtime_ns)
        except FileNotFoundError:
            mark = (0, 0)
        if mark == self._seen and not force:
            return False
        self._seen = mark
        self.text = directory.read_console_tail(self.MAX_BYTES)
        if not self.text:
            self.html.value = "<i>nothing printed yet: the run writes a line here at the end of each epoch</i>"
            return True
        # a column in reverse order keeps the scroll position at the bottom, where the newest line is
        self.html.value = ("<div style='display:flex;flex-direction:column-reverse;max-height:360px;overflow:auto;"
                           "border:1px solid #d0d7de;background:#f6f8fa'><pre style='margin:0;padding:6px 8px;"
                           f"font-size:12px;line-height:1.35'>{html.escape(self.text)}</pre></div>")
        return True

    def close(self) -> None:
        self.html.close()
        self.widget.close()


def _text(value: Any) -> str:
    return "null" if value is None else str(value)
