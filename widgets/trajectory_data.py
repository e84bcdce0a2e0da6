"""The data side of the trajectory viewer: recorded episodes, the picture of each step and the per-step numbers.

:class:`TrajectoryData` needs no widget library: it loads episodes from files (bounded, allow-listed, see
:mod:`maze_lab.core.trajectory`), says how a step is pictured, keeps the PNG of recently shown steps, and gives the
series of the reward/KPI strip. :class:`~maze_lab.widgets.trajectory_viewer.TrajectoryViewer` is the view on top.

A step is pictured in the first way that works for its episode:

- ``"frames"``: the env's own picture recorded with the step (plain Gymnasium envs, whose renderer draws only the
  live env); shown as recorded, no drawing at all;
- ``"renderer"``: the env's renderer, rebuilt from the recording, draws the recorded MazeState and MazeAction
  (Cutting-2D); drawn when first shown, then cached;
- ``"numbers"``: neither exists: a plot of the recorded observations, actions and return with the step marked.
"""

from __future__ import annotations

import math
import sys
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from maze_lab.core.trajectory.files import SUFFIX, TrajectoryLimits, list_episodes, load_episode, read_episode_header
from maze_lab.core.trajectory.frames import encode_png
from maze_lab.core.trajectory.records import EpisodeRecord, StepRecord, event_view, rebuild_renderer
from maze_lab.core.trajectory.serialization import ClassAllowList

Source = EpisodeRecord | str | Path

_MAX_LINES = 8
_MAX_BACKGROUNDS = 16
"""Kept backgrounds of the redrawn figure (one per distinct axes limits, about 1.2 MB each at 72 dpi)."""
MAX_EXTRA_SERIES = 12
"""Per-step series beyond reward and return that the strip offers at most (info values, event counts)."""


