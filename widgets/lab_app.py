"""The Lab app: start a run from the config groups, watch and stop it in the cockpit, browse and compare the runs of
the output directory, replay a run's trajectories (and record new ones), open its model graph.

``maze-lab lab`` serves ``notebooks/lab.ipynb`` with voila; that notebook shows ``LabApp().widget``. The app works in
JupyterLab too. Every action of the app catches its errors and shows them in the app: nothing is raised into voila,
and a run directory that appears, fails or is deleted while the app is open is shown as such.

Runs started from the form are detached (``train_async(detach=True)``): each trains in a process of its own, so a
reload, a closed tab or a second browser finds the same runs, live, and controls them through their directories (the
form's Stop, the cockpit's buttons). What the page showed (the form's values, the run started from the form, the run
open in the cockpit, the comparison or viewer below, the selection) is kept in :data:`STATE_FILE` in the base
directory and restored by the next page; its run paths are used only where they are run directories under the base
directory. Each page has a kernel of its own, which voila shuts down when the page goes (see
:mod:`maze_lab.widgets.lab_server`).
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anywidget
import ipywidgets as w
import numpy as np
import traitlets

from maze_lab.widgets.theme import TEXT, themed
from maze_lab.widgets.view import PollingView

STATE_FILE = ".maze_lab_lab_state.json"
"""What the Lab app's page shows, kept in the base directory for the next page (a reload, another browser)."""
_STATE_VERSION = 1
_MAX_TEXT = 20_000
"""Longest text of a form field restored from the state file."""

# ---- the app ---------------------------------------------------------------------------------------------------------
_CSS = """<style>
.maze-lab-app { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; max-width: 1400px; }
.maze-lab-app .maze-lab-section { border: 1px solid var(--jp-border-color1, #d5dbe3); border-radius: 6px;
  padding: 8px 12px; margin: 6px 0;
  background: var(--jp-layout-color0, #ffffff); }
.maze-lab-app .maze-lab-section-title { font-size: 15px; font-weight: 600; color: var(--jp-ui-font-color1, #1b2631);
  margin: 2px 0 6px 0; }
.maze-lab-app .maze-lab-note { color: var(--jp-ui-font-color2, #566573); font-size: 12px; }
.maze-lab-app .maze-lab-error { background: #fdedec; border-left: 4px solid #c0392b; padding: 6px 10px;
  color: #641e16; font-size: 13px; white-space: pre-wrap; }
.maze-lab-app .maze-lab-ok { background: #eafaf1; border-left: 4px solid #27ae60; padding: 6px 10px; color: #145a32;
  font-size: 13px; }
.maze-lab-app .maze-lab-runs select { font-family: ui-monospace, 'DejaVu Sans Mono', monospace; font-size: 12px; }
</style>"""

_STATUS_COLORS = {"running": "#1e8449", "starting": "#1e8449", "paused": "#b9770e", "stopping": "#b9770e",
                  "done": "#1f618d", "early-stopped": "#1f618d", "stopped": "#6c3483", "failed": "#c0392b",
                  "died": "#c0392b", "damaged": "#c0392b", "interrupted": "#6c3483", "deleted": "#7f8c8d"}


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _section(title: str, *children: Any) -> w.VBox:
    box = w.VBox([w.HTML(f"<div class='maze-lab-section-title'>{_esc(title)}</div>"), *children])
    box.add_class("maze-lab-section")
    return box


class ScrollIntoView(anywidget.AnyWidget):
    """An invisible widget that scrolls the page to the element of a CSS selector each time it is asked to (the
    front-end does it: a kernel has no say over the page's scroll position otherwise)."""

    _esm = """
    export default {
      render({ model, el }) {
        el.style.display = "none";
        model.on("change:token", () => {
          const target = document.querySelector(model.get("selector"));
          if (target) { target.scrollIntoView({ behavior: "smooth", block: "start" }); }
        });
      },
    };
    """
    selector = traitlets.Unicode("").tag(sync=True)
    token = traitlets.Int(0).tag(sync=True)

    def scroll_to(self, selector: str) -> None:
        """Scroll the page to the first element matching ``selector``."""
        with self.hold_sync():
            self.selector = selector
            self.token += 1


