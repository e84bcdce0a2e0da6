"""The trajectory viewer for notebooks, the view over :class:`~maze_lab.widgets.trajectory_data.TrajectoryData`.

Per step it shows a picture (the env's recorded frame for plain Gymnasium envs, the env's renderer drawing the
recorded state for envs such as Cutting-2D, else a plot of the recorded numbers), a panel with rewards, actors,
actions and events, and a reward/KPI strip over the episode with the current step marked. ``to_html`` writes a
static page: one plotly figure with a frame per step and plotly's own slider and play button.
"""

from __future__ import annotations

import asyncio
import base64
import html
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import ipywidgets as w
import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from maze_lab.core.trajectory.files import TrajectoryLimits
from maze_lab.core.trajectory.frames import encode_png
from maze_lab.core.trajectory.records import EpisodeRecord, StepRecord
from maze_lab.widgets.plotly_widgets import FigureWidget
from maze_lab.widgets.theme import themed
from maze_lab.widgets.trajectory_data import TrajectoryData, finite_or_none, short_text

_PANEL_CSS = ("font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; font-size: 13px; line-height: 1.45; "
              "color: var(--jp-ui-font-color1, #1b2631);")
_NOTE_CSS = ("background: #fef9e7; border-left: 4px solid #f1c40f; padding: 6px 10px; margin: 4px 0; "
             "font-family: system-ui, sans-serif; font-size: 13px; color: #4d3b00;")
_REWARD_COLOUR = "#2e86c1"
_RETURN_COLOUR = "#1e8449"
_MARKER_COLOUR = "#c0392b"


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def strip_figure(data: dict[str, Any], step: int = 0, height: int | None = None) -> go.Figure:
    """The reward/KPI strip of an episode as a plotly figure: step rewards (bars) and return (line, right axis)
    on top, the other per-step numbers below; a vertical line and a point on the return mark ``step``.

    Trace order is fixed: 0 reward, 1 return, 2 the current-step point, then the extras; ``layout.shapes[0]``
    is the vertical line.

    :param data: :meth:`TrajectoryData.strip` of the episode.
    """
    extra = data["extra"]
    rows = 2 if extra else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        row_heights=[0.55, 0.45] if rows == 2 else None, specs=[[{"secondary_y": True}]]
                        + ([[{}]] if rows == 2 else []))
    x = [int(v) for v in data["x"]]
    ret = finite_or_none(data["return"])
    fig.add_trace(go.Bar(x=x, y=finite_or_none(data["reward"]), name="reward", marker_color=_REWARD_COLOUR,
                         opacity=0.75, hovertemplate="step %{x}<br>reward %{y:.4g}<extra></extra>"),
                  row=1, col=1, secondary_y=False)
    fig.add_trace(go.Scatter(x=x, y=ret, name="return", mode="lines", line={"color": _RETURN_COLOUR, "width": 2},
                             hovertemplate="step %{x}<br>return %{y:.4g}<extra></extra>"),
                  row=1, col=1, secondary_y=True)
    here = min(max(step, 0), len(x) - 1) if x else 0
    fig.add_trace(go.Scatter(x=[here] if x else [], y=[ret[here]] if x else [], name="current step",
                             mode="markers", marker={"color": _MARKER_COLOUR, "size": 10, "symbol": "circle"},
                             showlegend=False, hoverinfo="skip"),
                  row=1, col=1, secondary_y=True)
    for k, (name, values) in enumerate(extra.items()):
        fig.add_trace(go.Scatter(x=x, y=finite_or_none(values), name=name, mode="lines+markers",
                                 marker={"size": 4}, line={"width": 1.4, "shape": "hv"},
                                 visible=True if k < 4 else "legendonly",
                                 hovertemplate=f"step %{{x}}<br>{_esc(name)} %{{y:.4g}}<extra></extra>"),
                      row=2, col=1)
    fig.add_shape(type="line", x0=here, x1=here, xref="x", y0=0, y1=1, yref="paper",
                  line={"color": _MARKER_COLOUR, "width": 2, "dash": "dot"})
    fig.update_layout(height=height or (320 if rows == 2 else 220), margin={"l": 50, "r": 20, "t": 30, "b": 36},
                      template="plotly_white", bargap=0.15, hovermode="x", title={"text": "reward and per-step numbers",
                                                                                  "font": {"size": 13}, "x": 0.01},
                      legend={"x": 1.08, "xanchor": "left", "y": 1, "font": {"size": 11}}, uirevision="strip")
    # both axes include zero: the marker's padding must not push the return axis below zero for a positive return
    fig.update_yaxes(title_text="reward", row=1, col=1, secondary_y=False, title_font={"size": 11}, rangemode="tozero")
    fig.update_yaxes(title_text="return", row=1, col=1, secondary_y=True, showgrid=False, title_font={"size": 11},
                     rangemode="tozero")
    fig.update_xaxes(title_text="step", row=rows, col=1)
    return fig


