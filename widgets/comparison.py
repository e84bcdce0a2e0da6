"""Compare runs side by side: chosen statistics overlaid (one colour per run), a table of final and best metrics
with only the hyperparameters that differ, and a parallel-coordinates view of hyperparameters against a metric.

The runs are a list of run directories (or handles, contexts, loaded runs), a grid (the ``RunContext`` of a
multirun, or the table its ``train()`` returned), or the runs of a base directory filtered by experiment
(:meth:`RunComparison.from_base_dir`). Every run is read through :class:`~maze_lab.widgets.sources.RunSource`:
a damaged, deleted, failed or still-running run is listed with its status and never breaks the view.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import ipywidgets as w
import numpy as np
import plotly.graph_objects as go

from maze_lab.run.run_dir import MARKER
from maze_lab.run.runs import differing_params, find_run_dirs, flatten_config
from maze_lab.widgets.plotly_widgets import FigureWidget, chart_layout
from maze_lab.widgets.sources import RunSource, SeriesBook
from maze_lab.widgets.theme import TEXT, themed
from maze_lab.widgets.view import PollingView

DEFAULT_STATISTICS = ("eval/BaseEnvEvents/reward/mean", "train/BaseEnvEvents/reward/mean")
"""Shown until the user picks others (where the runs have them)."""

METRIC_COLUMNS = ("run", "status", "epochs", "env_steps", "final_eval_reward", "best_eval_reward", "best_epoch",
                  "final_train_reward")
"""The table's columns before the differing hyperparameters; ``error`` and ``run_dir`` follow them."""

PARCOORDS_METRICS = ("final_eval_reward", "best_eval_reward", "final_train_reward")
"""Metrics the parallel-coordinates view can colour by."""

_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
            "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354")
_EVAL_REWARD = "eval/BaseEnvEvents/reward/mean"
_TRAIN_REWARD = "train/BaseEnvEvents/reward/mean"
_FINAL = ("done", "stopped", "early-stopped", "failed", "interrupted", "died", "damaged", "deleted")


_LABEL_PARAMS = 4
"""At most this many hyperparameters name a run in the legend (the table has them all)."""


