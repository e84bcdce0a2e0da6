"""The run cockpit: a run's status, progress and controls, and curves of every statistic it logs.

``TrainingDashboard(source)`` reads a live ``RunHandle``, a ``RunContext``, an ``AttachedRun`` or the directory of
any run, live (a detached run, another kernel's, a terminal's), finished, failed or died, a ``LoadedRun`` or a bare
``StatsStore`` (through :class:`~maze_lab.widgets.sources.RunSource`). A live run gets pause, resume, stop and
checkpoint buttons: a RunHandle of this kernel is asked directly, any other run through its directory without
waiting, and the cockpit shows when the run acknowledged the request. A run's ending is shown with its reason (an
early stop's patience, a failure's last line, when a run that died was last seen). The statistics to
plot are discovered from the data: every (topic, event, name) the run logged becomes a chart, so a custom env's
own event topics, imitation learning's and the trainers' statistics show without being listed anywhere. Where an
event logs ``mean``, ``min`` and ``max`` (rewards, KPIs, most custom statistics) the chart is a mean line over a
min–max band; train, eval and any other prefix are overlaid in one chart.

Redraws happen on the kernel's own event loop (an asyncio task, about once per second), only when a new epoch
was published or the status changed; a redraw takes in only the statistics published since the last one (a
:class:`~maze_lab.widgets.sources.SeriesBook`) and updates, in place, the traces of the statistics that changed.
A drawing error is shown in the cockpit and never reaches the run. Other views join as tabs with
:meth:`TrainingDashboard.add_tab`.
"""

from __future__ import annotations

import html
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import ipywidgets as w
import numpy as np
import plotly.graph_objects as go

from maze_lab.widgets.plotly_widgets import FigureWidget, chart_layout
from maze_lab.widgets.sources import RunSource, SeriesBook
from maze_lab.widgets.theme import themed
from maze_lab.widgets.view import PollingView

STATUS_COLORS = {"starting": "#6e7781", "created": "#6e7781", "running": "#1a7f37", "paused": "#9a6700",
                 "stopping": "#9a6700", "done": "#0969da", "stopped": "#57606a", "early-stopped": "#0969da",
                 "failed": "#cf222e", "interrupted": "#bc4c00", "died": "#cf222e", "damaged": "#cf222e",
                 "deleted": "#cf222e", "unknown": "#6e7781"}
"""The badge colour of each run status."""

ENDED = ("done", "stopped", "early-stopped", "failed", "interrupted", "died", "damaged", "deleted")
"""Statuses after which a run changes no more."""

X_AXES = {"env_steps": "env steps", "wall_time": "wall time (s)", "epoch": "epoch"}
"""What the curves can be drawn over: the key and its axis title."""

_PROGRESS = ("train", "TrainingProgressEvents")
"""Where the trainers record the env steps and training seconds of each epoch (the x-axes other than epoch)."""
_PROGRESS_EVENTS = {"env_steps": "env_steps", "wall_time": "time_training"}