def _number_or(value: Any, default: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if np.isfinite(number) else default


def _message(kind: str, text: str, details: str | None = None) -> str:
    """HTML of a one-line message (``ok`` or ``error``), with details (a traceback) folded away."""
    more = (f"<details><summary>details</summary><pre style='white-space:pre-wrap;font-size:11px'>"
            f"{_esc(details)}</pre></details>") if details else ""
    return f"<div class='maze-lab-{kind}'>{_esc(text)}{more}</div>"


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _close(widget_owner: Any) -> None:
    """Close a cockpit, viewer or comparison (its polling and its widgets); never raises."""
    if widget_owner is None:
        return
    with contextlib.suppress(Exception):
        if hasattr(widget_owner, "close"):
            widget_owner.close()
        elif hasattr(widget_owner, "widget"):
            widget_owner.widget.close()


def _start_live(widget_owner: Any) -> None:
    """Start a view's polling on the kernel's loop (see ``PollingView``); never raises."""
    with contextlib.suppress(Exception):
        widget_owner.start()


class LabApp(PollingView):
    """The Lab app: a new-run form, the cockpit of the current run, the runs of the output directory and what can
    be opened for them (comparison, trajectories with a rollout button, model graph).

    :param base_dir: the directory of the runs (default: the default location of runs, ``$MAZE_LAB_OUTPUTS`` or
        ``<project root>/outputs``); new runs go there too.
    :param refresh_seconds: how often the runs list is re-read on the kernel's event loop.
    :param config_modules: importable packages with your own config groups (their options join the form's).
    """

    def __init__(self, base_dir: str | Path | None = None, refresh_seconds: float = 2.0,
                 config_modules: list[str] | tuple[str, ...] = ()):
        from maze_lab.run.config import available_options
        from maze_lab.run.run_dir import default_outputs_dir

        self.base_dir = Path(base_dir).expanduser().resolve() if base_dir is not None else default_outputs_dir()
        self.refresh_seconds = float(refresh_seconds)
        self.config_modules = list(config_modules)
        self.handle: Any = None
        """The run started from the form: an AttachedRun (a detached run, also one started before a reload);
        None before the first start."""
        self.context: Any = None
        self.cockpit: Any = None
        self.detail: Any = None
        """What is open below the runs list: a RunComparison, TrajectoryViewer or ModelGraphView."""
        self.detail_kind: str | None = None
        self.runs_table: Any = None
        self._open_run: Path | None = None
        self._detail_runs: list[Path] = []
        self._rollout_task: asyncio.Task | None = None
        self.ticks = 0
        self.errors: list[str] = []

        options = available_options(self.config_modules)
        self.options = options

        # ---- new run form
        def dropdown(group: str, default: str, description: str) -> w.Dropdown:
            values = options.get(group) or [default]
            return w.Dropdown(options=values, value=default if default in values else values[0],
                              description=description, layout=w.Layout(width="300px"),
                              style={"description_width": "90px"})

        self.experiment = w.Dropdown(options=[("(none)", "")] + [(o, o) for o in options.get("experiment", [])],
                                     value="", description="experiment", layout=w.Layout(width="300px"),
                                     style={"description_width": "90px"})
        self.env = dropdown("env", "gym_env", "env")
        self.env_name = w.Text(value="CartPole-v1", description="gym env id", layout=w.Layout(width="300px"),
                               style={"description_width": "90px"})
        self.algorithm = dropdown("algorithm", "ppo", "algorithm")
        self.model = dropdown("model", "flatten_concat", "model")
        self.wrappers = dropdown("wrappers", "default", "wrappers")
        # not a BoundedIntText: that one turns -5 into its minimum without a word; the run refuses it as the CLI does
        self.n_epochs = w.IntText(value=20, description="n_epochs", layout=w.Layout(width="300px"),
                                  style={"description_width": "90px"})
        self.seed = w.Text(value="", placeholder="a fresh seed per run", description="seed",
                           layout=w.Layout(width="300px"), style={"description_width": "90px"},
                           tooltip="an integer; empty: each run gets a fresh seed, recorded in its configuration")
        self.seed.add_class("maze-lab-seed")
        self.overrides = w.Textarea(placeholder="one key=value per line, e.g.\nalgorithm.lr=0.001\n"
                                                "algorithm.epoch_length=5\nrunner.concurrency=2",
                                    description="overrides", layout=w.Layout(width="440px", height="118px"),
                                    style={"description_width": "70px"})
        self.start_button = w.Button(description="Start run", icon="play", button_style="success",
                                     layout=w.Layout(width="130px"),
                                     tooltip="train in a process of its own (it goes on when this page closes)")
        self.stop_button = w.Button(description="Stop run", icon="stop", button_style="danger",
                                    layout=w.Layout(width="130px"), disabled=True,
                                    tooltip="stop the current run after its current update (a checkpoint is written)")
        self.form_message = w.HTML()
        self.form_message.add_class("maze-lab-form-message")
        self.overrides.add_class("maze-lab-overrides")
        self.n_epochs.add_class("maze-lab-n-epochs")
        self.start_button.add_class("maze-lab-start")
        self.stop_button.add_class("maze-lab-stop")
        self.start_button.on_click(lambda _: self._guarded("start", self.start_run))
        self.stop_button.on_click(lambda _: self._guarded("stop", self.stop_run))
        self.env.observe(lambda _: self._guarded("form", self._env_changed), names="value")
        self._env_changed()
        form = w.HBox([
            w.VBox([self.experiment, self.env, self.env_name, self.algorithm]),
            w.VBox([self.model, self.wrappers, self.n_epochs, self.seed]),
            w.VBox([self.overrides]),
        ], layout=w.Layout(flex_flow="row wrap", grid_gap="8px"))
        self.form_section = _section("New run", form, w.HBox([self.start_button, self.stop_button],
                                                               layout=w.Layout(grid_gap="8px")), self.form_message)

        # ---- the current run
        self.run_status = w.HTML("<span class='maze-lab-note'>no run open: start one above or open one from the "
                                 "runs below</span>")
        self.run_status.add_class("maze-lab-run-status")
        self.cockpit_box = w.VBox()
        self.cockpit_box.add_class("maze-lab-cockpit")
        self.run_section = _section("Current run", self.run_status, self.cockpit_box)

        # ---- runs browser
        self.runs_select = w.SelectMultiple(options=[], rows=8, layout=w.Layout(width="100%"))
        self.runs_select.add_class("maze-lab-runs")
        self.runs_note = w.HTML()
        self.runs_note.add_class("maze-lab-runs-note")
        self.open_button = w.Button(description="Open in cockpit", icon="line-chart", layout=w.Layout(width="150px"))
        self.compare_button = w.Button(description="Compare", icon="columns", layout=w.Layout(width="110px"),
                                       tooltip="overlay the selected runs (select two or more)")
        self.trajectories_button = w.Button(description="Trajectories", icon="film", layout=w.Layout(width="130px"),
                                            tooltip="replay the recorded episodes of the selected run")
        self.graph_button = w.Button(description="Model graph", icon="sitemap", layout=w.Layout(width="130px"))
        for button, name in ((self.open_button, "open"), (self.compare_button, "compare"),
                             (self.trajectories_button, "trajectories"), (self.graph_button, "graph")):
            button.add_class(f"maze-lab-{name}")
        self.open_button.on_click(lambda _: self._guarded("open", self.open_selected))
        self.compare_button.on_click(lambda _: self._guarded("compare", self.compare_selected))
        self.trajectories_button.on_click(lambda _: self._guarded("trajectories", self.trajectories_of_selected))
        self.graph_button.on_click(lambda _: self._guarded("model graph", self.graph_of_selected))
        self.runs_message = w.HTML()
        self.runs_message.add_class("maze-lab-runs-message")
        # finding runs: a filter over the listed words, an order, archived runs on request
        self.runs_filter = w.Text(placeholder="filter: words of name, status, env, algorithm, tags",
                                  layout=w.Layout(width="340px"))
        self.runs_filter.add_class("maze-lab-runs-filter")
        self.runs_sort = w.Dropdown(options=[("newest first", "newest"), ("oldest first", "oldest"),
                                             ("best eval reward", "best"), ("status", "status")],
                                    value="newest", description="order", layout=w.Layout(width="230px"),
                                    style={"description_width": "45px"})
        self.show_archived = w.Checkbox(value=False, description="archived runs", indent=False,
                                        layout=w.Layout(width="130px"))
        for control in (self.runs_filter, self.runs_sort, self.show_archived):
            control.observe(lambda _: self._guarded("runs list", lambda: self.refresh_runs(force=True)),
                            names="value")
        # looking after runs: tags, archive, delete (with a confirmation)
        self.tag_text = w.Text(placeholder="tags, e.g. baseline good", layout=w.Layout(width="220px"))
        self.tag_button = w.Button(description="Set tags", icon="tag", layout=w.Layout(width="100px"),
                                   tooltip="replace the tags of the selected runs (empty: remove them)")
        self.archive_button = w.Button(description="Archive", icon="archive", layout=w.Layout(width="100px"),
                                       tooltip="hide the selected runs from this list (or show them again)")
        self.delete_button = w.Button(description="Delete", icon="trash", button_style="danger",
                                      layout=w.Layout(width="95px"), tooltip="delete the selected runs' directories "
                                                                             "(asks first; a live run is stopped "
                                                                             "first)")
        self.confirm_html = w.HTML()
        self.confirm_yes = w.Button(description="Yes, delete", button_style="danger", layout=w.Layout(width="110px"))
        self.confirm_no = w.Button(description="Cancel", layout=w.Layout(width="80px"))
        self.confirm_box = w.HBox([self.confirm_html, self.confirm_yes, self.confirm_no],
                                  layout=w.Layout(display="none", align_items="center", grid_gap="8px"))
        for button, name in ((self.tag_button, "tag"), (self.archive_button, "archive"),
                             (self.delete_button, "delete"), (self.confirm_yes, "delete-yes"),
                             (self.confirm_no, "delete-no")):
            button.add_class(f"maze-lab-{name}")
        self.tag_button.on_click(lambda _: self._guarded("tags", self.tag_selected))
        self.archive_button.on_click(lambda _: self._guarded("archive", self.archive_selected))
        self.delete_button.on_click(lambda _: self._guarded("delete", self.ask_delete_selected))
        self.confirm_yes.on_click(lambda _: self._guarded("delete", self.delete_confirmed))
        self.confirm_no.on_click(lambda _: self._guarded("delete", self.cancel_delete))
        self._to_delete: list[Path] = []
        self._pending_delete: set[Path] = set()
        """Live runs asked to stop, deleted once they have ended (see :meth:`refresh_runs`)."""
        self.runs_section = _section(
            "Runs", w.HBox([self.runs_filter, self.runs_sort, self.show_archived],
                           layout=w.Layout(flex_flow="row wrap", align_items="center", grid_gap="10px")),
            self.runs_note, self.runs_select,
            w.HBox([self.open_button, self.compare_button, self.trajectories_button, self.graph_button],
                   layout=w.Layout(flex_flow="row wrap", grid_gap="6px")),
            w.HBox([self.tag_text, self.tag_button, self.archive_button, self.delete_button],
                   layout=w.Layout(flex_flow="row wrap", grid_gap="6px")),
            self.confirm_box, self.runs_message)

        # ---- what is open for the selected runs
        self.detail_title = w.HTML()
        self.detail_close = w.Button(description="close", icon="times", layout=w.Layout(width="90px",
                                                                                         display="none"))
        self.detail_close.on_click(lambda _: self._guarded("close", self.close_detail))
        self.detail_box = w.VBox()
        self.detail_box.add_class("maze-lab-detail")
        self.detail_section = _section("Selected runs", w.HBox([self.detail_title, self.detail_close],
                                                               layout=w.Layout(align_items="center",
                                                                               grid_gap="12px")),
                                       self.detail_box)
        self.detail_section.layout.display = "none"

        header = w.HTML(f"{_CSS}<div style='display:flex;align-items:baseline;gap:14px'>"
                        f"<span style='font-size:20px;font-weight:700;color:{TEXT}'>maze-lab</span>"
                        f"<span class='maze-lab-note'>runs in <code>{_esc(self.base_dir)}</code></span></div>")
        # a hidden figure in the page from the start: in voila the first figure whose model opens after the page
        # loaded (the cockpit's first curve) lost its whole state while the front-end fetched plotly's and
        # anywidget's code for it, and stayed blank; with their code loaded at page load, later figures come up
        from maze_lab.widgets.plotly_widgets import FigureWidget

        self._plotly_warmup = FigureWidget(layout={"height": 20, "width": 20})
        warmup = w.Box([self._plotly_warmup], layout=w.Layout(display="none"))
        self.scroller = ScrollIntoView()
        """Brings what a button opened below the visible page into view."""
        self.widget = w.VBox([header, self.form_section, self.run_section, self.runs_section, self.detail_section,
                              warmup, self.scroller])
        """The whole app (display it)."""
        self.widget.add_class("maze-lab-app")
        themed(self.widget)
        self._runs_signature: Any = None
        self._restoring = False
        self._saved_state: bytes | None = None
        self.state_error: str | None = None
        """Why the page's state could not be kept or restored (None where it could)."""
        self.refresh_runs()
        self._guarded("restoring the page", self._restore_state, quiet=True)
        for field_widget in (self.experiment, self.env, self.env_name, self.algorithm, self.model, self.wrappers,
                             self.n_epochs, self.seed, self.overrides, self.runs_select):
            field_widget.observe(lambda _: self.save_state(), names="value")

    # ---- display and polling -----------------------------------------------------------------------------------
    @property
    def live(self) -> bool:
        """Runs may appear, change or vanish at any time: the app polls while it is open."""
        return not self._closed

    async def _poll(self) -> None:
        last_list = time.monotonic()
        while not self._closed:
            # the open run's status follows about once per second, the runs list every refresh_seconds
            await asyncio.sleep(min(1.0, self.refresh_seconds))
            with_list = time.monotonic() - last_list >= self.refresh_seconds - 0.05
            if with_list:
                last_list = time.monotonic()
            self.tick(runs=with_list)

    def tick(self, runs: bool = True) -> None:
        """One poll: the runs list (unless ``runs`` is False) and the open run's status; never raises."""
        self.ticks += 1
        if runs:
            self._guarded("runs list", self.refresh_runs, quiet=True)
        self._guarded("status", self._draw_run_status, quiet=True)

    def close(self) -> None:
        """Stop polling and close the app's widgets (runs started from it go on)."""
        self._closed = True
        self.stop_updates()
        _close(self.cockpit)
        _close(self.detail)
        with contextlib.suppress(Exception):
            self._plotly_warmup.close()
            self.widget.close()

    def _guarded(self, what: str, fn: Callable[[], Any], quiet: bool = False) -> Any:
        """Run ``fn``; an error is shown in the app (and kept in :attr:`errors`), never raised."""
        try:
            return fn()
        except Exception as err:  # noqa: BLE001 - nothing may reach voila: the app shows what went wrong
            text = f"{what}: {type(err).__name__}: {' '.join(str(err).split())[:600]}"
            self.errors.append(text)
            target = self.form_message if what in ("start", "form") else self.runs_message
            if what in ("stop", "status"):
                target = self.run_status if what == "status" else self.form_message
            if not quiet or what in ("runs list", "status"):
                target.value = _message("error", text, traceback.format_exc())
            return None

    # ---- new run -----------------------------------------------------------------------------------------------
    def _env_changed(self) -> None:
        """A Gymnasium env takes an env id; an env with a model or wrappers option of its own name gets them."""
        env = self.env.value
        self.env_name.layout.display = None if env == "gym_env" else "none"
        if env in self.model.options:
            self.model.value = env
        elif env == "gym_env" and "flatten_concat" in self.model.options:
            self.model.value = "flatten_concat"
        family = env.split("_", 1)[0]
        if family in self.wrappers.options and env != "gym_env":
            self.wrappers.value = family
        elif env == "gym_env" and "default" in self.wrappers.options:
            self.wrappers.value = "default"

    def run_arguments(self) -> dict[str, Any]:
        """The RunContext arguments the form describes (the overrides field's ``group=option`` lines choose
        components, its ``dotted.key=value`` lines override values)."""
        from maze_lab.run.config import parse_cli_overrides

        lines = [line.strip() for line in self.overrides.value.splitlines()]
        lines = [line for line in lines if line and not line.startswith("#")]
        components, overrides = parse_cli_overrides(lines)
        experiment = components.pop("experiment", None) or self.experiment.value or None
        chosen = {"env": self.env.value, "algorithm": self.algorithm.value, "model": self.model.value,
                  "wrappers": self.wrappers.value}
        if experiment:
            # an experiment file chooses its own components; only those the user changed from the defaults win
            defaults = {"env": "gym_env", "algorithm": "ppo", "model": "flatten_concat", "wrappers": "default"}
            chosen = {k: v for k, v in chosen.items() if v != defaults[k]}
        chosen.update(components)
        values: dict[str, Any] = {}
        if chosen.get("env", "gym_env" if not experiment else None) == "gym_env" and self.env_name.value.strip():
            values["env.name"] = self.env_name.value.strip()
        values["n_epochs"] = int(self.n_epochs.value)
        values["seed"] = self._seed()
        values.update(overrides)  # a seed=N line of the overrides wins over the field
        values["log_base_dir"] = str(self.base_dir)
        return {**chosen, "overrides": values, "experiment": experiment}

    def _seed(self) -> int:
        """The seed field's integer, or a fresh seed where it is empty (two runs of one form then differ, and each
        records the seed it trained with); anything else is refused with what to write instead."""
        text = self.seed.value.strip()
        if not text:
            import secrets

            return secrets.randbelow(2**31 - 1)
        try:
            return int(text)
        except ValueError:
            from maze_lab.core.utils.factory import ConfigurationError

            raise ConfigurationError(f"seed must be an integer (or empty for a fresh seed per run), got "
                                     f"{text!r}") from None

    def start_run(self) -> Any:
        """Start a run from the form, detached (a process of its own that outlives this page and its kernel), and
        show its cockpit; returns its handle (an AttachedRun)."""
        from maze_lab.run.run_context import RunContext

        if self.handle is not None and self.handle.running:
            self.form_message.value = _message("error", f"a run is going on ({self.handle.run_dir.name}); stop it "
                                                        f"first")
            return None
        self.form_message.value = "<span class='maze-lab-note'>composing the configuration …</span>"
        args = self.run_arguments()
        context = RunContext(**args, silent=True)
        handle = context.train_async(detach=True)
        self.context, self.handle = context, handle
        self.form_message.value = _message("ok", f"started {handle.run_dir} (it trains on when this page closes)")
        self.stop_button.disabled = False
        self._show_cockpit(handle, f"{handle.run_dir.parent.name}/{handle.run_dir.name}")
        self.refresh_runs()
        self.save_state()
        return handle

    def stop_run(self) -> None:
        """Ask the run started from the form to stop after its current update (it writes a checkpoint); returns at
        once: its status shows when it has stopped."""
        from maze_lab.run.attach import AttachedRun
        from maze_lab.run.run_status import send_request

        if self.handle is None or not self._live(self.handle):
            self.form_message.value = _message("error", "no run of this app is going on")
            return
        if isinstance(self.handle, AttachedRun):
            send_request(self.handle.run_dir, "stop")
        else:  # a RunHandle of this kernel
            self.handle.stop(timeout=0)
        self.form_message.value = _message("ok", f"stopping {self.handle.run_dir.name} after its current update")
        self._draw_run_status()

    def _live(self, source: Any) -> bool:
        """Whether the run of ``source`` (a handle or a run directory) trains now."""
        return self._run_state(source)[1]

    def _run_state(self, source: Any) -> tuple[str, bool, Path]:
        """(status as a reader shows it, whether a process trains it now, its directory) of a RunHandle, an
        AttachedRun or a run directory."""
        from maze_lab.run.attach import AttachedRun, run_state
        from maze_lab.run.run_status import LIVE

        if not isinstance(source, str | Path | AttachedRun):  # a RunHandle of this kernel
            return source.status, bool(source.running), Path(source.run_dir)
        path = Path(source.run_dir if isinstance(source, AttachedRun) else source)
        try:
            state = run_state(path)
        except FileNotFoundError:
            return ("deleted" if not path.exists() else "created"), False, path
        except (OSError, ValueError):
            return "damaged", False, path
        status = str(state.get("status") or "unknown")
        return status, status in LIVE and bool(state.get("live")), path

    # ---- the cockpit ---------------------------------------------------------------------------------------------
    def _show_cockpit(self, source: Any, label: str) -> None:
        from maze_lab.widgets.dashboard import TrainingDashboard

        self._open_run = Path(source.run_dir if hasattr(source, "run_dir") else source)
        _close(self.cockpit)
        self.cockpit = None
        self.cockpit_box.children = ()
        self._cockpit_label = label
        self._cockpit_source = source
        try:
            cockpit = TrainingDashboard(source)
        except Exception as err:  # noqa: BLE001 - e.g. a damaged run directory: say so in the app
            self.run_status.value = _message("error", f"{label}: the cockpit cannot open: {type(err).__name__}: "
                                                      f"{err}", traceback.format_exc())
            return
        self.cockpit = cockpit
        self.cockpit_box.children = (cockpit.widget,)
        _start_live(cockpit)
        self._draw_run_status()
        self.save_state()

    def _draw_run_status(self) -> None:
        """The status line of the open run (``status`` classes let a page or a test find it), and the form's Stop
        for the run started from the form."""
        if self.handle is not None and getattr(self, "_cockpit_source", None) is not self.handle:
            _, handle_live, _ = self._run_state(self.handle)
            if self.stop_button.disabled == handle_live:
                self.stop_button.disabled = not handle_live
        source = getattr(self, "_cockpit_source", None)
        if source is None:
            return
        status, running, where = self._run_state(source)
        checkpoint = (Path(where) / "checkpoints")
        note = ""
        if not running and status in ("stopped", "done", "early-stopped", "interrupted"):
            last = sorted(p.name for p in checkpoint.glob("*")) if checkpoint.is_dir() else []
            note = f" · checkpoints: {', '.join(last)}" if last else ""
        color = _STATUS_COLORS.get(status, TEXT)
        # the cockpit shows the status itself; here only where it could not open
        shown = "none" if self.cockpit is not None else "inline"
        self.run_status.value = (f"<span class='maze-lab-note'>run directory <code>{_esc(where)}</code>{_esc(note)}"
                                 f"</span> <b class='maze-lab-status' data-status='{_esc(status)}' "
                                 f"style='color:{color};display:{shown}'>{_esc(status)}</b>")
        if self.handle is not None and source is self.handle and self.stop_button.disabled == running:
            self.stop_button.disabled = not running

    # ---- the page's state, kept for the next page -------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        """Where the page's state is kept (:data:`STATE_FILE` in the base directory)."""
        return self.base_dir / STATE_FILE

    def state(self) -> dict[str, Any]:
        """What the page shows, as plain values and run directory paths (what :meth:`save_state` writes)."""
        detail = None
        if self.detail_kind is not None and self._detail_runs:
            detail = {"kind": self.detail_kind, "runs": [str(r) for r in self._detail_runs]}
        return {
            "version": _STATE_VERSION,
            "form": {"experiment": self.experiment.value, "env": self.env.value, "env_name": self.env_name.value,
                     "algorithm": self.algorithm.value, "model": self.model.value, "wrappers": self.wrappers.value,
                     "n_epochs": int(self.n_epochs.value), "overrides": self.overrides.value,
                     "seed": self.seed.value},
            "current_run": None if self.handle is None else str(self.handle.run_dir),
            "open_run": None if self._open_run is None else str(self._open_run),
            "detail": detail,
            "selected": [str(v) for v in self.runs_select.value],
        }

    def save_state(self) -> None:
        """Write :meth:`state` into :attr:`state_file` (atomically; a page that cannot write it goes on without)."""
        if self._restoring or self._closed:
            return
        from maze_lab.core.utils.atomic import write_atomic

        try:
            data = json.dumps(self.state(), indent=1).encode()
            if data == self._saved_state and self.state_file.exists():
                return  # unchanged (the runs list re-selects its selection when it changes)
            self.base_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(self.state_file, data)
            self._saved_state = data
            self.state_error = None
        except (OSError, TypeError, ValueError) as err:
            self.state_error = f"the page's state could not be kept in {self.state_file}: {err}"

    def _run_path(self, value: Any) -> Path | None:
        """``value`` as a run directory under the base directory (its path as the runs list gives it), or None
        where it is anything else: not text, not absolute, outside the base directory (also through a link), not
        a run directory."""
        from maze_lab.run.run_dir import MARKER

        if not isinstance(value, str) or not value or len(value) > 4096 or "\x00" in value:
            return None
        path = Path(value)
        if not path.is_absolute():
            return None
        path = Path(os.path.normpath(path))
        base = self.base_dir.resolve()
        try:
            resolved = path.resolve(strict=True)
            path.relative_to(self.base_dir)
            resolved.relative_to(base)
        except (OSError, ValueError, RuntimeError):
            return None
        if resolved == base or not resolved.is_dir() or not (resolved / MARKER).is_file():
            return None
        return path

    def _restore_state(self) -> None:
        """Show what the last page showed (see :meth:`state`); a value that does not fit is left out."""
        from maze_lab.run.attach import AttachedRun
        from maze_lab.run.run_status import read_small_json

        state = read_small_json(self.state_file)
        if not state or state.get("version") != _STATE_VERSION:
            return
        self._restoring = True
        try:
            form = state.get("form") if isinstance(state.get("form"), dict) else {}
            # the env first: choosing it picks its model and wrappers, which the saved values then replace
            for name in ("experiment", "env", "algorithm", "model", "wrappers"):
                dropdown, value = getattr(self, name), form.get(name)
                values = [o[1] if isinstance(o, tuple) else o for o in dropdown.options]
                if isinstance(value, str) and value in values:
                    dropdown.value = value
            if isinstance(form.get("env_name"), str) and len(form["env_name"]) <= 200:
                self.env_name.value = form["env_name"]
            n_epochs = form.get("n_epochs")
            if isinstance(n_epochs, int) and not isinstance(n_epochs, bool) and n_epochs >= 0:
                self.n_epochs.value = n_epochs
            if isinstance(form.get("overrides"), str) and len(form["overrides"]) <= _MAX_TEXT:
                self.overrides.value = form["overrides"]
            if isinstance(form.get("seed"), str) and len(form["seed"]) <= 40:
                self.seed.value = form["seed"]
            current = self._run_path(state.get("current_run"))
            if current is not None:
                self.handle = AttachedRun(current)
                self.stop_button.disabled = not self._live(self.handle)
            opened = self._run_path(state.get("open_run"))
            if opened is not None:
                self._open(opened)
            listed = {v for _, v in self.runs_select.options}
            selected = state.get("selected") if isinstance(state.get("selected"), list) else []
            paths = [self._run_path(v) for v in selected[:1000]]
            self.runs_select.value = tuple(dict.fromkeys(str(p) for p in paths if p is not None and str(p) in listed))
            detail = state.get("detail") if isinstance(state.get("detail"), dict) else {}
            runs = detail.get("runs") if isinstance(detail.get("runs"), list) else []
            runs = [r for r in (self._run_path(v) for v in runs[:100]) if r is not None]
            kind = detail.get("kind")
            if kind == "comparison" and len(runs) >= 2:
                self._compare(runs)
            elif kind == "trajectories" and len(runs) == 1:
                self._show_trajectories(runs[0])
            elif kind == "graph" and len(runs) == 1:
                self._graph(runs[0])
        finally:
            self._restoring = False

    # ---- runs ------------------------------------------------------------------------------------------------------
    def refresh_runs(self, force: bool = False) -> bool:
        """Re-read the runs of :attr:`base_dir` and list those the filter and the archived box let through, in the
        chosen order; returns whether the list changed. The selection is kept for the runs that are still listed."""
        from maze_lab.run.runs import list_runs

        self._delete_ended()
        table = list_runs(self.base_dir)
        self.runs_table = table
        every = [] if table.empty else table.to_dict("records")
        rows = self._shown_rows(every)
        signature = (tuple((r["run_dir"], r["status"], r["live"], r["epoch"], r["best_eval_reward"],
                            tuple(r.get("tags") or ()), r.get("archived")) for r in rows), len(every))
        if signature == self._runs_signature and not force:
            return False
        self._runs_signature = signature
        labels = [(self._run_label(r), r["run_dir"]) for r in rows]
        selected = [v for v in self.runs_select.value if v in {r["run_dir"] for r in rows}]
        with self.runs_select.hold_trait_notifications():
            self.runs_select.options = labels
            self.runs_select.value = tuple(selected)
        n, hidden = len(rows), len(every) - len(rows)
        more = f", {hidden} not shown (filter or archived)" if hidden else ""
        self.runs_note.value = (f"<span class='maze-lab-note'>{n} run{'s' if n != 1 else ''} in "
                                f"<code>{_esc(self.base_dir)}</code>{more} (re-read every {self.refresh_seconds:g} s; "
                                f"select one or more, ctrl/shift-click for several)</span>" if every else
                                f"<span class='maze-lab-note'>no runs yet in <code>{_esc(self.base_dir)}</code>: "
                                f"start one above</span>")
        if self.detail_kind == "comparison":
            self._guarded("comparison", self._update_comparison, quiet=True)
        return True

    def _shown_rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows the archived box and the filter let through, in the chosen order."""
        if not self.show_archived.value:
            rows = [r for r in rows if not r.get("archived")]
        words = self.runs_filter.value.lower().split()
        if words:
            rows = [r for r in rows if all(word in self._run_label(r).lower() for word in words)]
        order = self.runs_sort.value
        if order == "oldest":
            rows = rows[::-1]
        elif order == "best":
            rows = sorted(rows, key=lambda r: -_number_or(r.get("best_eval_reward"), -np.inf))
        elif order == "status":
            rows = sorted(rows, key=lambda r: (not r.get("live"), str(r.get("status"))))
        return rows

    # ---- looking after runs: tags, archive, delete -------------------------------------------------------------
    def tag_selected(self) -> None:
        """Replace the tags of the selected runs with the words of the tags field."""
        from maze_lab.run.runs import label_run

        runs = self.selected_runs()
        if not runs:
            self.runs_message.value = _message("error", "select the runs to tag")
            return
        tags = self.tag_text.value.replace(",", " ").split()
        for run in runs:
            label_run(run, tags=tags)
        self.runs_message.value = _message("ok", f"tags of {len(runs)} run(s): {' '.join(tags) or 'none'}")
        self.refresh_runs(force=True)

    def archive_selected(self) -> None:
        """Archive the selected runs (hidden from the list unless archived runs are shown); archived ones that are
        selected (the box shows them) come back."""
        from maze_lab.run.runs import label_run, run_labels

        runs = self.selected_runs()
        if not runs:
            self.runs_message.value = _message("error", "select the runs to archive")
            return
        states = [not run_labels(run)["archived"] for run in runs]
        for run, archive in zip(runs, states, strict=True):
            label_run(run, archived=archive)
        archived, restored = sum(states), len(states) - sum(states)
        self.runs_message.value = _message("ok", ", ".join(
            part for part in (archived and f"{archived} run(s) archived (tick 'archived runs' to see them)",
                              restored and f"{restored} run(s) back in the list") if part))
        self.refresh_runs(force=True)

    def ask_delete_selected(self) -> None:
        """Ask before deleting the selected runs (what is live is named: it is stopped first)."""
        runs = self.selected_runs()
        if not runs:
            self.runs_message.value = _message("error", "select the runs to delete")
            return
        live = [run for run in runs if self._live(run)]
        self._to_delete = runs
        names = ", ".join(run.name for run in runs[:4]) + (" …" if len(runs) > 4 else "")
        self.confirm_html.value = (f"<b style='color:#cf222e'>Delete {len(runs)} run(s) ({_esc(names)}) with all their "
                                   f"files?</b>" + (f" {len(live)} of them live: stopped first, deleted once "
                                                    f"ended." if live else ""))
        self.confirm_box.layout.display = None

    def cancel_delete(self) -> None:
        self._to_delete = []
        self.confirm_box.layout.display = "none"
        self.runs_message.value = _message("ok", "nothing deleted")

    def delete_confirmed(self) -> None:
        """Delete the runs asked about: ended ones now; live ones are asked to stop and deleted once they ended."""
        from maze_lab.run.run_status import send_request

        runs, self._to_delete = self._to_delete, []
        self.confirm_box.layout.display = "none"
        for run in runs:
            if self._live(run):
                send_request(run, "stop")
                self._pending_delete.add(run)
        deleted = self._delete_ended(runs)
        waiting = len(self._pending_delete)
        self.runs_message.value = _message("ok", f"{deleted} run(s) deleted" + (
            f"; {waiting} live run(s) stopping, deleted once they have ended" if waiting else ""))
        self.refresh_runs(force=True)

    def _delete_ended(self, runs: list[Path] | None = None) -> int:
        """Delete ``runs`` (default: those waiting for their stop) that have ended; returns how many."""
        from maze_lab.run.runs import delete_run

        deleted = 0
        for run in list(self._pending_delete if runs is None else runs):
            if not run.exists():
                self._pending_delete.discard(run)
                continue
            if self._live(run):
                continue
            if self._open_run == run or (self.handle is not None and Path(self.handle.run_dir) == run):
                self._forget(run)
            delete_run(run)
            self._pending_delete.discard(run)
            deleted += 1
        return deleted

    def _forget(self, run: Path) -> None:
        """Close what the app shows of ``run`` before its directory goes."""
        if self._open_run == run:
            _close(self.cockpit)
            self.cockpit = None
            self.cockpit_box.children = ()
            self._open_run = None
        if self.handle is not None and Path(self.handle.run_dir) == run:
            self.handle = None
            self.stop_button.disabled = True
        if run in self._detail_runs:
            self.close_detail()

    def _run_label(self, row: dict[str, Any]) -> str:
        path = Path(row["run_dir"])
        try:
            name = path.relative_to(self.base_dir).as_posix()
        except ValueError:
            name = str(path)
        status = str(row.get("status") or "?")
        # `live`: a process trains it now (this page's, another page's, a terminal's); `died`: its process is gone
        parts = [f"{name:<40}", f"{status:<13}", "live" if row.get("live") is True else "    "]
        parts.append(f"{row.get('algorithm') or '':<6} {row.get('env') or '':<16}")
        parts.append(f"epoch {_fmt(row.get('epoch')):>4}")
        parts.append(f"best eval {_fmt(row.get('best_eval_reward')):>7}")
        if row.get("tags"):
            parts.append(" ".join(f"#{t}" for t in row["tags"]))
        if row.get("archived"):
            parts.append("[archived]")
        if status == "died":
            parts.append(f"(its process is gone; last seen {row.get('last_seen') or 'unknown'})")
        elif row.get("reason"):
            parts.append(f"({' '.join(str(row['reason']).split())[:80]})")
        return "  ".join(parts)

    def selected_runs(self) -> list[Path]:
        """The selected run directories that still exist."""
        return [Path(p) for p in self.runs_select.value if Path(p).is_dir()]

    def _one_selected(self, what: str) -> Path | None:
        runs = self.selected_runs()
        if len(runs) != 1:
            self.runs_message.value = _message("error", f"select one run to {what} ({len(runs)} selected)")
            return None
        self.runs_message.value = ""
        return runs[0]

    def open_selected(self) -> None:
        """Show the selected run in the cockpit (the run started from the form shows its handle)."""
        run = self._one_selected("open")
        if run is None:
            return
        self._open(run)

    def _open(self, run: Path) -> None:
        if self.handle is not None and Path(self.handle.run_dir) == run:
            self._show_cockpit(self.handle, f"{run.parent.name}/{run.name}")
        else:
            self._show_cockpit(run, f"{run.parent.name}/{run.name}")

    # ---- selected runs: comparison, trajectories, model graph -------------------------------------------------------
    def _show_detail(self, kind: str, title: str, owner: Any, content: Any) -> None:
        _close(self.detail)
        self.detail, self.detail_kind = owner, kind
        self.detail_title.value = f"<b>{_esc(title)}</b>"
        self.detail_box.children = (content,)
        self.detail_close.layout.display = None
        self.detail_section.layout.display = None
        if owner is not None:
            _start_live(owner)
        if not self._restoring:  # what a click opened comes into view (a reload keeps the page where it is)
            self.scroller.scroll_to(".maze-lab-detail")
        self.save_state()

    def close_detail(self) -> None:
        """Close the comparison, viewer or graph that is open."""
        _close(self.detail)
        self.detail, self.detail_kind = None, None
        self._detail_runs = []
        self.detail_box.children = ()
        self.detail_section.layout.display = "none"
        self.save_state()

    def compare_selected(self) -> None:
        """Overlay the selected runs (two or more) in a RunComparison."""
        runs = self.selected_runs()
        if len(runs) < 2:
            self.runs_message.value = _message("error", f"select two or more runs to compare ({len(runs)} "
                                                        f"selected)")
            return
        self._compare(runs)

    def _compare(self, runs: list[Path]) -> None:
        from maze_lab.widgets.comparison import RunComparison

        self.runs_message.value = ""
        comparison = RunComparison([str(r) for r in runs])
        self._detail_runs = list(runs)
        self._show_detail("comparison", f"comparison of {len(runs)} runs", comparison, comparison.widget)

    def _update_comparison(self) -> None:
        update = getattr(self.detail, "update", None)
        if callable(update):
            update()

    def trajectories_of_selected(self) -> None:
        """The recorded episodes of the selected run in a TrajectoryViewer, with a button that records more."""
        run = self._one_selected("replay")
        if run is None:
            return
        self._show_trajectories(run)

    def _show_trajectories(self, run: Path, message: str = "") -> None:
        from maze_lab.core.trajectory.files import list_episodes

        directory = run / "trajectories"
        episodes = list_episodes(directory) if directory.is_dir() else []
        n_rollout = w.BoundedIntText(value=1, min=1, max=100, description="episodes", layout=w.Layout(width="160px"),
                                     style={"description_width": "64px"})
        record = w.Button(description="Rollout", icon="circle", button_style="warning",
                          layout=w.Layout(width="110px"),
                          tooltip="roll out the run's policy (best checkpoint, else last) and record the episodes")
        record.add_class("maze-lab-rollout")
        status = w.HTML(message)
        status.add_class("maze-lab-rollout-message")
        record.on_click(lambda _: self._guarded("rollout", lambda: self._start_rollout(run, int(n_rollout.value),
                                                                                        record, status)))
        controls = w.HBox([n_rollout, record, status], layout=w.Layout(align_items="center", grid_gap="8px"))
        viewer, content = None, w.HTML(f"<span class='maze-lab-note'>no recorded episodes in "
                                       f"<code>{_esc(directory)}</code> yet: press Rollout to record some</span>")
        if episodes:
            try:
                from maze_lab.widgets.trajectory_viewer import TrajectoryViewer

                viewer = TrajectoryViewer(directory)
                content = viewer.widget
                if viewer.n_episodes > 1:
                    viewer.select_episode(viewer.n_episodes - 1)  # the newest episode
            except Exception as err:  # noqa: BLE001 - an unreadable episode file: say so, keep the button
                content = w.HTML(_message("error", f"the episodes in {directory} cannot be shown: "
                                                   f"{type(err).__name__}: {err}", traceback.format_exc()))
        box = w.VBox([controls, content])
        box.add_class("maze-lab-trajectories")
        self._detail_runs = [run]
        self._show_detail("trajectories", f"trajectories of {run.parent.name}/{run.name} "
                                          f"({len(episodes)} episode{'s' if len(episodes) != 1 else ''})", viewer, box)

    def _start_rollout(self, run: Path, n_episodes: int, button: w.Button, status: w.HTML) -> None:
        if self._rollout_task is not None and not self._rollout_task.done():
            status.value = "<span class='maze-lab-note'>a rollout is going on</span>"
            return
        button.disabled = True
        status.value = f"<span class='maze-lab-note'>rolling out {n_episodes} episode(s) …</span>"
        loop = asyncio.get_event_loop()
        self._rollout_task = loop.create_task(self._rollout(run, n_episodes, status))

    async def _rollout(self, run: Path, n_episodes: int, status: w.HTML) -> None:
        def work() -> float:
            from maze_lab.run.runs import load_run

            loaded = load_run(run)
            which = "best" if loaded.directory.best_checkpoint.exists() else "last"
            result = loaded.rollout(n_episodes=n_episodes, which=which)
            return float(result.mean_reward)

        started = time.monotonic()
        try:
            # a worker thread: the kernel's loop (the cockpit, the runs list, the buttons) keeps going meanwhile
            reward = await asyncio.get_running_loop().run_in_executor(None, work)
        except Exception as err:  # noqa: BLE001 - shown next to the button
            status.value = _message("error", f"rollout failed: {type(err).__name__}: {err}", traceback.format_exc())
            self._guarded("rollout", lambda: None)
            return
        if self._closed:
            return
        self._guarded("trajectories", lambda: self._show_trajectories(
            run, _message("ok", f"recorded {n_episodes} episode(s), mean reward {reward:.4g} "
                                f"({time.monotonic() - started:.1f} s)")))

    def graph_of_selected(self) -> None:
        """The model graph of the selected run."""
        run = self._one_selected("show its model graph")
        if run is None:
            return
        self._graph(run)

    def _graph(self, run: Path) -> None:
        from maze_lab.widgets.model_graph import ModelGraphView

        view = ModelGraphView(str(run))
        self._detail_runs = [run]
        self._show_detail("graph", f"model graph of {run.parent.name}/{run.name}", view, view.widget)
