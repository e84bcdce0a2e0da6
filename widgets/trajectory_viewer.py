"""A step-by-step trajectory viewer for notebooks: the env's renderer draws each recorded step, a panel shows
rewards, actors, actions and events; ``to_html`` exports the frames as a static page with a slider."""

from __future__ import annotations

import base64
import html
import io
import json
import sys
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import ipywidgets as w
import numpy as np

from maze_lab.core.trajectory.files import SUFFIX, list_episodes, load_episode, read_episode_header
from maze_lab.core.trajectory.records import EpisodeRecord, StepRecord, event_view, rebuild_renderer
from maze_lab.core.trajectory.serialization import ClassAllowList

_PANEL_CSS = ("font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; font-size: 13px; line-height: 1.45; "
              "color: #1b2631;")
_NOTE_CSS = ("background: #fef9e7; border-left: 4px solid #f1c40f; padding: 6px 10px; margin: 4px 0; "
             "font-family: system-ui, sans-serif; font-size: 13px; color: #4d3b00;")


def _fmt(value: Any, precision: int = 4) -> str:
    """A short, readable text of a recorded value (numbers, arrays, dicts, objects)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.{precision}g}"
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return _fmt(value.item(), precision)
        return np.array2string(value, precision=precision, threshold=12, edgeitems=3, max_line_width=72,
                               suppress_small=True)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt(v, precision)}" for k, v in value.items())
    if isinstance(value, tuple | list):
        inner = ", ".join(_fmt(v, precision) for v in value[:12]) + (", …" if len(value) > 12 else "")
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    return str(value)


_MAX_LINES = 8


def _flat_numbers(values: Any) -> tuple[list[str], np.ndarray] | None:
    """Labels and values of a dict of numeric arrays flattened into one vector (None if not numeric)."""
    if not isinstance(values, dict):
        values = {"value": values}
    labels: list[str] = []
    parts: list[np.ndarray] = []
    for name, v in values.items():
        arr = np.asarray(v)
        if arr.dtype.kind not in "biuf":
            return None
        flat = arr.astype(np.float64).ravel()
        labels.extend([name] if flat.size == 1 else [f"{name}[{i}]" for i in range(flat.size)])
        parts.append(flat)
    return (labels, np.concatenate(parts)) if parts else None


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


class TrajectoryViewer:
    """Replays recorded episodes step by step.

    Select an episode (when given a directory), move the step slider or press play: the env's renderer draws
    the recorded MazeState and MazeAction of the step, and the panel shows the step's reward, cumulative reward,
    actors with their action values, and events. Envs whose renderer cannot draw recorded states (e.g. Gymnasium
    envs) show the recorded numbers and a note instead of a picture.

    :param source: an :class:`EpisodeRecord`, an episode file, a directory of episode files (e.g. a run's
        ``trajectory_data``), or a list of records/files.
    :param allowed_classes: classes (or dotted paths, module prefixes ending in ``.``) besides maze-lab's own
        that may be rebuilt from the files (MazeStates, MazeActions, the renderer).
    :param renderer: a renderer to draw with instead of the recorded one.
    :param dpi: resolution of the drawn frames.
    :param cache_size: rendered frames kept for scrubbing back and forth.
    """

    def __init__(self, source: EpisodeRecord | str | Path | Sequence[EpisodeRecord | str | Path],
                 allowed_classes: Iterable[str | type] | None = None, renderer: Any = None, dpi: int = 72,
                 cache_size: int = 64):
        self.allowed = ClassAllowList.of(allowed_classes)
        self.renderer_override = renderer
        self.dpi = dpi
        self.cache_size = cache_size
        self._sources: list[EpisodeRecord | Path] = self._collect(source)
        self._loaded: OrderedDict[int, EpisodeRecord] = OrderedDict()
        self._frames: OrderedDict[tuple[int, int], bytes | None] = OrderedDict()
        self._renderers: dict[int, tuple[Any, str]] = {}
        self._series: dict[int, dict[str, Any] | None] = {}
        self._index = 0

        self.title = w.HTML()
        self.episode_dropdown = w.Dropdown(options=[(self._label(i), i) for i in range(len(self._sources))],
                                           value=0, description="episode",
                                           layout=w.Layout(width="640px"), style={"description_width": "60px"})
        if len(self._sources) == 1:
            self.episode_dropdown.layout.display = "none"
        self.play = w.Play(min=0, max=0, interval=400, step=1, description="play")
        self.slider = w.IntSlider(min=0, max=0, description="step", continuous_update=True,
                                  layout=w.Layout(width="520px"), style={"description_width": "40px"})
        w.jslink((self.play, "value"), (self.slider, "value"))
        self.prev_button = w.Button(icon="step-backward", tooltip="previous step", layout=w.Layout(width="40px"))
        self.next_button = w.Button(icon="step-forward", tooltip="next step", layout=w.Layout(width="40px"))
        self.prev_button.on_click(lambda _: self.show_step(self.slider.value - 1))
        self.next_button.on_click(lambda _: self.show_step(self.slider.value + 1))
        self.image = w.Image(format="png", layout=w.Layout(max_width="820px"))
        self.note = w.HTML()
        self.info = w.HTML(layout=w.Layout(min_width="300px", max_width="460px", overflow="auto"))
        self.slider.observe(lambda _: self._draw(), names="value")
        self.episode_dropdown.observe(lambda change: self.select_episode(change["new"]), names="value")
        self.widget = w.VBox([
            self.title, self.episode_dropdown,
            w.HBox([self.play, self.prev_button, self.slider, self.next_button]),
            self.note,
            w.HBox([self.image, self.info], layout=w.Layout(flex_flow="row wrap", align_items="flex-start")),
        ])
        self.select_episode(0)

    # ---- sources ---------------------------------------------------------------------------------------------
    @staticmethod
    def _collect(source: Any) -> list[EpisodeRecord | Path]:
        if isinstance(source, EpisodeRecord):
            return [source]
        if isinstance(source, str | Path):
            path = Path(source)
            if path.is_dir():
                files = list_episodes(path)
                if not files:
                    raise FileNotFoundError(f"no episode files (*{SUFFIX}) under {path}; record some with "
                                            f"TrajectoryRecordingWrapper or SequentialRolloutRunner")
                return list(files)
            if not path.exists():
                raise FileNotFoundError(f"{path} does not exist (give an episode file or a directory of them)")
            return [path]
        if isinstance(source, Sequence) and source:
            out: list[EpisodeRecord | Path] = []
            for item in source:
                out.extend(TrajectoryViewer._collect(item))
            return out
        raise TypeError(f"TrajectoryViewer needs an EpisodeRecord, an episode file, a directory or a non-empty list "
                        f"of those, got {type(source).__name__}")

    def _label(self, i: int) -> str:
        src = self._sources[i]
        if isinstance(src, EpisodeRecord):
            n, ret, eid, when = src.n_steps, src.total_reward, src.episode_id, src.metadata.get("created", "")
        else:
            h = read_episode_header(src)
            n, ret, eid, when = h.get("n_steps", 0), h.get("total_reward", float("nan")), h["episode_id"], \
                h.get("created", "")
        when = f"{when} · " if when else ""
        return f"#{i} · {when}{n} steps · return {ret:.4g} · {eid[:8]}"

    @property
    def n_episodes(self) -> int:
        """Number of episodes to choose from."""
        return len(self._sources)

    def load(self, i: int) -> EpisodeRecord:
        """Episode ``i`` (loaded on first use; a few are kept)."""
        if i in self._loaded:
            self._loaded.move_to_end(i)
            return self._loaded[i]
        src = self._sources[i]
        record = src if isinstance(src, EpisodeRecord) else load_episode(src, self.allowed)
        self._loaded[i] = record
        while len(self._loaded) > 4:
            self._loaded.popitem(last=False)
        return record

    @property
    def episode(self) -> EpisodeRecord:
        """The selected episode."""
        return self.load(self._index)

    @property
    def step(self) -> int:
        """The selected step index."""
        return int(self.slider.value)

    @property
    def current_step(self) -> StepRecord:
        """The record of the selected step."""
        return self.episode.steps[self.step]

    # ---- navigation --------------------------------------------------------------------------------------------
    def select_episode(self, i: int) -> None:
        """Show episode ``i`` from its first step."""
        if not 0 <= i < len(self._sources):
            n = len(self._sources)
            raise IndexError(f"episode {i} does not exist; there are {n} (0..{n - 1})")
        self._index = i
        if self.episode_dropdown.value != i:
            self.episode_dropdown.value = i  # observer calls back here: the rest happens in that call
            return
        ep = self.episode
        last = max(ep.n_steps - 1, 0)
        with self.slider.hold_trait_notifications():
            self.slider.value = 0
            self.slider.max = last
            self.play.max = last
        self.play.value = 0
        self.title.value = self._title_html(ep)
        self._draw()

    def show_step(self, step: int) -> None:
        """Show step ``step`` of the selected episode (clipped to the episode)."""
        self.slider.value = int(min(max(step, 0), self.slider.max))

    # ---- drawing -----------------------------------------------------------------------------------------------
    def renderer(self) -> tuple[Any, str]:
        """``(renderer or None, why there is none)`` for the selected episode."""
        if self.renderer_override is not None:
            return self.renderer_override, ""
        if self._index not in self._renderers:
            self._renderers[self._index] = rebuild_renderer(self.episode.renderer, self.allowed)
        return self._renderers[self._index]

    def render_png(self, step: int | None = None) -> bytes | None:
        """PNG bytes of a step drawn by the env's renderer (None where there is no drawing)."""
        step = self.step if step is None else step
        key = (self._index, step)
        if key in self._frames:
            self._frames.move_to_end(key)
            return self._frames[key]
        png = self._render(self.episode.steps[step]) if self.episode.steps else None
        self._frames[key] = png
        while len(self._frames) > self.cache_size:
            self._frames.popitem(last=False)
        return png

    def _render(self, rec: StepRecord) -> bytes | None:
        renderer, _ = self.renderer()
        if renderer is None:
            fig = self._numbers_figure(rec.index)
            if fig is None:
                return None
        elif not self._drawable(rec):
            return None
        else:
            fig = renderer.render(rec.maze_state, rec.maze_action, events=[event_view(e) for e in rec.events])
        try:
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=self.dpi)
            return buf.getvalue()
        finally:
            if "matplotlib.pyplot" in sys.modules:
                sys.modules["matplotlib.pyplot"].close(fig)
            fig.clear()

    def _numbers(self) -> dict[str, Any] | None:
        """Observation, action and return curves of the selected episode (first policy key), for envs without a
        renderer; None where the observations are not a few numbers."""
        if self._index in self._series:
            return self._series[self._index]
        ep = self.episode
        series = None
        if ep.steps:
            key = ep.step_keys[0]
            xs, obs, act = [], [], []
            for step in ep.steps:
                sub = next((s for s in step.substeps if s.actor_id.step_key == key), None)
                if sub is not None:
                    xs.append(step.index)
                    obs.append(_flat_numbers(sub.observation))
                    act.append(_flat_numbers(sub.action))
            if xs and obs[0] is not None and all(o is not None and len(o[1]) == len(obs[0][1]) for o in obs):
                series = {"x": np.array(xs), "obs_labels": obs[0][0][:_MAX_LINES],
                          "obs": np.array([o[1][:_MAX_LINES] for o in obs]), "key": key,
                          "cum": ep.cumulative_rewards, "n_obs": len(obs[0][1])}
                if act[0] is not None and all(a is not None and len(a[1]) == len(act[0][1]) for a in act):
                    series["act_labels"] = act[0][0][:_MAX_LINES]
                    series["act"] = np.array([a[1][:_MAX_LINES] for a in act])
        self._series[self._index] = series
        return series

    def _numbers_figure(self, step: int) -> Any:
        """A figure of the recorded observations, actions and return with the step marked (no renderer)."""
        from matplotlib.figure import Figure

        data = self._numbers()
        if data is None:
            return None
        rows = 3 if "act" in data else 2
        fig = Figure(figsize=(8.6, 1.75 * rows + 0.6), layout="constrained")
        axes = fig.subplots(rows, 1, sharex=True)
        x = data["x"]
        more = f" (first {_MAX_LINES} of {data['n_obs']})" if data["n_obs"] > _MAX_LINES else ""
        panels = [(axes[0], data["obs"], data["obs_labels"], f"observation, policy key {data['key']}{more}", "default")]
        if "act" in data:
            panels.append((axes[1], data["act"], data["act_labels"], "action", "steps-post"))
        for ax, values, labels, title, style in panels:
            for j, label in enumerate(labels):
                ax.plot(x, values[:, j], lw=1.4, label=label, drawstyle=style)
            ax.set_title(title, loc="left", fontsize=10)
            ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
        ax_ret = axes[-1]
        ax_ret.plot(np.arange(len(data["cum"])), data["cum"], color="#1e8449", lw=1.6)
        ax_ret.set_title("cumulative reward", loc="left", fontsize=10)
        ax_ret.set_xlabel("step")
        from matplotlib.ticker import MaxNLocator

        if "act" in data and np.all(np.mod(data["act"], 1) == 0):
            axes[1].yaxis.set_major_locator(MaxNLocator(integer=True))
        for ax in axes:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.axvline(step, color="#c0392b", lw=1.5, alpha=0.8)
            ax.grid(True, color="#eeeeee")
        fig.suptitle(f"Step {step}: recorded numbers (no renderer)", fontsize=12, fontweight="bold", x=0.01,
                     ha="left")
        return fig

    def _drawable(self, rec: StepRecord) -> bool:
        """False where the recorded state could not be rebuilt (a plain dict of a refused class)."""
        return not (isinstance(rec.maze_state, dict) and self.episode.refused_classes)

    def notes(self) -> list[str]:
        """Why the selected step is not drawn, if it is not."""
        ep = self.episode
        renderer, why = self.renderer()
        notes = []
        if renderer is None:
            notes.append(f"No picture of the env: {_esc(why)}. Showing the recorded numbers instead.")
        elif ep.steps and not self._drawable(ep.steps[self.step]):
            notes.append("No picture: the MazeState was loaded as a plain dict because its class is not allowed "
                         "(see below).")
        for path, reason in ep.refused_classes.items():
            notes.append(f"Class <code>{_esc(path)}</code> was not rebuilt: {_esc(reason)}. Pass "
                         f"<code>allowed_classes=['{_esc(path)}']</code> if you trust this file.")
        if not ep.finished:
            notes.append("This episode was cut off (reset or closed before it ended).")
        return notes

    def _draw(self) -> None:
        ep = self.episode
        if not ep.steps:
            self.image.layout.display = "none"
            self.info.value = f"<div style=\"{_PANEL_CSS}\">This episode has no steps.</div>"
            return
        try:
            png = self.render_png()
            render_error = ""
        except Exception as err:  # noqa: BLE001 - a broken renderer must not break the viewer
            png, render_error = None, f"The renderer failed on this step: {type(err).__name__}: {_esc(str(err))}"
        if png:
            self.image.value = png
            self.image.layout.display = None
        else:
            self.image.layout.display = "none"
        notes = self.notes() + ([render_error] if render_error else [])
        self.note.value = "".join(f"<div style=\"{_NOTE_CSS}\">{n}</div>" for n in notes)
        self.info.value = self.step_html(self.step, with_observations=self.renderer()[0] is None or png is None)

    # ---- panels ------------------------------------------------------------------------------------------------
    @staticmethod
    def _title_html(ep: EpisodeRecord) -> str:
        env = (ep.env or "unknown env").rsplit(".", 1)[-1]
        gym_id = ep.metadata.get("gym_env_id")
        env = f"{env} ({gym_id})" if gym_id else env
        status = "" if ep.finished else " · <span style='color:#b9770e'>cut off</span>"
        return (f"<div style=\"{_PANEL_CSS}\"><b style='font-size:15px'>Episode {_esc(ep.episode_id[:8])}</b> · "
                f"{_esc(env)} · {ep.n_steps} steps · return {ep.total_reward:.4g}{status}</div>")

    def step_html(self, step: int, with_observations: bool = False) -> str:
        """The info panel of a step: rewards, actors and actions, MazeAction, events (and observations)."""
        ep = self.episode
        rec = ep.steps[step]
        cum = float(ep.cumulative_rewards[step])
        flags = []
        if rec.terminated:
            flags.append("terminated")
        if rec.truncated:
            flags.append("truncated")
        flag_txt = f" <span style='color:#c0392b'>({', '.join(flags)})</span>" if flags else ""
        rows = [
            f"<tr><th style='text-align:left;padding-right:12px'>step</th><td class='step-index'>{step} "
            f"<span style='color:#888'>/ {ep.n_steps - 1}</span>{flag_txt}</td></tr>",
            f"<tr><th style='text-align:left'>reward</th><td class='step-reward'>{_fmt(rec.reward)}</td></tr>",
            f"<tr><th style='text-align:left'>cumulative</th><td class='cum-reward'>{_fmt(cum)}</td></tr>",
        ]
        subs = []
        for sub in rec.substeps:
            actor = f"{sub.actor_id.step_key}" + (f"/{sub.actor_id.agent_id}" if sub.actor_id.agent_id else "")
            action = "<br>".join(f"<code>{_esc(k)}</code> = {_esc(_fmt(v))}" for k, v in sub.action.items()) \
                if isinstance(sub.action, dict) else _esc(_fmt(sub.action))
            obs = ""
            if with_observations:
                items = sub.observation.items() if isinstance(sub.observation, dict) else [("", sub.observation)]
                obs = "<br>".join(f"<code>{_esc(k)}</code> = <span style='white-space:pre'>{_esc(_fmt(v))}</span>"
                                  for k, v in items)
                obs = f"<td style='padding:2px 8px;vertical-align:top'>{obs}</td>"
            subs.append(f"<tr><td style='padding:2px 8px;vertical-align:top'>{_esc(actor)}</td>"
                        f"<td style='padding:2px 8px;vertical-align:top;white-space:nowrap' class='action'>"
                        f"{action}</td>"
                        f"<td style='padding:2px 8px;vertical-align:top;text-align:right'>{_fmt(sub.reward)}</td>"
                        f"{obs}</tr>")
        obs_head = "<th style='text-align:left;padding:2px 8px'>observation</th>" if with_observations else ""
        sub_table = ("<table style='border-collapse:collapse;margin-top:6px'>"
                     "<tr style='border-bottom:1px solid #ccd1d1'><th style='text-align:left;padding:2px 8px'>actor"
                     "</th><th style='text-align:left;padding:2px 8px'>action</th><th style='padding:2px 8px'>"
                     f"reward</th>{obs_head}</tr>{''.join(subs)}</table>")
        parts = [f"<table>{''.join(rows)}</table>", "<div style='margin-top:8px;font-weight:600'>actors</div>",
                 sub_table]
        if rec.maze_action is not None:
            parts.append(f"<div style='margin-top:8px'><b>MazeAction</b> <code>{_esc(_fmt(rec.maze_action))}</code>"
                         f"</div>")
        if with_observations and rec.maze_state is not None:
            parts.append(f"<div style='margin-top:4px'><b>MazeState</b> <code style='white-space:pre-wrap'>"
                         f"{_esc(_fmt(rec.maze_state))}</code></div>")
        events = rec.events
        if events:
            items = "".join(f"<li><code>{_esc(e.get('topic', ''))}.{_esc(e.get('event', ''))}</code>"
                            f"{' ' + _esc(_fmt(e.get('attributes'))) if e.get('attributes') else ''}</li>"
                            for e in events)
            parts.append(f"<div style='margin-top:8px'><b>events</b><ul class='events' style='margin:2px 0;"
                         f"padding-left:18px'>{items}</ul></div>")
        else:
            parts.append("<div style='margin-top:8px;color:#888'>no events</div>")
        return f"<div style=\"{_PANEL_CSS}\">{''.join(parts)}</div>"

    # ---- display and export ----------------------------------------------------------------------------------
    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    def to_html(self, path: str | Path, steps: Iterable[int] | None = None) -> Path:
        """A static HTML page of the selected episode: every frame and panel, with a slider in plain JavaScript.

        :param steps: which steps to include (default: all; long episodes render every frame, so pass e.g.
            ``range(0, n, 5)`` for a lighter page).
        """
        ep = self.episode
        indices = list(range(ep.n_steps)) if steps is None else [int(s) for s in steps if 0 <= int(s) < ep.n_steps]
        if not indices:
            raise ValueError(f"no steps to export: the episode has {ep.n_steps} steps")
        frames, panels = [], []
        no_renderer = self.renderer()[0] is None
        for i in indices:
            try:
                png = self.render_png(i)
            except Exception:  # noqa: BLE001 - one broken frame must not lose the page
                png = None
            frames.append("" if png is None else "data:image/png;base64," + base64.b64encode(png).decode("ascii"))
            panels.append(self.step_html(i, with_observations=no_renderer or png is None))
        notes = "".join(f"<div class='note'>{n}</div>" for n in self.notes()
                        if not n.startswith("No picture: the MazeState"))
        data = json.dumps({"steps": indices, "last": ep.n_steps - 1, "frames": frames, "panels": panels})
        data = data.replace("</", "<\\/")  # no "</script>" inside the script
        page = _PAGE.format(title=_esc(f"Episode {ep.episode_id}"), header=self._title_html(ep), notes=notes,
                            last=len(indices) - 1, data=data)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
        return path


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
  body {{ font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 18px 24px; color: #1b2631;
         background: #f7f9fa; }}
  .card {{ background: white; border: 1px solid #dde3e6; border-radius: 8px; padding: 12px 16px;
          box-shadow: 0 1px 2px rgba(0,0,0,.04); }}
  .controls {{ display: flex; align-items: center; gap: 10px; margin: 12px 0; }}
  .controls input[type=range] {{ width: 520px; }}
  .controls button {{ font-size: 14px; padding: 3px 10px; border: 1px solid #b8c2c8; border-radius: 5px;
                     background: #fff; cursor: pointer; }}
  .controls button:hover {{ background: #eef3f6; }}
  #step-label {{ font-variant-numeric: tabular-nums; font-weight: 600; min-width: 90px; }}
  .main {{ display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }}
  #frame-card {{ flex: 0 1 auto; }}
  #frame {{ max-width: 100%; border-radius: 6px; display: block; }}
  #info {{ flex: 1 1 320px; max-width: 520px; }}
  .note {{ background: #fef9e7; border-left: 4px solid #f1c40f; padding: 6px 10px; margin: 4px 0; font-size: 13px; }}
  code {{ background: #f2f4f5; padding: 0 3px; border-radius: 3px; }}
</style></head>
<body>
<div class="card">{header}</div>
{notes}
<div class="controls">
  <button id="prev" title="previous step (←)">&#9664;</button>
  <button id="play" title="play / pause (space)">&#9654; play</button>
  <button id="next" title="next step (→)">&#9654;</button>
  <input id="step-slider" type="range" min="0" max="{last}" value="0" step="1">
  <span id="step-label"></span>
</div>
<div class="main">
  <div class="card" id="frame-card"><img id="frame" alt="rendered step"></div>
  <div class="card" id="info"></div>
</div>
<script>
const DATA = {data};
const slider = document.getElementById("step-slider");
const label = document.getElementById("step-label");
const frame = document.getElementById("frame");
const frameCard = document.getElementById("frame-card");
const info = document.getElementById("info");
const playButton = document.getElementById("play");
let timer = null;
function show(k) {{
  k = Math.max(0, Math.min(DATA.steps.length - 1, k));
  slider.value = k;
  label.textContent = "step " + DATA.steps[k] + " / " + DATA.last;
  if (DATA.frames[k]) {{ frame.src = DATA.frames[k]; frameCard.style.display = ""; }}
  else {{ frameCard.style.display = "none"; }}
  info.innerHTML = DATA.panels[k];
}}
function stop() {{ if (timer) {{ clearInterval(timer); timer = null; playButton.innerHTML = "&#9654; play"; }} }}
slider.addEventListener("input", () => show(parseInt(slider.value)));
document.getElementById("prev").addEventListener("click", () => {{ stop(); show(parseInt(slider.value) - 1); }});
document.getElementById("next").addEventListener("click", () => {{ stop(); show(parseInt(slider.value) + 1); }});
playButton.addEventListener("click", () => {{
  if (timer) {{ stop(); return; }}
  playButton.innerHTML = "&#10073;&#10073; pause";
  timer = setInterval(() => {{
    const k = parseInt(slider.value) + 1;
    if (k >= DATA.steps.length) {{ stop(); return; }}
    show(k);
  }}, 400);
}});
document.addEventListener("keydown", (e) => {{
  if (e.target === slider) return;  // the focused slider moves itself
  if (e.key === "ArrowRight") {{ stop(); show(parseInt(slider.value) + 1); }}
  if (e.key === "ArrowLeft") {{ stop(); show(parseInt(slider.value) - 1); }}
}});
show(0);
</script>
</body></html>
"""