class TrajectoryViewer:
    """Replays recorded episodes step by step.

    Select an episode (when given a directory), move the step slider, press play, or click the strip: the step's
    picture is shown (recorded frames for plain Gymnasium envs, the env's renderer drawing the recorded MazeState
    and MazeAction for envs that have one, the recorded numbers otherwise), the panel shows the step's reward,
    cumulative reward, actors with their action values and events, and the reward/KPI strip below marks the step.

    Drawn pictures are cached; inside a running kernel the viewer draws the next few steps ahead on the kernel's
    event loop while nobody is looking, so that stepping forward shows a drawn step from the cache.

    :param source: an :class:`EpisodeRecord`, an episode file, a directory of episode files (e.g. a run's
        ``trajectories``), or a list of records/files.
    :param allowed_classes: classes (or dotted paths, module prefixes ending in ``.``) besides maze-lab's own
        that may be rebuilt from the files (MazeStates, MazeActions, the renderer).
    :param renderer: a renderer to draw with instead of the recorded one (or the recorded frames).
    :param dpi: resolution of drawn pictures.
    :param cache_size: drawn pictures kept for scrubbing back and forth.
    :param read_ahead: steps after the shown one to draw ahead inside a running kernel (0: none).
    :param limits: reading limits for the files.
    """

    def __init__(self, source: EpisodeRecord | str | Path | Sequence[EpisodeRecord | str | Path],
                 allowed_classes: Iterable[str | type] | None = None, renderer: Any = None, dpi: int = 72,
                 cache_size: int = 256, read_ahead: int = 4, limits: TrajectoryLimits | None = None):
        self.data = TrajectoryData(source, allowed_classes, renderer=renderer, dpi=dpi, cache_size=cache_size,
                                   limits=limits)
        """The data side: episodes, pictures (cached) and the strip's series."""
        self.read_ahead = int(read_ahead)
        self._index = 0
        self._ahead: asyncio.Handle | None = None
        self._generation = 0
        self._closed = False

        self.title = w.HTML()
        self.episode_dropdown = w.Dropdown(options=[(self.data.label(i), i) for i in range(len(self.data))],
                                           value=0, description="episode",
                                           layout=w.Layout(width="640px"), style={"description_width": "60px"})
        if len(self.data) == 1:
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
        self.strip = FigureWidget()
        """The reward/KPI strip (see :func:`strip_figure` for its traces); clicking it selects a step."""
        self._strip_box = w.Box([self.strip], layout=w.Layout(width="100%", max_width="1300px"))
        self._strip_key: tuple | None = None
        self.slider.observe(lambda _: self._draw(), names="value")
        self.episode_dropdown.observe(lambda change: self.select_episode(change["new"]), names="value")
        self.widget = themed(w.VBox([
            self.title, self.episode_dropdown,
            w.HBox([self.play, self.prev_button, self.slider, self.next_button]),
            self.note,
            w.HBox([self.image, self.info], layout=w.Layout(flex_flow="row wrap", align_items="flex-start")),
            self._strip_box,
        ]))
        """The whole viewer (display it, or put it in a layout)."""
        self.select_episode(0)

    # ---- episodes and steps --------------------------------------------------------------------------------
    @property
    def n_episodes(self) -> int:
        """Number of episodes to choose from."""
        return len(self.data)

    def load(self, i: int) -> EpisodeRecord:
        """Episode ``i`` (loaded on first use; a few are kept)."""
        return self.data.load(i)

    @property
    def episode(self) -> EpisodeRecord:
        """The selected episode."""
        return self.data.load(self._index)

    @property
    def episode_index(self) -> int:
        """The index of the selected episode."""
        return self._index

    @property
    def step(self) -> int:
        """The selected step index."""
        return int(self.slider.value)

    @property
    def current_step(self) -> StepRecord:
        """The record of the selected step."""
        return self.episode.steps[self.step]

    @property
    def picture_kind(self) -> str:
        """How the selected episode is pictured: ``"frames"``, ``"renderer"`` or ``"numbers"``."""
        return self.data.picture_kind(self._index)

    def select_episode(self, i: int) -> None:
        """Show episode ``i`` from its first step."""
        self.data.check_index(i)
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
        self._update_strip()
        self._draw()

    def show_step(self, step: int) -> None:
        """Show step ``step`` of the selected episode (clipped to the episode)."""
        self.slider.value = int(min(max(step, 0), self.slider.max))

    def renderer(self) -> tuple[Any, str]:
        """``(renderer or None, why there is none)`` for the selected episode."""
        return self.data.renderer(self._index)

    def render_png(self, step: int | None = None) -> bytes | None:
        """PNG bytes of a step's picture (None where there is none); cached."""
        return self.data.png(self._index, self.step if step is None else step)

    # ---- drawing -------------------------------------------------------------------------------------------
    def notes(self) -> list[str]:
        """Why the selected step is pictured the way it is, where that needs saying."""
        ep = self.episode
        kind = self.picture_kind
        notes = []
        if kind == "numbers":
            _, why = self.renderer()
            notes.append(f"No picture of the env: {_esc(why)}, and no frames were recorded (record them with "
                         f"<code>render_mode='rgb_array'</code>). Showing the recorded numbers instead.")
        elif kind == "renderer" and ep.steps and not self.data.drawable(self._index, ep.steps[self.step]):
            notes.append("No picture: the MazeState was loaded as a plain dict because its class is not allowed "
                         "(see below).")
        elif kind == "frames" and ep.steps and self.step not in ep.frames:
            why = (f"the env's frame failed: {_esc(ep.frames.error)}" if ep.frames.error
                   else "the recorder's <code>max_frames</code>")
            notes.append(f"No frame was recorded for this step ({ep.frames.dropped} steps of this episode have "
                         f"none: {why}).")
        if kind != "frames" and ep.frames is not None and ep.frames.error:
            notes.append(f"Recording the env's frames failed: {_esc(ep.frames.error)}.")
        for path, reason in ep.refused_classes.items():
            notes.append(f"Class <code>{_esc(path)}</code> was not rebuilt: {_esc(reason)}. Pass "
                         f"<code>allowed_classes=['{_esc(path)}']</code> if you trust this file.")
        if not ep.finished:
            notes.append("This episode was cut off (reset or closed before it ended).")
        return notes

    def _draw(self) -> None:
        if self._closed:
            return
        ep = self.episode
        if not ep.steps:
            self.image.layout.display = "none"
            self.info.value = f"<div style=\"{_PANEL_CSS}\">This episode has no steps.</div>"
            return
        step = self.step
        try:
            png = self.render_png(step)
            render_error = ""
        except Exception as err:  # noqa: BLE001 - a broken renderer or frame must not break the viewer
            png, render_error = None, f"No picture of this step: {type(err).__name__}: {_esc(str(err))}"
        if png:
            self.image.value = png
            self.image.layout.display = None
        else:
            self.image.layout.display = "none"
        notes = self.notes() + ([render_error] if render_error else [])
        self.note.value = "".join(f"<div style=\"{_NOTE_CSS}\">{n}</div>" for n in notes)
        self.info.value = self.step_html(step, with_observations=self.picture_kind == "numbers" or png is None)
        self._mark_strip(step)
        self._schedule_read_ahead()

    # ---- the strip ------------------------------------------------------------------------------------------
    def _update_strip(self) -> None:
        """Put the selected episode's series into the strip: in place where the traces are the same kinds."""
        data = self.data.strip(self._index)
        key = tuple(data["extra"])
        fig = strip_figure(data, self.step)
        if key == self._strip_key:
            with self.strip.batch_update():
                for old, new in zip(self.strip.data, fig.data, strict=True):
                    old.x, old.y = new.x, new.y
                self.strip.layout.shapes[0].update(x0=fig.layout.shapes[0].x0, x1=fig.layout.shapes[0].x1)
            return
        old = self.strip
        self.strip = FigureWidget(fig)
        for trace in self.strip.data[:2]:
            trace.on_click(self._strip_clicked)
        self._strip_box.children = [self.strip]
        self._strip_key = key
        if old is not None:
            old.close()

    def _strip_clicked(self, trace: Any, points: Any, state: Any) -> None:
        if points.xs:
            self.show_step(int(points.xs[0]))

    def _mark_strip(self, step: int) -> None:
        """Move the strip's step marker (a vertical line and a point on the return) in place."""
        ret = self.strip.data[1].y if len(self.strip.data) > 1 else None
        if not ret or step >= len(ret):
            return
        with self.strip.batch_update():
            self.strip.layout.shapes[0].update(x0=step, x1=step)
            self.strip.data[2].x, self.strip.data[2].y = [step], [ret[step]]

    @property
    def marker_step(self) -> int | None:
        """The step the strip's marker is on (the selected step, once drawn)."""
        shapes = self.strip.layout.shapes
        return int(shapes[0].x0) if shapes else None

    # ---- reading ahead ---------------------------------------------------------------------------------------
    def _schedule_read_ahead(self) -> None:
        """Inside a running event loop (a kernel), draw the next steps one per loop turn while idle."""
        if self._ahead is not None:
            self._ahead.cancel()
            self._ahead = None
        if self.read_ahead <= 0 or self.picture_kind == "frames":  # frames are read, not drawn: nothing to gain
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a plain script: nothing runs between calls, so nothing is drawn ahead
            return
        self._generation += 1
        self._ahead = loop.call_later(0.05, self._draw_ahead, loop, self._generation, self._index, self.step)

    def _draw_ahead(self, loop: asyncio.AbstractEventLoop, generation: int, episode: int, step: int) -> None:
        self._ahead = None
        if self._closed or generation != self._generation:
            return
        last = self.episode.n_steps - 1
        for s in [*range(step + 1, min(step + self.read_ahead, last) + 1), step - 1]:
            if 0 <= s <= last and not self.data.cached(episode, s):
                try:
                    self.data.png(episode, s)
                except Exception:  # noqa: BLE001 - shown (with its error) when the user gets there
                    return
                self._ahead = loop.call_later(0.01, self._draw_ahead, loop, generation, episode, step)
                return

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
            f"<tr><th style='text-align:left'>reward</th><td class='step-reward'>{short_text(rec.reward)}</td></tr>",
            f"<tr><th style='text-align:left'>cumulative</th><td class='cum-reward'>{short_text(cum)}</td></tr>",
        ]
        subs = []
        for sub in rec.substeps:
            actor = f"{sub.actor_id.step_key}" + (f"/{sub.actor_id.agent_id}" if sub.actor_id.agent_id else "")
            action = "<br>".join(f"<code>{_esc(k)}</code> = {_esc(short_text(v))}" for k, v in sub.action.items()) \
                if isinstance(sub.action, dict) else _esc(short_text(sub.action))
            obs = ""
            if with_observations:
                items = sub.observation.items() if isinstance(sub.observation, dict) else [("", sub.observation)]
                obs = "<br>".join(f"<code>{_esc(k)}</code> = <span style='white-space:pre'>{_esc(short_text(v))}</span>"
                                  for k, v in items)
                obs = f"<td style='padding:2px 8px;vertical-align:top'>{obs}</td>"
            subs.append(f"<tr><td style='padding:2px 8px;vertical-align:top'>{_esc(actor)}</td>"
                        f"<td style='padding:2px 8px;vertical-align:top;white-space:nowrap' class='action'>"
                        f"{action}</td>"
                        f"<td style='padding:2px 8px;vertical-align:top;text-align:right'>{short_text(sub.reward)}</td>"
                        f"{obs}</tr>")
        obs_head = "<th style='text-align:left;padding:2px 8px'>observation</th>" if with_observations else ""
        sub_table = ("<table style='border-collapse:collapse;margin-top:6px'>"
                     "<tr style='border-bottom:1px solid #ccd1d1'><th style='text-align:left;padding:2px 8px'>actor"
                     "</th><th style='text-align:left;padding:2px 8px'>action</th><th style='padding:2px 8px'>"
                     f"reward</th>{obs_head}</tr>{''.join(subs)}</table>")
        parts = [f"<table>{''.join(rows)}</table>", "<div style='margin-top:8px;font-weight:600'>actors</div>",
                 sub_table]
        if rec.maze_action is not None:
            parts.append(f"<div style='margin-top:8px'><b>MazeAction</b> "
                         f"<code>{_esc(short_text(rec.maze_action))}</code></div>")
        if with_observations and rec.maze_state is not None:
            parts.append(f"<div style='margin-top:4px'><b>MazeState</b> <code style='white-space:pre-wrap'>"
                         f"{_esc(short_text(rec.maze_state))}</code></div>")
        events = rec.events
        if events:
            items = "".join(f"<li><code>{_esc(e.get('topic', ''))}.{_esc(e.get('event', ''))}</code>"
                            f"{' ' + _esc(short_text(e.get('attributes'))) if e.get('attributes') else ''}</li>"
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

    def close(self) -> None:
        """Stop drawing ahead and close the widgets (their views disappear from the notebook)."""
        self._closed = True
        if self._ahead is not None:
            self._ahead.cancel()
            self._ahead = None
        self.data.close()
        self.strip.close()
        for widget in (self.title, self.episode_dropdown, self.play, self.slider, self.prev_button,
                       self.next_button, self.image, self.note, self.info, self._strip_box):
            widget.close()
        self.widget.close()

    def export_figure(self, steps: Iterable[int] | None = None) -> go.Figure:
        """The selected episode as one plotly figure with a frame per step: the step's picture on top, the
        reward/KPI strip with its marker below, the step's numbers in the title and a note; plotly's own slider
        and play button move through the frames (what :meth:`to_html` writes).

        :param steps: which steps to include (default: all; drawn pictures are rendered for every included step,
            so pass e.g. ``range(0, n, 5)`` for a long episode).
        """
        ep = self.episode
        indices = list(range(ep.n_steps)) if steps is None else [int(s) for s in steps if 0 <= int(s) < ep.n_steps]
        if not indices:
            raise ValueError(f"no steps to export: the episode has {ep.n_steps} steps")
        strip = self.data.strip(self._index)
        sfig = strip_figure(strip, indices[0])
        strip_rows = 2 if strip["extra"] else 1
        rows = 1 + strip_rows
        heights = [0.62, 0.38] if strip_rows == 1 else [0.56, 0.22, 0.22]
        specs = [[{}], [{"secondary_y": True}]] + ([[{}]] if strip_rows == 2 else [])
        fig = make_subplots(rows=rows, cols=1, row_heights=heights, vertical_spacing=0.07, specs=specs)
        sources = []
        for i in indices:
            try:
                png = self.render_png(i)
            except Exception:  # noqa: BLE001 - one broken picture must not lose the page
                png = None
            sources.append(_BLANK_PNG if png is None else "data:image/png;base64," + base64.b64encode(png).decode())
        fig.add_trace(go.Image(source=sources[0], name="picture", hoverinfo="skip"), row=1, col=1)
        # the strip's traces, one row lower (trace order as in strip_figure: reward, return, point, extras)
        for k, trace in enumerate(sfig.data):
            row = 2 if k < 3 else 3
            fig.add_trace(trace, row=row, col=1, secondary_y=(k in (1, 2)) if row == 2 else None)
        fig.update_xaxes(visible=False, row=1, col=1)
        fig.update_yaxes(visible=False, row=1, col=1)
        fig.update_yaxes(title_text="reward", row=2, col=1, secondary_y=False)
        fig.update_yaxes(title_text="return", row=2, col=1, secondary_y=True, showgrid=False)
        fig.update_xaxes(title_text="step", row=rows, col=1)
        # the marker: a vertical line in each strip row (on that row's axes, spanning its height)
        # (trace 0 is the picture; 1 reward, 2 return, 3 the current-step point, 4... the extras)
        rows_axes = [(fig.data[1].xaxis, fig.data[1].yaxis)] + ([(fig.data[4].xaxis, fig.data[4].yaxis)]
                                                               if len(fig.data) > 4 else [])
        if len(rows_axes) == 2:
            fig.update_xaxes(matches=rows_axes[0][0], row=3, col=1)
        ret = strip["return"]

        def marker(step: int) -> list[dict[str, Any]]:
            return [{"type": "line", "x0": step, "x1": step, "xref": xa, "y0": 0, "y1": 1, "yref": f"{ya} domain",
                     "line": {"color": _MARKER_COLOUR, "width": 2, "dash": "dot"}} for xa, ya in rows_axes]

        def title(step: int) -> dict[str, Any]:
            rec = ep.steps[step]
            flags = " (terminated)" if rec.terminated else " (truncated)" if rec.truncated else ""
            return {"text": f"<b>step {step} / {ep.n_steps - 1}</b>{flags} · reward {short_text(rec.reward)} · "
                            f"return {short_text(float(ret[step]))}", "x": 0.01, "xanchor": "left"}

        def details(step: int) -> list[dict[str, Any]]:
            rec = ep.steps[step]
            acts = []
            for sub in rec.substeps:
                act = short_text(sub.action) if not isinstance(sub.action, dict) else ", ".join(
                    f"{k}={short_text(v)}" for k, v in sub.action.items())
                acts.append(f"<b>{_esc(str(sub.actor_id.step_key))}</b>: {_esc(act)}")
            events = ", ".join(_esc(f"{e.get('topic', '')}.{e.get('event', '')}") for e in rec.events[:6])
            more = f" (+{len(rec.events) - 6})" if len(rec.events) > 6 else ""
            text = "actions " + " · ".join(acts) + (f"<br>events {events}{more}" if events else "")
            return [{"text": text, "xref": "paper", "yref": "paper", "x": 0, "y": 1.0, "yanchor": "bottom",
                     "xanchor": "left", "showarrow": False, "align": "left", "font": {"size": 12}}]

        frames = []
        for step, source in zip(indices, sources, strict=True):
            frames.append(go.Frame(name=str(step), traces=[0, 3],
                                   data=[go.Image(source=source), go.Scatter(x=[step], y=[float(ret[step])])],
                                   layout={"shapes": marker(step), "title": title(step),
                                           "annotations": details(step)}))
        fig.frames = frames
        animate = {"frame": {"duration": 0, "redraw": True}, "mode": "immediate", "transition": {"duration": 0}}
        fig.update_layout(
            shapes=marker(indices[0]), title=title(indices[0]), annotations=details(indices[0]),
            template="plotly_white", height=900 if strip_rows == 2 else 780, width=1120, bargap=0.15,
            margin={"l": 60, "r": 270, "t": 90, "b": 110}, showlegend=True,
            legend={"x": 1.07, "xanchor": "left", "y": 0.42, "yanchor": "top", "font": {"size": 11}},
            sliders=[{"active": 0, "currentvalue": {"prefix": "step "}, "pad": {"t": 40}, "x": 0.14, "len": 0.86,
                      # one tick per step; their labels only where they do not crowd each other
                      "font": {"color": "#444" if len(indices) <= 40 else "rgba(0,0,0,0)"},
                      "steps": [{"label": str(s), "method": "animate", "args": [[str(s)], animate]}
                                for s in indices]}],
            updatemenus=[{"type": "buttons", "direction": "left", "x": 0, "y": 0, "xanchor": "left",
                          "yanchor": "top", "pad": {"t": 62, "r": 10}, "showactive": False,
                          "buttons": [{"label": "▶ play", "method": "animate",
                                       "args": [None, {**animate, "frame": {"duration": 400, "redraw": True},
                                                       "fromcurrent": True}]},
                                      {"label": "❚❚ pause", "method": "animate",
                                       "args": [[None], {**animate, "mode": "immediate"}]}]}])
        return fig

    def to_html(self, path: str | Path, steps: Iterable[int] | None = None,
                include_plotlyjs: bool | str = True) -> Path:
        """A static HTML page of the selected episode: :meth:`export_figure` written by plotly.

        :param steps: which steps to include (default: all).
        :param include_plotlyjs: ``True`` puts plotly.js into the page (it opens offline, about 4.7 MB more);
            ``"cdn"`` loads it from the web.
        """
        fig = self.export_figure(steps)
        ep = self.episode
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        page = fig.to_html(full_html=True, include_plotlyjs=include_plotlyjs, div_id="trajectory",
                           auto_play=False, config={"displaylogo": False, "responsive": True})
        head = (f"<title>{_esc(f'Episode {ep.episode_id}')}</title>\n"
                f"<style>body {{ font-family: system-ui, sans-serif; margin: 12px 20px; }}</style>")
        page = page.replace("<head>", "<head>\n" + head, 1)
        notes = "".join(f"<div style=\"{_NOTE_CSS}\">{n}</div>" for n in self.notes()
                        if not n.startswith("No frame was recorded"))
        page = page.replace("<body>", f"<body>\n{self._title_html(ep)}{notes}", 1)
        path.write_text(page, encoding="utf-8")
        return path


_BLANK_PNG = "data:image/png;base64," + base64.b64encode(encode_png(np.zeros((1, 1, 4), np.uint8))).decode()
"""A transparent pixel: the picture of a step that has none."""