def short_text(value: Any, precision: int = 4, threshold: int = 12, line_width: int = 72) -> str:
    """A short, readable text of a recorded or live value (numbers, arrays, mappings, sequences, objects): floats to
    ``precision`` significant digits, arrays of more than ``threshold`` values summarised by their ends, sequences
    cut after 12 items."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.{precision}g}"
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return short_text(value.item(), precision)
        return np.array2string(value, precision=precision, threshold=threshold, edgeitems=3,
                               max_line_width=line_width, suppress_small=True)
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={short_text(v, precision, threshold, line_width)}" for k, v in value.items())
    if isinstance(value, tuple | list):
        inner = ", ".join(short_text(v, precision, threshold, line_width) for v in value[:12])
        inner += ", …" if len(value) > 12 else ""
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    return str(value)

def flat_numbers(values: Any) -> tuple[list[str], np.ndarray] | None:
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


def _scalar(value: Any) -> float | None:
    """A finite-or-not float of a numeric scalar (bools count), None for anything else."""
    if isinstance(value, bool | np.bool_):
        return float(value)
    if isinstance(value, int | float | np.integer | np.floating):
        return float(value)
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        return float(value.item())
    return None


def _flat_info(info: Any, prefix: str = "info.", depth: int = 0) -> dict[str, float]:
    """Numeric scalars of an info dict by dotted name (one level of nesting)."""
    out: dict[str, float] = {}
    if not isinstance(info, dict):
        return out
    for k, v in info.items():
        if isinstance(v, dict) and depth == 0:
            out.update(_flat_info(v, f"{prefix}{k}.", 1))
            continue
        x = _scalar(v)
        if x is not None:
            out[f"{prefix}{k}"] = x
    return out


class TrajectoryData:
    """Recorded episodes for a viewer: loading, the picture of a step (cached) and the strip's series.

    :param source: an :class:`EpisodeRecord`, an episode file, a directory of episode files (e.g. a run's
        ``trajectories``), or a list of records/files.
    :param allowed_classes: classes (or dotted paths, module prefixes ending in ``.``) besides maze-lab's own
        that may be rebuilt from the files (MazeStates, MazeActions, the renderer).
    :param renderer: a renderer to draw with instead of the recorded one (takes precedence over frames).
    :param dpi: resolution of drawn pictures.
    :param cache_size: step pictures (PNG bytes) kept for scrubbing back and forth.
    :param limits: reading limits for the files (default :data:`~maze_lab.core.trajectory.files.DEFAULT_LIMITS`).
    :param reuse_layout: draw later steps of an episode with the subplot positions the renderer's layout engine
        found for its first drawn step (where the figure has the same size and axes grid), and let a renderer
        with a ``redraw`` method draw them into that step's figure in place; pass False for a renderer whose
        decorations change size from step to step.
    """

    def __init__(self, source: Source | Sequence[Source], allowed_classes: Iterable[str | type] | None = None,
                 renderer: Any = None, dpi: int = 72, cache_size: int = 256, limits: TrajectoryLimits | None = None,
                 reuse_layout: bool = True):
        self.allowed = ClassAllowList.of(allowed_classes)
        self.renderer_override = renderer
        self.dpi = dpi
        self.cache_size = cache_size
        self.limits = limits
        self.reuse_layout = reuse_layout
        self._layouts: dict[int, tuple[tuple, list[Any]]] = {}
        self._live: tuple[int, Any] | None = None
        """(episode, figure): the figure the renderer redraws the episode's next step into (see ``_draw``)."""
        self._backgrounds: OrderedDict[tuple, Any] = OrderedDict()
        """Pictures of that figure without its animated artists, by figure, size, dpi and background key."""
        self.sources: list[EpisodeRecord | Path] = self._collect(source)
        self._loaded: OrderedDict[int, EpisodeRecord] = OrderedDict()
        self._pngs: OrderedDict[tuple[int, int], bytes | None] = OrderedDict()
        self._renderers: dict[int, tuple[Any, str]] = {}
        self._numbers: dict[int, dict[str, Any] | None] = {}
        self._strips: dict[int, dict[str, Any]] = {}

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
                out.extend(TrajectoryData._collect(item))
            return out
        raise TypeError(f"a trajectory viewer needs an EpisodeRecord, an episode file, a directory or a non-empty "
                        f"list of those, got {type(source).__name__}")

    def __len__(self) -> int:
        return len(self.sources)

    def label(self, i: int) -> str:
        """A one-line description of episode ``i`` for a picker (read from the file's header only)."""
        src = self.sources[i]
        if isinstance(src, EpisodeRecord):
            n, ret, eid, when = src.n_steps, src.total_reward, src.episode_id, src.metadata.get("created", "")
        else:
            h = read_episode_header(src)
            n, ret, eid, when = h.get("n_steps", 0), h.get("total_reward", float("nan")), h["episode_id"], \
                h.get("created", "")
        when = f"{when} · " if when else ""
        return f"#{i} · {when}{n} steps · return {ret:.4g} · {str(eid)[:8]}"

    def check_index(self, i: int) -> None:
        """Raise IndexError naming the valid range if there is no episode ``i``."""
        if not 0 <= i < len(self.sources):
            n = len(self.sources)
            raise IndexError(f"episode {i} does not exist; there are {n} (0..{n - 1})")

    def load(self, i: int) -> EpisodeRecord:
        """Episode ``i`` (loaded on first use; a few are kept)."""
        self.check_index(i)
        if i in self._loaded:
            self._loaded.move_to_end(i)
            return self._loaded[i]
        src = self.sources[i]
        record = src if isinstance(src, EpisodeRecord) else load_episode(src, self.allowed, self.limits)
        self._loaded[i] = record
        while len(self._loaded) > 4:
            self._loaded.popitem(last=False)
        return record

    # ---- pictures --------------------------------------------------------------------------------------------
    def renderer(self, i: int) -> tuple[Any, str]:
        """``(renderer or None, why there is none)`` for episode ``i``."""
        if self.renderer_override is not None:
            return self.renderer_override, ""
        if i not in self._renderers:
            self._renderers[i] = rebuild_renderer(self.load(i).renderer, self.allowed)
        return self._renderers[i]

    def picture_kind(self, i: int) -> str:
        """How episode ``i``'s steps are pictured: ``"frames"``, ``"renderer"`` or ``"numbers"`` (see above)."""
        ep = self.load(i)
        if self.renderer_override is None and ep.frames is not None and len(ep.frames):
            return "frames"
        return "renderer" if self.renderer(i)[0] is not None else "numbers"

    def cached(self, i: int, step: int) -> bool:
        """Whether the picture of a step is at hand without drawing."""
        return (i, step) in self._pngs or self.picture_kind(i) == "frames"

    def png(self, i: int, step: int) -> bytes | None:
        """PNG bytes of step ``step`` of episode ``i``: the recorded frame, or drawn by the renderer (or the
        numbers plot) on first use and cached; None where the step has no picture."""
        key = (i, step)
        if key in self._pngs:
            self._pngs.move_to_end(key)
            return self._pngs[key]
        ep = self.load(i)
        if not 0 <= step < ep.n_steps:
            raise IndexError(f"step {step} does not exist in episode {i} ({ep.n_steps} steps)")
        kind = self.picture_kind(i)
        if kind == "frames":
            return ep.frames.png(step)  # the file's bytes, already PNG: not worth a cache slot
        png = self._draw(i, ep.steps[step]) if kind == "renderer" else self._numbers_png(i, step)
        self._pngs[key] = png
        while len(self._pngs) > self.cache_size:
            self._pngs.popitem(last=False)
        return png

    def drawable(self, i: int, rec: StepRecord) -> bool:
        """False where the recorded state could not be rebuilt (a plain dict of a refused class)."""
        return not (isinstance(rec.maze_state, dict) and self.load(i).refused_classes)

    def _draw(self, i: int, rec: StepRecord) -> bytes | None:
        if not self.drawable(i, rec):
            return None
        renderer, _ = self.renderer(i)
        events = [event_view(e) for e in rec.events]
        # with reuse_layout, a renderer that can update its figure in place draws every later step of the
        # episode into the figure of its first drawn step: no new figure, axes and ticks per step, and only the
        # step's own (animated) artists are drawn over a kept background (see _blit); Cutting-2D: half the time
        redraw = getattr(renderer, "redraw", None) if self.reuse_layout else None
        live = self._live[1] if self._live is not None and self._live[0] == i else None
        try:
            if live is not None and callable(redraw):
                fig = redraw(live, rec.maze_state, rec.maze_action, events=events)
                key_of = getattr(renderer, "background_key", None)
                background = (key_of(fig),) if callable(key_of) else (None,)
            else:
                fig = renderer.render(rec.maze_state, rec.maze_action, events=events)
                background = None
        except Exception:
            self._drop_live()  # it may be half drawn
            raise
        return self._savefig(fig, i, keep=callable(redraw), background=background)

    def _savefig(self, fig: Any, i: int | None = None, keep: bool = False,
                 background: tuple[Hashable | None] | None = None) -> bytes:
        """PNG bytes of a figure, drawn on an Agg canvas and encoded at a fast compression level.

        With ``reuse_layout``, the first figure drawn for episode ``i`` runs its layout engine (constrained or
        tight layout: about a third of the drawing time) and later figures of the same axes grid reuse the
        subplot positions it found.

        :param keep: keep the figure (its layout frozen) for the renderer to redraw the episode's next step into,
            instead of clearing it.
        :param background: for a figure from the renderer's ``redraw``: ``(its background_key,)``; its animated
            artists are drawn on top of a kept picture of the rest while that key stays the same (None: no kept
            picture, the rest is drawn each time).
        """
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        live = self._live is not None and self._live[1] is fig
        try:
            fig.set_dpi(self.dpi)
            key = saved = None
            if not live:  # a live figure has kept its positions since its first step
                key = _layout_key(fig)
                saved = self._layouts.get(i) if self.reuse_layout and i is not None else None
                if saved is not None and saved[0] == key:
                    fig.set_layout_engine("none")
                    for ax, pos in zip(fig.axes, saved[1], strict=True):
                        ax.set_position(pos)
            canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
            if background is None:
                canvas.draw()
            else:
                self._blit(fig, canvas, background[0])
            if not live and self.reuse_layout and i is not None and (saved is None or saved[0] != key):
                self._layouts[i] = (key, [ax.get_position(original=True) for ax in fig.axes])
            # a low compression level: the bytes go to the browser once, the encoding is paid on every step
            png = encode_png(np.asarray(canvas.buffer_rgba())[..., :3], level=1)
        except Exception:
            if live:
                self._drop_live()
            else:
                _discard(fig)
            raise
        if keep and i is not None:
            if not live:
                self._drop_live()
                fig.set_layout_engine("none")  # later steps keep the positions the engine found now
                self._live = (i, fig)
        elif live:
            self._drop_live()
        else:
            _discard(fig)
        return png

    def _blit(self, fig: Any, canvas: Any, key: Hashable | None) -> None:
        """Draw a redrawn figure: its background (the artists that are not animated) from the kept picture of
        the same key where there is one, else drawn (and kept); then its animated artists on top, in the order
        matplotlib draws them (axes by axes, by zorder, then the figure's own)."""
        full = (id(fig), tuple(np.round(fig.get_size_inches(), 3)), fig.dpi, key)
        region = self._backgrounds.get(full) if key is not None else None
        if region is None:
            canvas.draw()  # leaves the animated artists out
            if key is not None:
                self._backgrounds[full] = canvas.copy_from_bbox(fig.bbox)
                while len(self._backgrounds) > _MAX_BACKGROUNDS:
                    self._backgrounds.popitem(last=False)
        else:
            self._backgrounds.move_to_end(full)
            canvas.restore_region(region)
            for ax in fig.axes:  # what a full draw would do first: fit the box to the (equal) aspect
                ax.apply_aspect()
        for ax in fig.axes:
            for artist in sorted((a for a in ax.get_children() if a.get_animated() and a.get_visible()),
                                 key=lambda a: a.get_zorder()):
                fig.draw_artist(artist)
        for artist in sorted((a for a in fig.get_children() if a.get_animated() and a.get_visible()),
                             key=lambda a: a.get_zorder()):
            fig.draw_artist(artist)

    def close(self) -> None:
        """Free the figure kept for redrawing and its kept backgrounds (pictures and episodes stay)."""
        self._drop_live()

    def _drop_live(self) -> None:
        """Forget (and clear) the figure kept for redrawing, and its kept backgrounds."""
        if self._live is not None:
            _discard(self._live[1])
            self._live = None
        self._backgrounds.clear()

    # ---- the numbers plot (no renderer, no frames) ----------------------------------------------------------
    def numbers(self, i: int) -> dict[str, Any] | None:
        """Observation, action and return curves of episode ``i`` (first policy key), for envs without a
        picture; None where the observations are not a few numbers."""
        if i in self._numbers:
            return self._numbers[i]
        ep = self.load(i)
        series = None
        if ep.steps:
            key = ep.step_keys[0]
            xs, obs, act = [], [], []
            for step in ep.steps:
                sub = next((s for s in step.substeps if s.actor_id.step_key == key), None)
                if sub is not None:
                    xs.append(step.index)
                    obs.append(flat_numbers(sub.observation))
                    act.append(flat_numbers(sub.action))
            if xs and obs[0] is not None and all(o is not None and len(o[1]) == len(obs[0][1]) for o in obs):
                series = {"x": np.array(xs), "obs_labels": obs[0][0][:_MAX_LINES],
                          "obs": np.array([o[1][:_MAX_LINES] for o in obs]), "key": key,
                          "cum": ep.cumulative_rewards, "n_obs": len(obs[0][1])}
                if act[0] is not None and all(a is not None and len(a[1]) == len(act[0][1]) for a in act):
                    series["act_labels"] = act[0][0][:_MAX_LINES]
                    series["act"] = np.array([a[1][:_MAX_LINES] for a in act])
        self._numbers[i] = series
        return series

    def _numbers_png(self, i: int, step: int) -> bytes | None:
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        data = self.numbers(i)
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
        if "act" in data and np.all(np.mod(data["act"], 1) == 0):
            axes[1].yaxis.set_major_locator(MaxNLocator(integer=True))
        for ax in axes:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.axvline(step, color="#c0392b", lw=1.5, alpha=0.8)
            ax.grid(True, color="#eeeeee")
        fig.suptitle(f"Step {step}: recorded numbers (no picture of the env)", fontsize=12, fontweight="bold",
                     x=0.01, ha="left")
        return self._savefig(fig)

    # ---- the reward/KPI strip --------------------------------------------------------------------------------
    def strip(self, i: int) -> dict[str, Any]:
        """The per-step series of episode ``i``: ``{"x": step indices, "reward": ..., "return": ..., "extra":
        {name: values}}``. Extras are the rewards per policy key (structured envs), the numeric scalars of the
        steps' info dicts, the numeric attributes of events (the step's last value) and the count of
        each event without numbers; at most :data:`MAX_EXTRA_SERIES` of them, NaN
        where a step has no value."""
        if i in self._strips:
            return self._strips[i]
        ep = self.load(i)
        n = ep.n_steps
        extra: dict[str, np.ndarray] = {}

        def put(name: str, step: int, value: float, add: bool = False) -> None:
            if name not in extra:
                if len(extra) >= MAX_EXTRA_SERIES:
                    return
                extra[name] = np.full(n, 0.0 if add else np.nan)
            extra[name][step] = (extra[name][step] + value) if add else value

        keys = ep.step_keys
        for s, rec in enumerate(ep.steps):
            if len(keys) > 1:
                for sub in rec.substeps:
                    put(f"reward[{sub.actor_id.step_key}]", s, float(sub.reward), add=True)
        for s, rec in enumerate(ep.steps):
            for sub in rec.substeps:
                for name, value in _flat_info(sub.info).items():
                    put(name, s, value)
        for s, rec in enumerate(ep.steps):
            for e in rec.events:
                name = f"{e.get('topic', '')}.{e.get('event', '')}"
                attrs = {k: _scalar(v) for k, v in (e.get("attributes") or {}).items()}
                attrs = {k: v for k, v in attrs.items() if v is not None}
                if not attrs:  # an event without numbers: how often it fired in the step
                    put(f"{name} (count)", s, 1.0, add=True)
                for k, v in attrs.items():  # numbers of an event: the last value of the step
                    put(f"{name}.{k}", s, v)
        data = {"x": np.arange(n), "reward": ep.rewards, "return": ep.cumulative_rewards,
                "extra": {k: v for k, v in extra.items() if not np.all(np.isnan(v))}}
        self._strips[i] = data
        return data


def _discard(fig: Any) -> None:
    """Free a figure: close it in pyplot (where a renderer used it) and drop its artists."""
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close(fig)
    fig.clear()


def _layout_key(fig: Any) -> tuple:
    """What must match for two figures to share subplot positions: size, layout engine and the axes grid."""
    axes = []
    for ax in fig.axes:
        spec = ax.get_subplotspec() if hasattr(ax, "get_subplotspec") else None
        axes.append((type(ax).__name__, None if spec is None else spec.get_geometry()))
    engine = fig.get_layout_engine()
    return tuple(np.round(fig.get_size_inches(), 3)), type(engine).__name__, tuple(axes)


def finite_or_none(values: np.ndarray) -> list[float | None]:
    """Values as a JSON-friendly list (NaN and inf become None, drawn as gaps)."""
    return [float(v) if math.isfinite(v) else None for v in np.asarray(values, dtype=np.float64)]