def _counts(labels: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    return counts


def _short_keys(keys: list[str]) -> dict[str, str]:
    """For each dotted key the shortest end of it that no other key ends with (``algorithm.lr`` -> ``lr``)."""
    out = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            end = ".".join(parts[-n:])
            if not any(other != key and (other == end or other.endswith("." + end)) for other in keys):
                break
        out[key] = end
    return out


def _clip(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _DirRef:
    """A path given to RunSource without opening it: a deleted directory or one that is not (yet) a run must still
    be listed, where ``RunSource(path)`` would refuse it."""

    def __init__(self, path: Path):
        self.path = path
        self.directory = None


class _Entry:
    """One run of the comparison and what was last drawn of it."""

    def __init__(self, key: str, source: RunSource, color: str):
        self.key = key
        self.source = source
        self.color = color
        self.name = source.name
        self.label = source.name
        self.series_version = -1
        self.book = SeriesBook()
        self.series: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.config_stamp: Any = None
        self.config: dict[str, Any] = {}


def _fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _last_line(text: Any, limit: int = 300) -> str | None:
    if not text:
        return None
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    line = lines[-1] if lines else str(text)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


class RunComparison(PollingView):
    """Runs overlaid on chosen statistics, a table of their final and best metrics with the hyperparameters that
    differ, and a parallel-coordinates view of those hyperparameters against a metric.

    :param runs: run directories (or RunHandles, RunContexts, LoadedRuns, RunSources), a multirun ``RunContext``
        (its runs so far; a grid still training adds runs on :meth:`update`), or the table a grid's ``train()``
        returned (its ``run_dir`` column).
    :param statistics: the statistics to overlay, as ``prefix/Topic/event/name`` (default: eval and train reward
        means); the picker in the widget changes them.
    :param refresh_seconds: how often the kernel's event loop calls :meth:`update` once the widget is displayed.
    :param base_dir: also take in every run under this directory, now and on each :meth:`update` (see
        :meth:`from_base_dir`).
    :param experiment: with ``base_dir``: only the runs of this experiment.
    :param group: with ``base_dir``: only the runs of this sweep, notebook batch or Optuna study (the ``group`` of
        ``maze-lab runs``, e.g. ``sweep:sweep-20261124-071500-ab12`` or ``study:optimize-ppo_cartpole``).
    """

    def __init__(self, runs: Any = (), statistics: Iterable[str] | None = None, refresh_seconds: float = 1.0,
                 base_dir: str | Path | None = None, experiment: str | None = None, group: str | None = None):
        self.refresh_seconds = refresh_seconds
        self.base_dir: Path | None = Path(base_dir) if base_dir is not None else None
        self.experiment = experiment
        self.group = group
        self._grid_context: Any = None
        self.grid_keys: list[str] = []
        self._entries: dict[str, _Entry] = {}
        self._chosen: list[str] = list(statistics) if statistics is not None else []
        self._user_chose = statistics is not None
        self._signature: Any = None
        self._figures: dict[str, go.FigureWidget] = {}
        self._drawn: dict[str, dict[str, tuple[tuple, Any]]] = {}
        self._table_cache: Any = None
        self._parcoords_signature: Any = None
        self._syncing = False
        self._build_widgets()
        self._add_sources(runs)
        self.update(force=True)

    @classmethod
    def from_base_dir(cls, base_dir: str | Path, experiment: str | None = None, group: str | None = None,
                      **kwargs: Any) -> RunComparison:
        """The runs under ``base_dir`` (only those of ``experiment`` and of ``group`` where given); runs that appear
        later are picked up by :meth:`update`, and runs deleted meanwhile stay listed as ``deleted``.

        :param kwargs: ``statistics`` and ``refresh_seconds`` as for the constructor.
        """
        return cls((), base_dir=base_dir, experiment=experiment, group=group, **kwargs)

    # ---- the set of runs -------------------------------------------------------------------------------------
    def _add_sources(self, runs: Any) -> None:
        """Take in the runs given to the constructor (a grid context is re-read on every update)."""
        if runs is None:
            return
        if hasattr(runs, "_single") and getattr(runs, "multirun", False):  # the RunContext of a grid
            self._grid_context = runs
            self.grid_keys = list(getattr(runs, "grid_keys", []))
            return
        if hasattr(runs, "columns") and "run_dir" in getattr(runs, "columns", ()):  # the table of a grid
            from maze_lab.run.runs import RUN_TABLE_COLUMNS

            self.grid_keys = [c for c in runs.columns if c not in RUN_TABLE_COLUMNS]
            runs = [Path(p) for p in runs["run_dir"] if isinstance(p, str | Path)]
        elif isinstance(runs, str | Path) or not isinstance(runs, Iterable):
            runs = [runs]
        for item in runs:
            self._add(item)

    def _add(self, item: Any) -> bool:
        """Add one run (unless it is there already); returns whether it was new."""
        if isinstance(item, str | Path):
            path = Path(item).expanduser()
            key = str(path.resolve()) if path.exists() else str(path.absolute())
            if key in self._entries:
                return False
            source = RunSource(path) if (path / MARKER).is_file() else RunSource(_DirRef(path))
        else:
            source = item if isinstance(item, RunSource) else RunSource(item)
            key = str(source.run_dir.resolve()) if source.run_dir is not None else f"store-{id(source.store)}"
            if key in self._entries:
                return False
        entry = _Entry(key, source, _PALETTE[len(self._entries) % len(_PALETTE)])
        names = {e.name for e in self._entries.values()}
        base, n = entry.name, 2
        while entry.name in names:
            entry.name, n = f"{base} ({n})", n + 1
        entry.label = entry.name
        self._entries[key] = entry
        return True

    def _discover(self) -> bool:
        """New runs of the grid context or the base directory; returns whether any came."""
        new = False
        if self._grid_context is not None:
            for run in list(getattr(self._grid_context, "runs", [])):
                with_dir = getattr(run, "run_directory", None)
                if with_dir is not None:
                    new |= self._add(Path(with_dir.path))
        if self.base_dir is not None:
            for path in find_run_dirs(self.base_dir, self.experiment, self.group):
                new |= self._add(path)
        return new

    @property
    def runs(self) -> list[str]:
        """The names of the runs, in the order they were added."""
        return [e.name for e in self._entries.values()]

    # ---- data ------------------------------------------------------------------------------------------------
    def _config(self, entry: _Entry) -> dict[str, Any]:
        """The run's configuration as plain data, re-read only when ``config.yaml`` changed."""
        run_dir = entry.source.run_dir
        if run_dir is None:
            return {}
        try:
            st = (run_dir / "config.yaml").stat()
            stamp: Any = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if stamp != entry.config_stamp:
            entry.config = entry.source.config() if stamp is not None else {}
            entry.config_stamp = stamp
        return entry.config

    def _series(self, entry: _Entry) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Every scalar statistic of the run as ``{prefix/Topic/event/name: (epochs, values)}`` (taken in epoch by
        epoch as the run's store grows)."""
        store = entry.source.store
        version = entry.source.version  # moves on too where the statistics were read anew (a replaced file)
        if version != entry.series_version:
            entry.book.update(store)
            out = {"/".join(key): series for key, series in entry.book.series.items()}
            entry.series, entry.series_version = dict(sorted(out.items())), version
        return entry.series

    def statistics(self) -> list[str]:
        """The scalar statistics present in any run (``prefix/Topic/event/name``)."""
        return sorted({s for e in self._entries.values() for s in self._series(e)})

    def curves(self, statistic: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """``{run name: (epochs, values)}`` of one statistic, for the runs that have it."""
        out = {}
        for entry in self._entries.values():
            series = self._series(entry).get(statistic)
            if series is not None:
                out[entry.name] = (series[0].copy(), series[1].copy())
        return out

    def differing_params(self) -> list[str]:
        """The dotted config keys whose values differ between the runs (run-specific keys such as ``log_base_dir``
        left out; runs whose configuration cannot be read take no part)."""
        keys = differing_params([self._config(e) for e in self._entries.values()])
        first = [k for k in self.grid_keys if k in keys]
        return first + [k for k in keys if k not in first]

    def _status(self, entry: _Entry) -> str:
        run_dir = entry.source.run_dir
        if run_dir is not None and not run_dir.exists():
            return "deleted"
        if run_dir is not None and entry.source.handle is None and not (run_dir / MARKER).exists():
            return "not a run"
        return entry.source.status

    def _row(self, entry: _Entry, params: list[str]) -> dict[str, Any]:
        source = entry.source
        series = self._series(entry)
        summary = source.summary() if source.run_dir is not None else {}
        progress = dict(source.handle.progress) if source.handle is not None else {}
        row: dict[str, Any] = dict.fromkeys(METRIC_COLUMNS)
        row["run"], row["status"] = entry.name, self._status(entry)
        epochs = [int(s[0][-1]) for s in series.values() if len(s[0])]
        row["epochs"] = progress.get("epoch", summary.get("epoch")) if not epochs else max(epochs)
        row["env_steps"] = progress.get("env_steps", summary.get("env_steps"))
        ev = series.get(_EVAL_REWARD)
        if ev is not None and len(ev[1]):
            best = int(np.nanargmax(ev[1])) if np.isfinite(ev[1]).any() else len(ev[1]) - 1
            row["final_eval_reward"], row["best_eval_reward"] = float(ev[1][-1]), float(ev[1][best])
            row["best_epoch"] = int(ev[0][best])
        else:
            row["final_eval_reward"] = _number(progress.get("last_eval_reward", summary.get("last_eval_reward")))
            row["best_eval_reward"] = _number(summary.get("best_eval_reward"))
            row["best_epoch"] = summary.get("best_epoch")
        tr = series.get(_TRAIN_REWARD)
        row["final_train_reward"] = float(tr[1][-1]) if tr is not None and len(tr[1]) else \
            _number(summary.get("final_train_reward"))
        flat = flatten_config(self._config(entry))
        for key in params:
            value = flat.get(key)
            row[key] = _fmt_value(value) if isinstance(value, list | dict) else value
        errors = [source.load_error and f"statistics: {source.load_error}", _last_line(source.error)]
        if row["status"] == "died":  # its process is gone: when it was last seen
            errors.append(source.reason)
        if row["status"] == "not a run":
            below = next(source.run_dir.glob(f"*/{MARKER}"), None) or next(source.run_dir.glob(f"*/*/{MARKER}"), None)
            errors.append(f"{source.run_dir} has no {MARKER}" + (
                f"; it holds runs: compare them with RunComparison.from_base_dir('{source.run_dir}')"
                if below is not None else ""))
        row["error"] = "; ".join(e for e in errors if e) or None
        row["run_dir"] = str(source.run_dir) if source.run_dir is not None else None
        return row

    def table(self) -> Any:
        """One row per run: status, epochs, env steps, final and best eval reward, final train reward, the
        hyperparameters that differ, the error (where any) and the run directory."""
        import pandas as pd

        params = self.differing_params()
        rows = [self._row(e, params) for e in self._entries.values()]
        df = pd.DataFrame(rows, columns=[*METRIC_COLUMNS, *params, "error", "run_dir"])
        for column in ("epochs", "env_steps", "best_epoch"):
            df[column] = pd.to_numeric(df[column], errors="coerce").astype("Int64")
        for column in ("final_eval_reward", "best_eval_reward", "final_train_reward"):
            df[column] = pd.to_numeric(df[column], errors="coerce").astype(float)
        return df

    def _labels(self, params: list[str]) -> None:
        """Legend names: the hyperparameters that differ (the grid's keys first; at most four, shortened to the
        shortest unambiguous end of their dotted keys: ``lr=0.001``), else the run's name."""
        chosen = [k for k in self.grid_keys if k in params] or params
        shown = chosen[:_LABEL_PARAMS]
        short = _short_keys(shown)
        labels = {}
        for entry in self._entries.values():
            cfg = self._config(entry)
            if not shown or not cfg:
                labels[entry.key] = entry.name
                continue
            flat = flatten_config(cfg)
            text = ", ".join(f"{short[k]}={_clip(_fmt_value(flat.get(k, '–')))}" for k in shown)
            labels[entry.key] = text + (", …" if len(chosen) > len(shown) else "")
        # runs that nothing tells apart (the same settings, or no configuration in common): their seed and start time
        counts = _counts(labels.values())
        for entry in self._entries.values():
            label = labels[entry.key]
            if counts[label] > 1 or label == entry.name:
                who = self._seed_and_start(entry)
                if who:
                    labels[entry.key] = who if label == entry.name else f"{label}, {who}"
        counts = _counts(labels.values())
        for entry in self._entries.values():
            label = labels[entry.key]
            entry.label = label if counts[label] == 1 else f"{label} ({entry.name})"

    def _seed_and_start(self, entry: _Entry) -> str:
        """``seed 3, 06:21:04`` of a run (its recorded seed and when it started), as far as it recorded them."""
        summary = entry.source.summary() if entry.source.run_dir is not None else {}
        seed = summary.get("seed", self._config(entry).get("seed"))
        when = str(summary.get("started") or summary.get("created") or "")
        parts = [f"seed {seed}"] if seed is not None else []
        if "T" in when:
            parts.append(when.split("T", 1)[1][:8])
        return ", ".join(parts)

    # ---- the widget ------------------------------------------------------------------------------------------
    def _build_widgets(self) -> None:
        self.header = w.HTML()
        self.message = w.HTML()
        self.stat_filter = w.Text(placeholder="filter statistics (e.g. reward, loss, eval/)", description="find",
                                  layout=w.Layout(width="420px"))
        self.stat_select = w.SelectMultiple(options=[], rows=8, description="statistics",
                                            layout=w.Layout(width="620px"))
        self.stat_filter.observe(lambda _: self._sync_picker(), names="value")
        self.stat_select.observe(self._on_pick, names="value")
        self.curve_box = w.VBox()
        self.sort_by = w.Dropdown(options=list(METRIC_COLUMNS), value="run", description="sort by")
        self.descending = w.Checkbox(value=False, description="descending")
        self.sort_by.observe(lambda _: self._draw_table(), names="value")
        self.descending.observe(lambda _: self._draw_table(), names="value")
        self.table_html = w.HTML()
        self.parcoords_metric = w.Dropdown(options=list(PARCOORDS_METRICS), value="final_eval_reward",
                                           description="colour by")
        self.parcoords_metric.observe(lambda _: self._draw_parcoords(), names="value")
        self.parcoords_note = w.HTML()
        self.parcoords = FigureWidget(data=[go.Parcoords(dimensions=[])],
                                      layout={"height": 400, "margin": {"t": 100, "b": 30, "l": 80, "r": 150},
                                              "title": {"text": "hyperparameters → metric", "y": 0.97}})
        self.tabs = w.Tab(children=[
            w.VBox([self.stat_filter, self.stat_select, self.curve_box]),
            w.VBox([w.HBox([self.sort_by, self.descending]), self.table_html]),
            w.VBox([self.parcoords_metric, self.parcoords_note, self.parcoords]),
        ])
        for i, title in enumerate(("Curves", "Table", "Parameters")):
            self.tabs.set_title(i, title)
        self.widget = themed(w.VBox([self.header, self.message, self.tabs]))

    def update(self, force: bool = False) -> bool:
        """Discover new runs, take in what each run wrote since, and redraw what changed; returns whether anything
        changed. Never raises: a failure is shown in the widget."""
        if self._closed:
            return False
        errors: list[str] = []
        changed = False
        try:
            changed = self._discover()
            for entry in self._entries.values():
                # the summary first: a run that reads as ended has flushed its statistics before saying so
                if entry.source.run_dir is not None:
                    entry.source.summary(max_age=0)  # a few kB; the status must not lag behind the statistics
                entry.source.refresh()
            signature = tuple((e.key, e.source.version, self._status(e), e.source.load_error,
                               tuple(sorted((k, str(v)) for k, v in (e.source.summary().items()
                                                                     if e.source.run_dir else ())
                                            if k in ("epoch", "env_steps", "updated"))))
                              for e in self._entries.values())
            changed = changed or signature != self._signature
            self._signature = signature
        except Exception as err:  # noqa: BLE001 - a widget never lets an error out of its refresh
            errors.append(f"reading the runs: {type(err).__name__}: {err}")
        if changed or force:
            for part in (self._draw_labels, self._sync_picker, self._draw_curves, self._draw_table,
                         self._draw_parcoords, self._draw_header):
                try:
                    part()
                except Exception as err:  # noqa: BLE001 - one broken part leaves the others drawn
                    errors.append(f"{part.__name__.strip('_').replace('_', ' ')}: {type(err).__name__}: {err}")
        self.message.value = "".join(
            f"<div style='color:#a93226;font-family:monospace;white-space:pre-wrap'>{html.escape(e)}</div>"
            for e in errors)
        return changed

    def _draw_labels(self) -> None:
        self._labels(self.differing_params())

    def _draw_header(self) -> None:
        counts: dict[str, int] = {}
        for entry in self._entries.values():
            status = self._status(entry)
            counts[status] = counts.get(status, 0) + 1
        where = ""
        if self.base_dir is not None:
            where = f" under <code>{html.escape(str(self.base_dir))}</code>"
            if self.experiment is not None:
                where += f", experiment <b>{html.escape(self.experiment)}</b>"
            if self.group is not None:
                where += f", group <b>{html.escape(self.group)}</b>"
        if self.grid_keys:
            where += f", a grid over {html.escape(', '.join(self.grid_keys))}"
        parts = ", ".join(f"{n} {html.escape(s)}" for s, n in sorted(counts.items()))
        self.header.value = (f"<b>{len(self._entries)} run{'s' if len(self._entries) != 1 else ''}</b>{where}"
                             + (f" ({parts})" if parts else ""))

    # curves
    def _sync_picker(self) -> None:
        available = self.statistics()
        if not self._user_chose:
            self._chosen = [s for s in DEFAULT_STATISTICS if s in available]
        needle = self.stat_filter.value.strip().lower()
        shown = [s for s in available if needle in s.lower()]
        options = sorted(set(shown) | set(self._chosen))
        self._syncing = True
        try:
            if list(self.stat_select.options) != options:
                self.stat_select.options = options
            if list(self.stat_select.value) != [s for s in options if s in self._chosen]:
                self.stat_select.value = tuple(s for s in options if s in self._chosen)
        finally:
            self._syncing = False

    def _on_pick(self, change: Mapping[str, Any]) -> None:
        if self._syncing:
            return
        self._chosen, self._user_chose = list(change["new"]), True
        try:
            self._draw_curves()
            self.message.value = ""
        except Exception as err:  # noqa: BLE001 - shown, never raised into the widget's event handler
            self.message.value = f"<div style='color:#a93226'>curves: {html.escape(str(err))}</div>"

    def select(self, statistics: Iterable[str]) -> None:
        """Overlay these statistics (``prefix/Topic/event/name``)."""
        self._chosen, self._user_chose = list(statistics), True
        self._sync_picker()
        self._draw_curves()

    @property
    def selected(self) -> list[str]:
        """The statistics overlaid now."""
        return list(self._chosen)

    def _draw_curves(self) -> None:
        for stat in [s for s in self._figures if s not in self._chosen]:
            self._figures.pop(stat).close()
            self._drawn.pop(stat, None)
        for stat in self._chosen:
            fig = self._figures.get(stat)
            if fig is None:
                fig = self._figures[stat] = FigureWidget(layout=chart_layout(  # the cockpit's look
                    stat, 300, "epoch", stat.rsplit("/", 2)[-2].replace("_", " "),
                    margin={"t": 40, "b": 40, "l": 64, "r": 10}, legend={"title": {"text": "run"}}))
                self._drawn[stat] = {}
            drawn = self._drawn[stat]  # run key -> (what was drawn, its trace)
            with fig.batch_update():
                for entry in self._entries.values():
                    series = self._series(entry).get(stat)
                    if series is None and entry.key not in drawn:
                        continue  # no empty legend entries for runs without this statistic
                    x, y = series if series is not None else (np.zeros(0, np.int64), np.zeros(0))
                    state = (entry.series_version, entry.label, len(x))
                    previous = drawn.get(entry.key)
                    if previous is not None and previous[0] == state:
                        continue
                    if previous is None:
                        fig.add_scatter(x=x, y=y, mode="lines+markers", name=entry.label,
                                        line={"color": entry.color}, marker={"size": 5},
                                        hovertemplate=f"{html.escape(entry.name)}<br>epoch %{{x}}: %{{y:.4g}}"
                                                      "<extra></extra>")
                        trace = fig.data[-1]
                    else:
                        trace = previous[1]
                        trace.x, trace.y = x, y
                        if trace.name != entry.label:
                            trace.name = entry.label
                    drawn[entry.key] = (state, trace)
            last = max((int(e.series.get(stat, ((0,), ()))[0][-1]) for e in self._entries.values()
                        if len(e.series.get(stat, ((), ()))[0])), default=0)
            dtick = 1 if last <= 12 else None  # no half epochs on the axis of a short run
            if fig.layout.xaxis.dtick != dtick:
                fig.layout.xaxis.dtick = dtick
        self.curve_box.children = [self._figures[s] for s in self._chosen]

    # table
    def _draw_table(self) -> None:
        df = self.table()
        self._table_cache = df
        columns = [c for c in df.columns if c != "run_dir"]
        if list(self.sort_by.options) != columns:
            keep = self.sort_by.value if self.sort_by.value in columns else "run"
            self.sort_by.options = columns
            self.sort_by.value = keep
        if not df.empty and self.sort_by.value in df.columns:
            ranks = _sort_keys(df[self.sort_by.value], descending=self.descending.value)
            df = df.iloc[np.argsort(ranks, kind="stable")]
        self.table_html.value = _table_html(df)

    # parallel coordinates
    def _draw_parcoords(self) -> None:
        metric = self.parcoords_metric.value
        df = self._table_cache if self._table_cache is not None else self.table()
        params = self.differing_params()
        rows = df[[_number(v) is not None for v in df[metric]]] if not df.empty else df
        if not params or len(rows) < 2:
            self.parcoords_note.value = ("<i>The parallel-coordinates view needs at least two runs with a "
                                         f"{html.escape(metric)} that differ in a hyperparameter.</i>")
            signature: Any = None
            if signature != self._parcoords_signature:
                self.parcoords.data[0].dimensions = []
                self._parcoords_signature = signature
            return
        self.parcoords_note.value = ""
        dims = []
        for key in params:
            values = list(rows[key])
            numbers = [_number(v) for v in values]
            if all(n is not None for n in numbers):
                dims.append({"label": key, "values": numbers})
                continue
            cats = sorted({str(v) for v in values})
            dims.append({"label": key, "values": [cats.index(str(v)) for v in values],
                         "tickvals": list(range(len(cats))), "ticktext": cats})
        colour = [float(v) for v in rows[metric]]
        dims.append({"label": metric, "values": colour})
        signature = repr((dims, metric))
        if signature == self._parcoords_signature:
            return
        with self.parcoords.batch_update():
            self.parcoords.data[0].dimensions = dims
            # the colour bar stands clear of the last axis (its labels need room on the right)
            self.parcoords.data[0].line = {"color": colour, "colorscale": "Viridis", "showscale": True,
                                           "colorbar": {"title": {"text": metric}, "x": 1.04, "xanchor": "left",
                                                        "thickness": 14}}
        self._parcoords_signature = signature

    # ---- live --------------------------------------------------------------------------------------------------
    @property
    def live(self) -> bool:
        """Whether runs may still change or appear (a base directory or a grid is watched; a run is still going)."""
        return (self.base_dir is not None or self._grid_context is not None
                or any(self._status(e) not in _FINAL for e in self._entries.values()))

    def close(self) -> None:
        """Stop updating and close the widgets (figures of statistics no longer shown too)."""
        super().close()
        for fig in self._figures.values():
            fig.close()
        self.parcoords.close()


_STATUS_COLOURS = {"done": "#1e8449", "early-stopped": "#1e8449", "stopped": "#7d6608", "running": "#1f618d",
                   "paused": "#1f618d", "starting": "#1f618d", "stopping": "#1f618d", "created": "#1f618d",
                   "failed": "#a93226", "died": "#a93226", "damaged": "#a93226", "interrupted": "#a04000",
                   "deleted": "#7f8c8d", "not a run": "#7f8c8d"}
_TABLE_CSS = ("<style>.maze-lab-cmp{border-collapse:collapse}.maze-lab-cmp td,.maze-lab-cmp th{padding:3px 9px;"
              "text-align:right;font-family:system-ui,sans-serif;font-size:13px;white-space:nowrap;"
              "border-bottom:1px solid var(--jp-border-color2,#e5e8e8)}"
              ".maze-lab-cmp th{background:var(--jp-layout-color2,#f2f3f4)}"
              ".maze-lab-cmp td.l,.maze-lab-cmp th.l{text-align:left}"
              ".maze-lab-cmp td.err{white-space:normal;max-width:420px;text-align:left;color:#a93226}</style>")


def _cell_text(value: Any) -> str:
    import pandas as pd

    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _table_html(df: Any) -> str:
    """The table as HTML: statuses coloured, the run's directory on hover, errors wrapped."""
    columns = [c for c in df.columns if c != "run_dir"]
    head = "".join(f"<th class='l'>{html.escape(str(c))}</th>" if c in ("run", "status", "error") else
                   f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = []
    for record in df.to_dict("records"):
        cells = []
        for column in columns:
            text = html.escape(_cell_text(record[column]))
            if column == "run":
                cells.append(f"<td class='l' title='{html.escape(str(record.get('run_dir') or ''))}'>{text}</td>")
            elif column == "status":
                colour = _STATUS_COLOURS.get(str(record[column]), TEXT)
                why = html.escape(_cell_text(record.get("error")), quote=True)  # the reason on hover as well
                cells.append(f"<td class='l' style='color:{colour};font-weight:600' title='{why}'>{text}</td>")
            elif column == "error":
                cells.append(f"<td class='err'>{text}</td>")
            else:
                cells.append(f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f"{_TABLE_CSS}<div style='overflow-x:auto'><table class='maze-lab-cmp'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _sort_keys(column: Any, descending: bool = False) -> np.ndarray:
    """Ranks of a table column of mixed types: numbers first (ascending or descending), then text, blanks last."""
    keys = []
    for value in column:
        number = _number(value)
        if number is not None:
            keys.append((0, -number if descending else number, ""))
        elif value is None or (isinstance(value, float) and math.isnan(value)):
            keys.append((2, 0.0, ""))
        else:
            keys.append((1, 0.0, str(value)))
    order = sorted(range(len(keys)), key=keys.__getitem__)
    ranks = np.empty(len(keys), dtype=np.int64)
    ranks[order] = np.arange(len(keys))
    return ranks