_PREFIX_COLORS = {"train": "#1f77b4", "eval": "#d62728", "validation": "#2ca02c", "test": "#9467bd"}
_PALETTE = ("#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
_BAND = ("mean", "min", "max")


_CHECKED_FIRST = {"policy_entropy", "approx_kl", "clip_fraction", "entropy_coef", "critic_value", "policy_lag",
                  "perturbed_return_mean"}
"""Besides rewards, KPIs, losses and accuracies, the statistics a practitioner checks first: entropy, KL and clip
fraction (PPO), the entropy coefficient and value estimates (SAC, actor-critics), the policy lag (IMPALA), the
perturbed returns (ES)."""


@dataclass(frozen=True)
class Chart:
    """One chart of the cockpit: a statistic of a (topic, event), with every prefix (train, eval, ...) overlaid.

    A band chart draws the ``mean`` of a family (``mean``, ``min``, ``max`` with the same group suffix ``rest``)
    as a line over its min–max band; a plain chart draws one statistic ``name``.
    """

    topic: str
    event: str
    name: str
    band: bool = False

    @property
    def key(self) -> str:
        """The chart's label in the picker, e.g. ``BaseEnvEvents / kpi / usage (mean, min–max)``."""
        label = f"{self.topic} / {self.event}" + (f" / {self.name}" if self.name else "")
        return label + (" (mean, min–max)" if self.band else "")

    @property
    def title(self) -> str:
        """The figure's title."""
        if self.topic == "BaseEnvEvents" and self.event == "reward":
            if self.band and not self.name:
                return "episode reward (mean, min–max)"
            if self.name == "mean_step_count":
                return "episode length (mean steps)"
        head = self.event + (f" · {self.name}" if self.name else "")
        return head + (" (mean, min–max)" if self.band else "")

    def names(self) -> tuple[str, ...]:
        """The statistic names the chart draws: (mean, min, max) for a band, (name,) otherwise."""
        if not self.band:
            return (self.name,)
        return tuple(stat + (f"/{self.name}" if self.name else "") for stat in _BAND)

    @property
    def default(self) -> bool:
        """Shown without being picked: rewards, episode length, KPIs, losses and accuracies."""
        if self.topic == "BaseEnvEvents":
            if self.event == "reward":
                return (self.band and not self.name) or self.name == "mean_step_count"
            if self.event == "kpi":
                return self.band or self.name.startswith("mean/")
        return "loss" in self.event or "accuracy" in self.event or self.event in _CHECKED_FIRST

    @property
    def y_title(self) -> str:
        """The y-axis title with its unit where one is known."""
        if self.topic == "BaseEnvEvents" and self.event in ("reward", "reward_original"):
            return "steps" if "step_count" in self.name else "episode reward"
        if self.event.startswith("time_"):
            return "seconds"
        if self.event in ("env_steps", "n_env_steps"):
            return "env steps"
        return self.event.replace("_", " ")


def discover_charts(stats: list[tuple[str, str, str]]) -> list[Chart]:
    """The charts for a list of (topic, event, name) in the order logged, BaseEnvEvents first: one band chart per
    family with mean, min and max, one plain chart for every other name."""
    by_event: dict[tuple[str, str], list[str]] = {}
    for topic, event, name in stats:
        by_event.setdefault((topic, event), []).append(name)
    charts: list[Chart] = []
    for (topic, event), names in by_event.items():
        families: dict[str, set[str]] = {}
        for name in names:
            head, _, rest = name.partition("/")
            if head in _BAND:
                families.setdefault(rest, set()).add(head)
        banded = {rest for rest, heads in families.items() if heads == set(_BAND)}
        emitted: set[str] = set()
        for name in names:
            head, _, rest = name.partition("/")
            if head in _BAND and rest in banded:
                if rest not in emitted:
                    emitted.add(rest)
                    charts.append(Chart(topic, event, rest, band=True))
                continue
            charts.append(Chart(topic, event, name))
    charts.sort(key=lambda c: c.topic != "BaseEnvEvents")  # stable: the rest keep the order they were logged in
    return charts


def _fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _fmt_number(value: Any, digits: int = 2) -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return "–"
    return f"{value:.{digits}f}" if np.isfinite(value) else "–"


class _CockpitBox(w.VBox):
    """The cockpit's top widget: closing it (from code or a front-end) also ends the cockpit's polling."""

    def __init__(self, on_close: Any, **kwargs: Any):
        super().__init__(**kwargs)
        self._on_close = on_close

    def close(self) -> None:
        """Close the cockpit (polling, tabs, figures) and this widget."""
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close()
        super().close()


class TrainingDashboard(PollingView):
    """The run cockpit: status, progress, controls and curves of a live, finished or failed run.

    :param source: a RunHandle (live and controllable), a RunContext, a LoadedRun, a StatsStore or the path of a
        run directory (followed while it grows).
    :param refresh_seconds: how often the kernel's event loop looks for new statistics while the run is live.
    """

    def __init__(self, source: Any, refresh_seconds: float = 1.0,
                 tabs: Any = ("Distributions", "Model", "Config", "Console")):
        self.source = RunSource(source)
        self.refresh_seconds = float(refresh_seconds)
        self._seen: tuple[int, str] | None = None
        self._book = SeriesBook()
        self._prefixes: list[str] = []
        self.charts: dict[str, Chart] = {}
        self._selected: set[str] = set()
        self._figures: dict[str, go.FigureWidget] = {}
        self._traces: dict[tuple[str, str, str], Any] = {}
        self._sections: dict[str, tuple[w.HTML, w.GridBox]] = {}
        self._views: list[tuple[str, Any]] = []
        self._rates: deque[tuple[float, int, int]] = deque(maxlen=120)
        self.errors: list[str] = []
        """Drawing errors caught so far (newest last); the newest is shown in the cockpit."""
        self.ticks = 0
        """Polls done (tests wait on it)."""

        # ---- header
        self.status_html = w.HTML()
        self.progress_bar = w.FloatProgress(min=0.0, max=1.0, value=0.0, layout=w.Layout(width="260px"))
        self.progress_html = w.HTML()
        self.pause_button = w.Button(description="pause", icon="pause", layout=w.Layout(width="90px"),
                                     tooltip="pause the run between updates")
        self.resume_button = w.Button(description="resume", icon="play", layout=w.Layout(width="95px"),
                                      tooltip="continue the paused run")
        self.stop_button = w.Button(description="stop", icon="stop", button_style="danger",
                                    layout=w.Layout(width="80px"), tooltip="stop after the current update and "
                                                                           "write a checkpoint")
        self.checkpoint_button = w.Button(description="checkpoint", icon="save", layout=w.Layout(width="115px"),
                                          tooltip="write a checkpoint of the current weights now; the run goes on")
        for button, action in ((self.pause_button, "pause"), (self.resume_button, "resume"),
                               (self.stop_button, "stop"), (self.checkpoint_button, "checkpoint")):
            button.add_class(f"maze-lab-cockpit-{action}")
            button.on_click(lambda _, action=action: self._control(action))
        self.controls = w.HBox([self.pause_button, self.resume_button, self.stop_button, self.checkpoint_button])
        self.control_html = w.HTML(layout=w.Layout(display="none"))
        """The last request to the run and its acknowledgement."""
        self.control_html.add_class("maze-lab-cockpit-request")
        self.warnings_html = w.HTML(layout=w.Layout(display="none"))
        self.reason_html = w.HTML(layout=w.Layout(display="none"))
        """How the run ended, with its reason (a failure's is in :attr:`error_html`)."""
        self.reason_html.add_class("maze-lab-cockpit-reason")
        self.error_html = w.HTML(layout=w.Layout(display="none"))
        self.draw_error_html = w.HTML(layout=w.Layout(display="none"))
        header_row = w.HBox([self.status_html, self.progress_bar, self.progress_html, self.controls,
                             self.control_html],
                            layout=w.Layout(align_items="center", flex_flow="row wrap", grid_gap="10px"))
        self.header = w.VBox([header_row, self.warnings_html, self.reason_html, self.error_html,
                              self.draw_error_html])
        self.header.add_class("maze-lab-cockpit-header")
        self._request: Any = None

        # ---- statistics picker and curves
        self.filter_text = w.Text(placeholder="filter, e.g. loss kpi reward", layout=w.Layout(width="260px"))
        self.picker = w.SelectMultiple(options=[], rows=12, layout=w.Layout(width="520px"))
        self.picker_count = w.HTML()
        defaults = w.Button(description="defaults", layout=w.Layout(width="85px"),
                            tooltip="rewards, episode length, KPIs, losses")
        show_all = w.Button(description="all", layout=w.Layout(width="60px"), tooltip="every statistic that "
                                                                                        "matches the filter")
        show_none = w.Button(description="none", layout=w.Layout(width="60px"), tooltip="hide every statistic "
                                                                                          "that matches the filter")
        defaults.on_click(lambda _: self._guarded(self._pick_defaults))
        show_all.on_click(lambda _: self._guarded(lambda: self._pick_matching(True)))
        show_none.on_click(lambda _: self._guarded(lambda: self._pick_matching(False)))
        self._syncing_picker = False
        self.filter_text.observe(lambda _: self._guarded(self._sync_picker), names="value")
        self.picker.observe(self._on_pick, names="value")
        buttons = w.HBox([defaults, show_all, show_none])
        picker_left = w.VBox([self.filter_text, buttons, self.picker_count])
        picker_box = w.HBox([picker_left, self.picker], layout=w.Layout(grid_gap="12px"))
        self.picker_panel = w.Accordion(children=[picker_box], selected_index=None)
        self.picker_panel.set_title(0, "statistics")
        self.x_axis = w.Dropdown(options=[(title, key) for key, title in X_AXES.items()], value="env_steps",
                                 description="x-axis", layout=w.Layout(width="210px"))
        self.smoothing = w.FloatSlider(value=0.0, min=0.0, max=0.99, step=0.01, description="smoothing",
                                       readout_format=".2f", continuous_update=False, layout=w.Layout(width="330px"),
                                       tooltip="exponential moving average of each curve; the raw curve stays faint "
                                               "behind it")
        self.x_axis.add_class("maze-lab-x-axis")
        self.smoothing.add_class("maze-lab-smoothing")
        self.x_axis.observe(lambda _: self._guarded(lambda: self._draw_curves(None)), names="value")
        self.smoothing.observe(lambda _: self._guarded(lambda: self._draw_curves(None)), names="value")
        self.curve_controls = w.HBox([self.x_axis, self.smoothing],
                                     layout=w.Layout(align_items="center", grid_gap="12px"))
        self.curves = w.VBox()
        self.empty_html = w.HTML("<i>no statistics yet: the curves appear once the run finished its first epoch</i>")
        self.tabs = w.Tab(children=[w.VBox([self.picker_panel, self.curve_controls, self.empty_html, self.curves])])
        self.tabs.set_title(0, "Curves")
        self._own_widgets = [self.status_html, self.progress_bar, self.progress_html, self.pause_button,
                             self.resume_button, self.stop_button, self.checkpoint_button, self.controls,
                             self.control_html, self.warnings_html, self.reason_html, self.error_html,
                             self.draw_error_html, header_row, self.header, self.filter_text,
                             self.picker, self.picker_count, defaults, show_all, show_none, buttons, picker_left,
                             picker_box, self.picker_panel, self.x_axis, self.smoothing, self.curve_controls,
                             self.curves, self.empty_html, self.tabs.children[0],
                             self.tabs]
        self.widget = themed(_CockpitBox(self.close, children=[self.header, self.tabs]))
        self._lazy: dict[int, tuple[str, Any]] = {}
        self.tabs.observe(self._open_lazy_tab, names="selected_index")
        for title in tabs:
            self.add_lazy_tab(title, _STANDARD_TABS[title])
        self.refresh(force=True)

    # ---- polling (see PollingView) ------------------------------------------------------------------------------
    def update(self, force: bool = False) -> bool:
        """Take in new statistics, redraw what changed and update the tabs (what each poll does)."""
        return self.refresh(force=force)

    def _poll_error(self, what: str, err: BaseException) -> None:
        self._show_error("cockpit" if what == "drawing" else what, err)

    def close(self) -> None:
        """Stop polling, close the tabs' views and every widget of the cockpit."""
        if self._closed:
            return
        self._closed = True
        self.stop_updates()
        for title, view in self._views:
            closer = getattr(view, "close", None)
            if callable(closer):
                try:
                    closer()
                except Exception as err:  # noqa: BLE001 - one broken view must not keep the others open
                    self.errors.append(f"closing {title}: {err!r}")
        for fig in self._figures.values():
            fig.close()
        for title, grid in self._sections.values():
            title.close()
            grid.close()
        for widget in self._own_widgets:
            widget.close()
        if self.widget._on_close is not None:  # closed from code, not through the top widget
            self.widget.close()

    # ---- tabs ----------------------------------------------------------------------------------------------------
    def add_tab(self, title: str, view: Any) -> Any:
        """Show another view of the run as a tab; ``view`` has ``.widget`` (an ipywidget), ``.update()`` (redraw
        where its source has new data; cheap otherwise), called after each refresh of the cockpit, and optionally
        ``.close()``, called when the cockpit closes. Returns the view."""
        if not isinstance(getattr(view, "widget", None), w.Widget) or not callable(getattr(view, "update", None)):
            raise TypeError(f"a cockpit tab needs an object with .widget (an ipywidget) and .update(), got "
                            f"{type(view).__name__}")
        self._views.append((title, view))
        self.tabs.children = (*self.tabs.children, view.widget)
        self.tabs.set_title(len(self.tabs.children) - 1, title)
        self._guarded(view.update, title)
        return view

    def add_lazy_tab(self, title: str, make_view: Any) -> None:
        """A tab whose view is built by ``make_view(source)`` when the tab is first selected (opening the cockpit
        stays fast); then it is updated like a view of :meth:`add_tab`."""
        placeholder = w.VBox([w.HTML(f"<i>{title}: opens when this tab is selected</i>")])
        self._own_widgets.append(placeholder)
        self.tabs.children = (*self.tabs.children, placeholder)
        index = len(self.tabs.children) - 1
        self.tabs.set_title(index, title)
        self._lazy[index] = (title, make_view)

    def _open_lazy_tab(self, change: dict) -> None:
        entry = self._lazy.pop(change["new"], None) if change.get("new") is not None else None
        if entry is None or self._closed:
            return
        title, make_view = entry
        placeholder = self.tabs.children[change["new"]]
        try:
            view = make_view(self.source)
        except Exception as err:  # noqa: BLE001 - shown in the tab, the cockpit goes on
            placeholder.children = (w.HTML(f"<span style='color:#b91c1c'>{title} could not be opened: "
                                           f"{type(err).__name__}: {err}</span>"),)
            return
        self._views.append((title, view))
        placeholder.children = (view.widget,)
        self._guarded(lambda: view.update(force=True), title)

    def open_tab(self, title: str) -> Any:
        """Select a tab by title (building its view if it is a lazy one); returns its view (None for Curves)."""
        titles = [self.tabs.get_title(i) for i in range(len(self.tabs.children))]
        if title not in titles:
            raise KeyError(f"no tab {title!r}; tabs: {titles}")
        self.tabs.selected_index = titles.index(title)
        return self.views.get(title)

    @property
    def views(self) -> dict[str, Any]:
        """The views added with :meth:`add_tab` (and lazy tabs once opened), by title."""
        return dict(self._views)

    # ---- refresh ---------------------------------------------------------------------------------------------
    def refresh(self, force: bool = False) -> bool:
        """Take in new statistics and redraw where a new epoch came or the status changed (always with ``force``);
        then update the tabs. Returns whether the curves were redrawn. Raises nothing a stage of drawing raises:
        each stage's error is shown in the cockpit."""
        if self._closed:
            return False
        self._guarded(self.source.refresh, "reading the run")
        status = self.source.status
        state = (self.source.version, status)
        redrawn = False
        if force or state != self._seen:
            redrawn = self._guarded(self._draw_statistics, "curves")
            if redrawn:
                self._seen = state
        self._guarded(lambda: self._draw_header(status), "header")
        for title, view in self._views:
            self._guarded(view.update, title)
        return bool(redrawn)

    def _guarded(self, fn: Any, what: str = "cockpit") -> Any:
        try:
            result = fn()
        except Exception as err:  # noqa: BLE001 - shown in the cockpit, never raised into the caller's loop
            self._show_error(what, err)
            return False
        return True if result is None else result

    def _show_error(self, what: str, err: BaseException) -> None:
        message = f"{what}: {type(err).__name__}: {err}"
        self.errors.append(message)
        del self.errors[:-20]
        try:
            self.draw_error_html.value = (
                f"<span style='color:#cf222e;font-size:12px'>drawing failed at "
                f"{datetime.now():%H:%M:%S} ({len(self.errors)} so far; the run is not affected): "
                f"{html.escape(message)}</span>")
            self.draw_error_html.layout.display = None
        except Exception:  # noqa: BLE001, S110 - the widget itself may be gone (closed front-end)
            pass

    # ---- header ----------------------------------------------------------------------------------------------
    def _progress(self) -> dict[str, Any]:
        """The source's progress (for statistics alone: the last epoch drawn)."""
        if self.source.handle is None and self.source.run_dir is None:  # statistics only: the last epoch drawn
            epochs = [s[0][-1] for s in self._series.values() if len(s[0])]
            return {"epoch": int(max(epochs)) if epochs else 0}
        return self.source.progress()

    def _draw_header(self, status: str) -> None:
        progress = self._progress()
        bare = self.source.handle is None and self.source.run_dir is None
        color = STATUS_COLORS.get(status, "#6e7781")
        badge = (f"<span style='background:{color};color:#fff;padding:2px 10px;border-radius:10px;"
                 f"font-weight:600'>{'statistics' if bare else html.escape(status)}</span> "
                 f"<code>{html.escape(self.source.name)}</code>")
        _set(self.status_html, "value", badge)
        epoch, n_epochs = progress.get("epoch") or 0, progress.get("n_epochs")
        env_steps = int(progress.get("env_steps") or 0)
        now = time.monotonic()
        if status == "running":
            if not self._rates or self._rates[-1][1:] != (epoch, env_steps):
                self._rates.append((now, int(epoch), env_steps))
        else:
            self._rates.clear()  # a pause or a restart must not count as slow training
        steps_per_s, eta = self._speed(status, epoch, n_epochs, env_steps, now)
        if n_epochs:
            _set(self.progress_bar, "value", min(1.0, float(epoch) / float(n_epochs)))
            _set(self.progress_bar.layout, "display", None)
        else:
            _set(self.progress_bar.layout, "display", "none")
        _set(self.progress_bar, "bar_style", {"done": "success", "early-stopped": "success", "failed": "danger",
                                              "died": "danger", "stopped": "warning", "interrupted": "warning",
                                              "paused": "warning"}.get(status, "info"))
        parts = [f"epoch {epoch}" + (f" / {n_epochs}" if n_epochs else "")]
        if eta is not None:
            parts.append(f"ETA {_fmt_duration(eta)}")
        if not bare:
            parts.append(f"{env_steps:,} env steps")
            if steps_per_s is not None:
                parts.append(f"{steps_per_s:,.0f} steps/s" + ("" if status == "running" else " (mean)"))
            parts.append(f"last eval reward {_fmt_number(progress.get('last_eval_reward'))}")
        _set(self.progress_html, "value", " · ".join(parts))
        self._draw_controls(status)
        warnings = list(progress.get("warnings") or [])
        if self.source.load_error:
            warnings.append(f"the statistics could not be read: {self.source.load_error}")
        if self.source.notice:
            warnings.append(self.source.notice)
        if warnings:
            items = "".join(f"<li>{html.escape(str(m))}</li>" for m in warnings)
            _set(self.warnings_html, "value", f"<div style='background:#fff8c5;border:1px solid #d4a72c;"
                                              f"padding:4px 8px'><b>warnings</b><ul style='margin:2px 0'>"
                                              f"{items}</ul></div>")
        _set(self.warnings_html.layout, "display", None if warnings else "none")
        self._draw_reason(status)
        self._draw_request()
        error = self.source.error
        if error:
            lines = [line for line in str(error).strip().splitlines() if line.strip()]
            message = lines[-1] if lines else str(error)
            _set(self.error_html, "value",
                 f"<div style='border:1px solid #cf222e;background:#ffebe9;padding:4px 8px'>"
                 f"<b style='color:#cf222e'>the run {html.escape(status)}:</b> {html.escape(message)}"
                 f"<details><summary>traceback</summary><pre style='font-size:11px;white-space:pre-wrap'>"
                 f"{html.escape(str(error))}</pre></details></div>")
        _set(self.error_html.layout, "display", None if error else "none")

    def _speed(self, status: str, epoch: int, n_epochs: int | None, env_steps: int,
               now: float) -> tuple[float | None, float | None]:
        """(env steps per second, seconds left): over the last polls while live, over the whole run otherwise."""
        if status == "running" and len(self._rates) >= 2:
            while len(self._rates) > 2 and now - self._rates[0][0] > 60.0:
                self._rates.popleft()
            t0, epoch0, steps0 = self._rates[0]
            elapsed = now - t0
            if elapsed <= 0:
                return None, None
            steps_per_s = (env_steps - steps0) / elapsed
            epochs_per_s = (epoch - epoch0) / elapsed
            eta = (n_epochs - epoch) / epochs_per_s if n_epochs and epochs_per_s > 0 else None
            return steps_per_s, eta
        if status in ENDED:
            summary = self.source.summary()
            try:
                started = datetime.fromisoformat(summary["started"])
                finished = datetime.fromisoformat(summary["finished"])
            except (KeyError, TypeError, ValueError):
                return None, None
            seconds = (finished - started).total_seconds()
            return (env_steps / seconds if seconds > 0 and env_steps else None), None
        return None, None

    def _draw_controls(self, status: str) -> None:
        if status in ENDED or not self.source.controllable:
            _set(self.controls.layout, "display", "none")
            return
        _set(self.controls.layout, "display", None)
        _set(self.pause_button, "disabled", status != "running")
        _set(self.resume_button, "disabled", status != "paused")
        _set(self.stop_button, "disabled", status in ("stopping", *ENDED))
        _set(self.checkpoint_button, "disabled", status not in ("running", "paused"))

    def _draw_reason(self, status: str) -> None:
        """How the run ended and why (a failure's last line is shown by the error box below)."""
        reason = self.source.reason if status in ENDED and status != "failed" else None
        if status == "died" and not reason:
            seen = self.source.last_seen
            reason = "its process ended without recording how the run ended" + (f" (last seen {seen})" if seen
                                                                                  else "")
        if reason:
            color = "#cf222e" if status == "died" else "#57606a"
            background = "#ffebe9" if status == "died" else "#f6f8fa"
            _set(self.reason_html, "value",
                 f"<div style='border-left:4px solid {color};background:{background};padding:3px 8px;"
                 f"font-size:13px' data-status='{html.escape(status, quote=True)}'><b style='color:{color}'>"
                 f"{html.escape(status)}:</b> {html.escape(' '.join(str(reason).split()))}</div>")
        _set(self.reason_html.layout, "display", None if reason else "none")

    def _draw_request(self) -> None:
        """The last request made from this cockpit: waiting for the run, or what the run answered."""
        request = self._request
        if request is None:
            return
        ack = self.source.acknowledgement(request)
        asked = datetime.fromtimestamp(request.at).strftime("%H:%M:%S")
        if ack is None:
            waited = time.time() - request.at
            text, color = f"{request.action} requested at {asked}, waiting for the run ({waited:.0f} s)", "#9a6700"
            state = "pending"
        elif ack.get("error"):
            text, color, state = f"{request.action} refused: {ack['error']}", "#cf222e", "refused"
        else:
            at = ack.get("at")
            when = datetime.fromtimestamp(at).strftime("%H:%M:%S") if isinstance(at, int | float) else asked
            text, color, state = f"{request.action} acknowledged at {when}", "#1a7f37", "acknowledged"
            if request.action == "checkpoint" and ack.get("checkpoint"):
                text = f"checkpoint written at {when}: {Path(str(ack['checkpoint'])).name}"
            elif request.action == "stop":
                text += ": the run ends after its current update, with a checkpoint"
        _set(self.control_html, "value",
             f"<span style='color:{color};font-size:12px' data-action='{request.action}' data-state='{state}'>"
             f"{html.escape(text)}</span>")
        _set(self.control_html.layout, "display", None)

    def _control(self, action: str) -> None:
        """A button's action on the run; never blocks the kernel: the request is made and the cockpit's polling
        shows when the run acknowledged it (stop returns at once, the run ends after its current update)."""
        try:
            self._request = self.source.request(action)
        except Exception as err:  # noqa: BLE001 - shown, the kernel goes on
            self._show_error(action, err)
        self._guarded(lambda: self._draw_header(self.source.status), "header")

    # ---- statistics and curves ---------------------------------------------------------------------------------
    @property
    def _series(self) -> dict[tuple[str, str, str, str], tuple[np.ndarray, np.ndarray]]:
        """Every statistic taken in so far: ``(prefix, topic, event, name) -> (epochs, values)``."""
        return self._book.series

    def _draw_statistics(self) -> bool:
        n_keys = len(self._book.series)
        changed = self._book.update(self.source.store)
        if len(self._series) != n_keys:  # new statistics: charts discovered anew
            self._prefixes = [str(p) for p in dict.fromkeys(key[0] for key in self._series)]
            charts = discover_charts(list(dict.fromkeys(key[1:] for key in self._series)))
            new = [c for c in charts if c.key not in self.charts]
            if new:
                self.charts = {c.key: c for c in charts}  # in display order
                self._selected |= {c.key for c in new if c.default}
                self._sync_picker()
        _set(self.empty_html.layout, "display", "none" if self.charts else None)
        self._draw_curves(changed)
        return True

    def _draw_curves(self, changed: set[tuple[str, str, str, str]] | None = None) -> None:
        """Create the figures of newly shown charts, lay out the topics' sections and update the shown traces (those
        of the statistics in ``changed``; every one where it is None)."""
        shown = [c for key, c in self.charts.items() if key in self._selected]
        for chart in shown:
            if (changed is None or chart.key not in self._figures
                    or any((prefix, chart.topic, chart.event, name) in changed
                           for prefix in self._prefixes for name in chart.names())):
                self._update_figure(chart)
        sections = []
        for topic in dict.fromkeys(c.topic for c in shown):
            if topic not in self._sections:
                self._sections[topic] = (
                    w.HTML(f"<h4 style='margin:8px 0 0 0'>{html.escape(topic)}</h4>"),
                    w.GridBox(layout=w.Layout(grid_template_columns="repeat(auto-fill, minmax(440px, 1fr))",
                                              grid_gap="4px 8px")))
            title, grid = self._sections[topic]
            figs = tuple(self._figures[c.key] for c in shown if c.topic == topic)
            if grid.children != figs:
                grid.children = figs
            sections.extend((title, grid))
        if tuple(self.curves.children) != tuple(sections):
            self.curves.children = tuple(sections)

    def _new_figure(self, chart: Chart, traces: list[dict[str, Any]], dtick: int | None) -> go.FigureWidget:
        scale_buttons = {"type": "buttons", "direction": "right", "x": 1.0, "xanchor": "right", "y": 1.13,
                         "yanchor": "bottom", "pad": {"r": 0, "t": 0}, "showactive": True, "active": 0,
                         "font": {"size": 9}, "bgcolor": "#f6f8fa", "bordercolor": "#d0d7de",
                         "buttons": [{"label": "lin", "method": "relayout", "args": [{"yaxis.type": "linear"}]},
                                     {"label": "log", "method": "relayout", "args": [{"yaxis.type": "log"}]}]}
        layout = chart_layout(chart.title, 280, X_AXES[self.x_axis.value], chart.y_title,
                              margin={"t": 40, "b": 40, "l": 64, "r": 12}, updatemenus=[scale_buttons],
                              legend={"orientation": "h", "y": -0.3, "x": 0})
        layout["xaxis"].update(dtick=dtick, rangemode=self._rangemode())
        # the traces go in with their data: the state a front-end gets when it connects after the figure was made
        # (voila, a reload) then holds the curves, not empty axes. As dicts: the figure validates them once, where
        # trace objects were validated, then copied and validated again (half the time of making a figure)
        fig = FigureWidget(data=[{"type": "scatter", **t} for t in traces], layout=layout)
        fig._maze_chart = chart  # noqa: SLF001 - curve_data reads the chart back from the figure
        return fig

    def _color(self, prefix: str) -> str:
        if prefix in _PREFIX_COLORS:
            return _PREFIX_COLORS[prefix]
        others = [p for p in self._prefixes if p not in _PREFIX_COLORS]
        return _PALETTE[(others.index(prefix) if prefix in others else 0) % len(_PALETTE)]

    def _update_figure(self, chart: Chart) -> None:
        """Make the chart's figure with its data, or assign the latest values to its traces (in place), adding a
        trace only for a new prefix."""
        updates: list[tuple[str, str, dict[str, Any]]] = []
        alpha = float(self.smoothing.value)
        for prefix in self._prefixes:
            line: tuple[np.ndarray, np.ndarray] | None = None
            if chart.band:
                mean_name, min_name, max_name = chart.names()
                line = self._series.get((prefix, chart.topic, chart.event, mean_name))
                lo = self._series.get((prefix, chart.topic, chart.event, min_name))
                hi = self._series.get((prefix, chart.topic, chart.event, max_name))
                if lo is not None and hi is not None:
                    epochs, lo_v, hi_v = _aligned(lo, hi)
                    ok = np.isfinite(lo_v) & np.isfinite(hi_v)
                    epochs, lo_v, hi_v = epochs[ok], lo_v[ok], hi_v[ok]
                    both = np.concatenate([epochs, epochs[::-1]])
                    updates.append((prefix, "band", {"x": self._x_of(both), "y": np.concatenate([hi_v, lo_v[::-1]]),
                                                     "customdata": both}))
            else:
                line = self._series.get((prefix, chart.topic, chart.event, chart.name))
            if line is not None:
                role = "mean" if chart.band else "line"
                updates.append((prefix, role, {"x": self._x_of(line[0]), "y": line[1], "customdata": line[0],
                                               "opacity": 0.35 if alpha > 0 else 1.0}))
                if alpha > 0 or (chart.key, prefix, "smooth") in self._traces:
                    updates.append((prefix, "smooth", {"x": self._x_of(line[0]), "y": ema(line[1], alpha),
                                                       "customdata": line[0], "visible": alpha > 0}))
        last_epoch = max((float(np.max(d["customdata"])) for _, _, d in updates if len(d["customdata"])),
                         default=0.0)
        # whole epochs: no ticks at 0.5 on a short run drawn over epochs
        dtick = 1 if last_epoch <= 10 and self.x_axis.value == "epoch" else None
        y_range = flat_range([d["y"] for _, _, d in updates])
        fig = self._figures.get(chart.key)
        if fig is None:
            fig = self._figures[chart.key] = self._new_figure(
                chart, [{**self._trace_style(prefix, role), **data} for prefix, role, data in updates], dtick)
            if y_range is not None:
                fig.layout.yaxis.range = y_range
            for (prefix, role, _), trace in zip(updates, fig.data, strict=True):
                self._traces[(chart.key, prefix, role)] = trace
            return
        with fig.batch_update():
            if fig.layout.xaxis.dtick != dtick:
                fig.layout.xaxis.dtick = dtick
            if fig.layout.yaxis.type != "log":
                if y_range is not None:
                    fig.layout.yaxis.range = y_range
                elif fig.layout.yaxis.range is not None:  # the values spread out: plotly's own range again
                    fig.layout.yaxis.range, fig.layout.yaxis.autorange = None, True
            x_title = X_AXES[self.x_axis.value]
            if fig.layout.xaxis.title.text != x_title:
                fig.layout.xaxis.title.text = x_title
                fig.layout.xaxis.rangemode = self._rangemode()
            for prefix, role, data in updates:
                trace = self._traces.get((chart.key, prefix, role))
                if trace is None:
                    fig.add_scatter(**self._trace_style(prefix, role), **data)
                    self._traces[(chart.key, prefix, role)] = fig.data[-1]
                    continue
                trace.x, trace.y, trace.customdata = data["x"], data["y"], data["customdata"]
                for name in ("opacity", "visible"):
                    if name in data and getattr(trace, name) != data[name]:
                        setattr(trace, name, data[name])

    def _trace_style(self, prefix: str, role: str) -> dict[str, Any]:
        color, meta = self._color(prefix), {"prefix": prefix, "role": role}
        if role == "band":
            return {"fill": "toself", "fillcolor": color, "opacity": 0.18, "line": {"width": 0}, "mode": "lines",
                    "name": f"{prefix} min–max", "legendgroup": prefix, "hoverinfo": "skip", "meta": meta}
        if role == "smooth":
            return {"mode": "lines", "line": {"color": color, "width": 2}, "legendgroup": prefix,
                    "name": f"{prefix} smoothed", "meta": meta}
        return {"mode": "lines+markers", "marker": {"size": 4}, "line": {"color": color}, "legendgroup": prefix,
                "name": f"{prefix} mean" if role == "mean" else prefix, "meta": meta}

    def _rangemode(self) -> str:
        """Env steps and seconds start at 0 (a run's first epoch is not at the left edge); epochs as they come."""
        return "normal" if self.x_axis.value == "epoch" else "tozero"

    def _x_of(self, epochs: np.ndarray) -> np.ndarray:
        """The positions of ``epochs`` on the chosen x-axis: the epochs themselves, or the env steps or training
        seconds the trainer recorded when each ended (interpolated for an epoch without its own record, 0 at
        epoch 0; the epochs where the run recorded neither, as older runs did)."""
        choice = self.x_axis.value
        if choice == "epoch":
            return np.asarray(epochs)
        progress = self._series.get((*_PROGRESS, _PROGRESS_EVENTS[choice], ""))
        if progress is None or not len(progress[0]):
            return np.asarray(epochs)
        at, values = progress
        return np.interp(np.asarray(epochs, dtype=np.float64), np.concatenate([[0.0], at]),
                         np.concatenate([[0.0], values]))

    # ---- picker ----------------------------------------------------------------------------------------------
    def _matching(self) -> list[str]:
        terms = self.filter_text.value.lower().split()
        return [key for key in self.charts if all(t in key.lower() for t in terms)]

    def _sync_picker(self) -> None:
        """Show the charts matching the filter in the picker, with the shown ones selected."""
        options = self._matching()
        self._syncing_picker = True
        try:
            if list(self.picker.options) != options:
                self.picker.value = ()
                self.picker.options = options
            self.picker.value = tuple(k for k in options if k in self._selected)
        finally:
            self._syncing_picker = False
        self.picker_count.value = (f"{len(self._selected)} of {len(self.charts)} statistics shown"
                                   + (f"; {len(options)} match the filter" if self.filter_text.value.strip() else ""))
        self.picker_panel.set_title(0, f"statistics: {len(self._selected)} of {len(self.charts)} shown "
                                       f"(click to choose)")

    def _on_pick(self, change: dict) -> None:
        if self._syncing_picker:
            return
        visible = set(self.picker.options)
        self._guarded(lambda: self.show((self._selected - visible) | set(change["new"])), "picker")

    def _pick_defaults(self) -> None:
        self.show([key for key, chart in self.charts.items() if chart.default])

    def _pick_matching(self, on: bool) -> None:
        matching = set(self._matching())
        self.show(self._selected | matching if on else self._selected - matching)

    def show(self, keys: Any) -> None:
        """Show exactly the charts ``keys`` (see :attr:`charts`); an unknown key raises KeyError listing them."""
        keys = set(keys)
        unknown = keys - set(self.charts)
        if unknown:
            raise KeyError(f"no chart {sorted(unknown)}; the run has: {list(self.charts)}")
        self._selected = keys
        self._sync_picker()
        self._draw_curves()

    @property
    def shown(self) -> list[str]:
        """The keys of the charts shown, in display order."""
        return [key for key in self.charts if key in self._selected]

    # ---- reading back ----------------------------------------------------------------------------------------
    def figures(self) -> dict[str, go.FigureWidget]:
        """The figures of the shown charts by chart key."""
        return {key: self._figures[key] for key in self.shown if key in self._figures}

    def figure(self, key: str) -> go.FigureWidget:
        """The figure of chart ``key``, shown if it was not."""
        if key not in self._selected:
            self.show(self._selected | {key})
        return self._figures[key]

    @property
    def rewards(self) -> go.FigureWidget:
        """The episode reward chart (traces ``train mean``, ``train min–max``, ``eval mean``, ...)."""
        return self.figure(Chart("BaseEnvEvents", "reward", "", band=True).key)

    def curve_data(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """What the shown figures draw, read back from their traces: ``prefix/topic/event/name -> (epochs,
        values)``, the statistic's name as in the StatsStore (a band gives its ``min`` and ``max`` statistics); the
        raw values, whatever the x-axis and the smoothing."""
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for key in self.shown:
            fig = self._figures.get(key)
            if fig is None:
                continue
            chart = fig._maze_chart  # noqa: SLF001
            names = chart.names()
            for trace in fig.data:
                prefix, role = trace.meta["prefix"], trace.meta["role"]
                if role == "smooth":
                    continue
                base = f"{prefix}/{chart.topic}/{chart.event}/"
                x = np.asarray(trace.customdata if trace.customdata is not None else trace.x)
                y = np.asarray(trace.y, dtype=np.float64)
                if role == "band":
                    n = len(x) // 2
                    out[base + names[2]] = (x[:n], y[:n])
                    out[base + names[1]] = (x[:n], y[n:][::-1])
                else:
                    out[base + names[0]] = (x, y)
        return out

    def to_html(self, path: str | Path) -> Path:
        """A static HTML page of the header and every shown figure (for sharing a run; needs no kernel)."""
        import plotly.io as pio

        parts = [pio.to_html(go.Figure(fig), include_plotlyjs=(i == 0), full_html=False)
                 for i, fig in enumerate(self.figures().values())]
        reason = self.reason_html.value if self.reason_html.layout.display != "none" else ""
        header = self.status_html.value + " " + self.progress_html.value + reason + self.error_html.value
        path = Path(path)
        path.write_text(f"<html><head><meta charset='utf-8'><title>{html.escape(self.source.name)}</title></head>"
                        f"<body><div>{header}</div>{''.join(parts)}</body></html>", encoding="utf-8")
        return path


def _distributions(source: Any) -> Any:
    from maze_lab.widgets.distributions import DistributionsView

    return DistributionsView(source)


def _model(source: Any) -> Any:
    from maze_lab.widgets.model_graph import ModelGraphView

    return ModelGraphView(source)


def _config(source: Any) -> Any:
    from maze_lab.widgets.run_details import ConfigView

    return ConfigView(source)


def _console(source: Any) -> Any:
    from maze_lab.widgets.run_details import ConsoleView

    return ConsoleView(source)


_STANDARD_TABS = {"Distributions": _distributions, "Model": _model, "Config": _config, "Console": _console}
"""The views a cockpit shows as tabs by default (built when first selected)."""


def flat_range(ys: list[Any]) -> list[float] | None:
    """A y-range around values that differ only in their last digits (a statistic and its smoothed curve, whose
    sums round differently): plotly's own range would be that span of a few units in the last place, with one tick
    label of 17 digits spilling out of the figure. None where plotly's range is right (values apart, or all equal:
    plotly pads a constant itself)."""
    values = np.concatenate([np.asarray(y, dtype=np.float64).ravel() for y in ys]) if ys else np.empty(0)
    values = values[np.isfinite(values)]
    if not len(values):
        return None
    lo, hi = float(values.min()), float(values.max())
    if lo == hi or hi - lo > 1e-9 * max(abs(lo), abs(hi)):
        return None
    middle = (lo + hi) / 2
    pad = 0.05 * abs(middle) or 1.0
    return [middle - pad, middle + pad]


def ema(values: np.ndarray, alpha: float) -> np.ndarray:
    """The exponential moving average of ``values`` with weight ``alpha`` on the past (0: the values themselves),
    debiased at the start as TensorBoard's smoothing is (the first point is not pulled towards 0); NaN values are
    skipped."""
    values = np.asarray(values, dtype=np.float64)
    if alpha <= 0 or not len(values):
        return values
    out = np.empty_like(values)
    last, weight = 0.0, 0.0
    for i, v in enumerate(values):
        if np.isfinite(v):
            last = alpha * last + (1.0 - alpha) * v
            weight = alpha * weight + (1.0 - alpha)
        out[i] = last / weight if weight > 0 else np.nan
    return out


def _aligned(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, ...]:
    """(epochs, a-values, b-values) on the epochs both series have (both ascending, unique)."""
    if len(a[0]) == len(b[0]) and np.array_equal(a[0], b[0]):
        return a[0], a[1], b[1]
    epochs, ia, ib = np.intersect1d(a[0], b[0], assume_unique=True, return_indices=True)
    return epochs, a[1][ia], b[1][ib]


def _set(obj: Any, name: str, value: Any) -> None:
    """Assign a widget trait only where it changes (every assignment is a message to the front-end)."""
    if getattr(obj, name) != value:
        setattr(obj, name, value)
