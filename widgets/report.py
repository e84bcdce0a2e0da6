"""A shareable report of one or more runs: one self-contained HTML file that opens offline, without a server.

``write_report(run_dirs, "report.html")`` (and ``maze-lab report RUN_DIR [RUN_DIR ...] -o report.html``) writes,
for each run, what the cockpit shows of it, drawn by the cockpit's own views and frozen at the moment of writing:
its status and progress, its curves (the charts the cockpit shows, in its layout and look), the action and
observation distributions of its last epoch, its model graphs (the drawings the run saved), its configuration as a
searchable table and a replayable recorded episode (a slider with previous / next / play buttons); given several
runs, the comparison comes first (their curves overlaid, each run named by the hyperparameters that differ, and the
table of final and best metrics). plotly.js is embedded once; every figure is a JSON block drawn by a few lines of
inline JavaScript.

Sizes stay bounded: a curve of more than :data:`MAX_POINTS` points is thinned (each stretch keeps its lowest and
highest value), an episode keeps at most ``max_frames`` pictures, the configuration and the drawings are capped, and
the report says where it left something out.

Nothing read from a run directory runs as code, in this process or in the page: the run is read with the widgets'
readers (bounded, no symlink leading out of the run, nothing instantiated from its configuration; trajectories
rebuild only allow-listed classes), every text taken from the run is HTML-escaped (also inside the figures, where
plotly would read tags), the JSON blocks are escaped so that no text can close their script element, the model
drawings are rebuilt from an allow-list of SVG elements and attributes (no scripts, no event handlers, no links),
and the episode's texts are set as text, never as HTML.
"""

from __future__ import annotations

import base64
import html
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MAX_POINTS = 2000
"""The most points a curve keeps in the report (a longer one is thinned, keeping each stretch's min and max)."""
MAX_FRAMES = 100
"""The most steps of an episode the report holds by default (a longer episode shows every k-th step)."""
MAX_FRAME_BYTES = 4 * 1024**2
"""The most bytes of pictures an episode adds to the report (fewer steps are kept where they are larger)."""
MAX_CONFIG_ROWS = 5000
"""The most configuration values the table holds."""
MAX_VALUE_CHARS = 2000
"""A configuration value longer than this is cut (with an ellipsis)."""
MAX_SVG_BYTES = 2 * 1024**2
"""The most bytes of model drawings one run adds to the report."""
MAX_DISTRIBUTION_KEYS = 8
"""The most action heads and observation keys whose distributions are drawn (each)."""

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COMPACT_ABOVE = 8 * 1024
"""A picture larger than this is stored with a palette of 256 colours where that makes it smaller."""


# ---- thinning curves -----------------------------------------------------------------------------------------------
def thin_indices(values: Any, max_points: int = MAX_POINTS) -> np.ndarray:
    """The indices of a series to keep so that at most ``max_points`` remain: the first and the last point, and in
    each of ``(max_points - 2) // 2`` equal stretches the point of its lowest and of its highest value (NaN counts
    as neither; a stretch of NaN keeps its first point, a gap). All indices where the series is short enough."""
    y = np.asarray(values, dtype=np.float64)
    n = len(y)
    if n <= max_points:
        return np.arange(n)
    buckets = max(1, (max_points - 2) // 2)
    size = -(-n // buckets)  # ceil
    padded = np.full(buckets * size, np.nan)
    padded[:n] = y
    rows = padded.reshape(buckets, size)
    nan = np.isnan(rows)
    lo = np.where(nan, np.inf, rows).argmin(axis=1)
    hi = np.where(nan, -np.inf, rows).argmax(axis=1)
    starts = np.arange(buckets) * size
    keep = np.concatenate([[0, n - 1], starts + lo, starts + hi])
    return np.unique(keep[keep < n])


def plotly_array(value: Any) -> np.ndarray:
    """An array of a figure's JSON as a numpy array: plotly's typed arrays (``{"dtype": "f8", "bdata": ...}``,
    what plotly writes numpy arrays as) decoded, lists as they are."""
    if isinstance(value, dict) and "bdata" in value:
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value.get("dtype", "f8")))
        shape = value.get("shape")
        if shape:
            arr = arr.reshape([int(d) for d in str(shape).split(",")] if isinstance(shape, str) else shape)
        return arr
    return np.asarray(value)


def _thin_trace(trace: dict[str, Any], max_points: int) -> bool:
    """Thin a scatter trace's x, y and customdata in place (a band, drawn forth along its upper edge and back along
    its lower one, thinned edge by edge); returns whether it was thinned."""
    if trace.get("type", "scatter") not in ("scatter", "scattergl") or trace.get("y") is None:
        return False
    y = plotly_array(trace["y"]).astype(np.float64)
    if y.ndim != 1 or len(y) <= max_points:
        return False
    if (trace.get("meta") or {}).get("role") == "band" and len(y) % 2 == 0:
        # the same epochs on both edges (the band stays a band, and reads back as its min and max statistics):
        # those of the upper edge's extremes and of the lower edge's, half the points each
        half = len(y) // 2
        upper, lower = y[:half], y[half:][::-1]
        forward = np.union1d(thin_indices(upper, max(4, max_points // 4)),
                             thin_indices(lower, max(4, max_points // 4)))
        idx = np.concatenate([forward, 2 * half - 1 - forward[::-1]])
    else:
        idx = thin_indices(y, max_points)
    for key in ("x", "y", "customdata"):
        value = trace.get(key)
        arr = None if value is None else plotly_array(value)
        if arr is not None and arr.ndim >= 1 and len(arr) == len(y):
            trace[key] = arr[idx]
    return True


# ---- texts of figures --------------------------------------------------------------------------------------------
def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _escape_figure_texts(fig: dict[str, Any]) -> None:
    """HTML-escape, in place, the texts of a figure that plotly reads as its pseudo-HTML (titles, trace names,
    annotations): a statistic's or a key's name from a run file shows as written, never as markup. Hover templates
    are left as the views made them (they escape what they take from a run)."""
    def title(obj: Any) -> None:
        if isinstance(obj, dict):
            t = obj.get("title")
            if isinstance(t, dict) and isinstance(t.get("text"), str):
                t["text"] = html.escape(t["text"], quote=False)
            elif isinstance(t, str):
                obj["title"] = {"text": html.escape(t, quote=False)}

    layout = fig.setdefault("layout", {})
    title(layout)
    title(layout.get("legend"))
    for key, value in layout.items():
        if re.fullmatch(r"[xy]axis\d*", key):
            title(value)
    for note in layout.get("annotations") or ():
        if isinstance(note, dict) and isinstance(note.get("text"), str):
            note["text"] = html.escape(note["text"], quote=False)
    for trace in fig.get("data") or ():
        for key in ("name", "legendgroup"):
            if isinstance(trace.get(key), str):
                trace[key] = html.escape(trace[key], quote=False)
        text = trace.get("text")
        if isinstance(text, str):
            trace["text"] = html.escape(text, quote=False)
        elif isinstance(text, list | tuple):
            trace["text"] = [html.escape(t, quote=False) if isinstance(t, str) else t for t in text]
        trace.pop("uid", None)


def _figure_dict(fig: Any) -> dict[str, Any]:
    """A plotly figure (FigureWidget, Figure or dict) as a plain dict of data and layout."""
    if isinstance(fig, dict):
        return {"data": list(fig.get("data") or []), "layout": dict(fig.get("layout") or {})}
    out = fig.to_plotly_json()
    return {"data": list(out.get("data") or []), "layout": dict(out.get("layout") or {})}


def _json_for_script(value: Any) -> str:
    """JSON for a ``<script type="application/json">`` block: numpy arrays as plotly's typed arrays, and ``<``,
    ``>`` and ``&`` as escapes, so that no text can end the block or open a comment."""
    from plotly.io.json import to_json_plotly

    text = to_json_plotly(value)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e") \
        .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


# ---- model drawings ------------------------------------------------------------------------------------------------
_SVG_ELEMENTS = {"svg", "g", "defs", "marker", "title", "desc", "rect", "circle", "ellipse", "line", "polyline",
                 "polygon", "path", "text", "tspan", "clipPath", "linearGradient", "radialGradient", "stop"}
_SVG_ATTRIBUTES = {
    "x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "rx", "ry", "fx", "fy", "dx", "dy", "width", "height", "d",
    "points", "viewBox", "preserveAspectRatio", "transform", "refX", "refY", "markerWidth", "markerHeight",
    "markerUnits", "orient", "rotate", "textLength", "lengthAdjust", "offset", "gradientUnits", "gradientTransform",
    "clipPathUnits", "fill", "fill-opacity", "fill-rule", "stroke", "stroke-width", "stroke-opacity",
    "stroke-dasharray", "stroke-dashoffset", "stroke-linecap", "stroke-linejoin", "stroke-miterlimit", "opacity",
    "font-family", "font-size", "font-weight", "font-style", "text-anchor", "dominant-baseline",
    "alignment-baseline", "baseline-shift", "letter-spacing", "visibility", "display", "stop-color", "stop-opacity",
    "marker-start", "marker-mid", "marker-end", "clip-path", "shape-rendering", "text-rendering", "vector-effect",
    "paint-order", "id"}
_SVG_NS = "{http://www.w3.org/2000/svg}"
_URL_REF = re.compile(r"url\(\s*#([\w.-]+)\s*\)")
_ID = re.compile(r"[A-Za-z_][\w.-]*")


def safe_svg(text: str, prefix: str) -> str:
    """An SVG document rebuilt from an allow-list of drawing elements and attributes, as markup to put inline into
    a page: no script, style, link, image, foreign content or event handler survives, a value may refer only to an
    element of the same drawing (``url(#id)``), and every id is prefixed with ``prefix`` so that several drawings on
    one page keep their own markers. Raises ValueError for a document that is not SVG (or has a DTD)."""
    from defusedxml import ElementTree

    root = ElementTree.fromstring(text, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    if _local(root.tag) != "svg":
        raise ValueError(f"not an SVG drawing (its root element is {_local(root.tag)!r})")
    out: list[str] = []
    _svg_element(root, prefix, out, root=True)
    return "".join(out)


def _local(tag: Any) -> str:
    tag = str(tag)
    return tag[len(_SVG_NS):] if tag.startswith(_SVG_NS) else tag


def _svg_value(name: str, value: str, prefix: str) -> str | None:
    """An attribute's value as kept (None: the attribute is dropped)."""
    lowered = value.lower()
    if any(bad in lowered for bad in ("javascript:", "expression", "@import", "\\")):
        return None
    if name == "id":
        return f"{prefix}-{value}" if _ID.fullmatch(value) else None
    if "url(" in lowered:
        if _URL_REF.sub("", value).lower().count("url(") or "url(" not in value:
            return None  # a url() that is not a reference into the drawing
        return _URL_REF.sub(lambda m: f"url(#{prefix}-{m.group(1)})", value)
    return value


def _svg_element(el: Any, prefix: str, out: list[str], root: bool = False) -> None:
    tag = _local(el.tag)
    if tag not in _SVG_ELEMENTS or (tag == "svg" and not root):
        if el.tail:
            out.append(html.escape(el.tail, quote=False))
        return
    attrs = []
    for name, value in el.attrib.items():
        if name not in _SVG_ATTRIBUTES:  # also namespaced ones ({...}href) and every on* handler
            continue
        kept = _svg_value(name, str(value), prefix)
        if kept is not None:
            attrs.append(f' {name}="{html.escape(kept, quote=True)}"')
    if root:
        attrs.insert(0, ' xmlns="http://www.w3.org/2000/svg"')
        attrs.append(' style="max-width:100%;height:auto"')
    out.append(f"<{tag}{''.join(attrs)}>")
    if el.text:
        out.append(html.escape(el.text, quote=False))
    for child in el:
        _svg_element(child, prefix, out)
    out.append(f"</{tag}>")
    if el.tail and not root:
        out.append(html.escape(el.tail, quote=False))


def _run_drawings(run_dir: Path, prefix: str) -> tuple[list[tuple[str, str]], list[str]]:
    """``[(name, safe inline svg)]`` of the run's ``model_graphs/*.svg`` (policies first) and a note per drawing
    not included. Read as the model-graph view reads them: regular files inside the run, bounded."""
    from maze_lab.core.utils.safe_files import open_regular, read_at_most
    from maze_lab.run.run_dir import RunDirectory
    from maze_lab.widgets.model_graph import MAX_GRAPH_BYTES, MAX_GRAPH_FILES, _natural

    graph_dir = RunDirectory(run_dir).graph_dir
    drawings: list[tuple[str, str]] = []
    notes: list[str] = []
    if not graph_dir.is_dir():
        return drawings, notes
    files = sorted((p for p in graph_dir.glob("*.svg") if p.is_file() and not p.is_symlink()),
                   key=lambda p: (not p.stem.startswith("policy"), _natural(p.stem)))
    budget = MAX_SVG_BYTES
    for k, path in enumerate(files[:MAX_GRAPH_FILES]):
        try:
            with open_regular(path, run_dir, what="model graph") as f:
                data = read_at_most(f, min(MAX_GRAPH_BYTES, budget) + 1)
            if len(data) > min(MAX_GRAPH_BYTES, budget):
                notes.append(f"{path.name}: left out (the report holds at most {MAX_SVG_BYTES:,} bytes of drawings "
                             f"per run)")
                continue
            svg = safe_svg(data.decode("utf-8"), f"{prefix}-g{k}")
            budget -= len(svg)
            drawings.append((path.stem, svg))
        except Exception as err:  # noqa: BLE001 - a damaged drawing is named, the others are shown
            notes.append(f"{path.name}: {type(err).__name__}: {err}")
    if len(files) > MAX_GRAPH_FILES:
        notes.append(f"{len(files) - MAX_GRAPH_FILES} more drawings not read")
    return drawings, notes


# ---- the page ------------------------------------------------------------------------------------------------------
@dataclass
class _Page:
    """What the report is made of, in order: HTML parts and the figures they refer to."""

    parts: list[str] = field(default_factory=list)
    figures: int = 0
    thinned: bool = False
    max_points: int = MAX_POINTS

    def figure(self, fig: Any, kind: str, key: str = "", thin: bool = True) -> str:
        """The markup of one plotly figure (a div and its JSON block)."""
        spec = _figure_dict(fig)
        if thin:
            for trace in spec["data"]:
                self.thinned |= _thin_trace(trace, self.max_points)
        _escape_figure_texts(spec)
        self.figures += 1
        target = f"maze-lab-fig-{self.figures}"
        height = spec["layout"].get("height")
        style = f" style='min-height:{int(height)}px'" if isinstance(height, int | float) else ""
        return (f"<div class='maze-lab-plot' id='{target}'{style}></div>"
                f"<script type='application/json' class='maze-lab-figure' data-target='{target}' "
                f"data-kind='{_esc(kind)}' data-key='{_esc(key)}'>{_json_for_script(spec)}</script>")


def _guarded(what: str, make: Any) -> str:
    """The markup ``make()`` returns, or a line saying why ``what`` could not be included."""
    try:
        return make()
    except Exception as err:  # noqa: BLE001 - one part that cannot be drawn does not lose the report
        return (f"<div class='maze-lab-problem'>{_esc(what)} could not be included: "
                f"{_esc(type(err).__name__)}: {_esc(' '.join(str(err).split())[:500])}</div>")


def _note(text: str) -> str:
    return f"<div class='maze-lab-note'>{text}</div>"


def _curves_html(page: _Page, dash: Any, x_axis: str) -> str:
    from maze_lab.widgets.dashboard import X_AXES

    figures = dash.figures()
    if not figures:
        return _note("no statistics: the run has not finished an epoch")
    parts = []
    for topic in dict.fromkeys(dash.charts[key].topic for key in figures):
        grid = "".join(page.figure(fig, "curve", key) for key, fig in figures.items()
                       if dash.charts[key].topic == topic)
        parts.append(f"<h4>{_esc(topic)}</h4><div class='maze-lab-grid'>{grid}</div>")
    hidden = len(dash.charts) - len(figures)
    more = (f" {hidden} more statistics are recorded (<code>write_report(..., charts='all')</code>, "
            f"<code>maze-lab report --all-charts</code>)." if hidden else "")
    return _note(f"{len(figures)} of {len(dash.charts)} statistics, over {_esc(X_AXES[x_axis])}, as the cockpit "
                 f"shows them first.{more}") + "".join(parts)


def _distributions_html(page: _Page, source: Any) -> str:
    from maze_lab.widgets.distributions import DistributionsView

    view = DistributionsView(source)
    try:
        epochs = view.data.epochs()
        if not epochs:
            return _note("no action or observation samples in this run (the monitoring wrapper records them)")
        if view.error:
            raise RuntimeError(view.error)
        parts: list[str] = []
        heads = view.action_heads()
        for label in heads[:MAX_DISTRIBUTION_KEYS]:
            if view.action_select.value != label:
                view.action_select.value = label
            parts.append(page.figure(view.action_fig, "actions", label, thin=False))
        for label in view.observation_keys()[:MAX_DISTRIBUTION_KEYS]:
            if view.obs_select.value != label:
                view.obs_select.value = label
            figs = page.figure(view.obs_fig, "observations", label, thin=False)
            if view.summary_box.layout.display != "none":
                figs += page.figure(view.summary_fig, "observation-summary", label, thin=False)
            parts.append(f"<div>{figs}</div>")
        if view.error:
            raise RuntimeError(view.error)
        left = [f"{n - MAX_DISTRIBUTION_KEYS} more {what}" for what, n in
                (("action heads", len(heads)), ("observation keys", len(view.observation_keys())))
                if n > MAX_DISTRIBUTION_KEYS]
        more = f" ({', '.join(left)} not drawn)" if left else ""
        return (_note(f"epoch {view.epoch_slider.value} (the last with samples), {_esc(view.prefix)} samples{more}")
                + f"<div class='maze-lab-grid wide'>{''.join(parts)}</div>")
    finally:
        view.close()


def _model_html(run_dir: Path, prefix: str) -> str:
    drawings, notes = _run_drawings(run_dir, prefix)
    body = "".join(f"<figure class='maze-lab-graph' data-graph='{_esc(name)}'>{svg}"
                   f"<figcaption>{_esc(name)}</figcaption></figure>" for name, svg in drawings)
    problems = "".join(f"<div class='maze-lab-problem'>{_esc(n)}</div>" for n in notes)
    if not drawings:
        return problems + _note("no model drawings in this run (<code>model_graphs/</code> is written when the "
                                "run's model is built)")
    return problems + f"<div class='maze-lab-graphs'>{body}</div>"


def _config_html(source: Any, prefix: str) -> str:
    from maze_lab.widgets.run_details import ConfigView

    view = ConfigView(source)
    try:
        view.update(force=True)
        rows = view.rows
    finally:
        view.close()
    if not rows:
        return _note("the run has not written its configuration")
    shown = rows[:MAX_CONFIG_ROWS]
    body = "".join(
        f"<tr><td>{_esc(k)}</td><td>{_esc(v if len(v) <= MAX_VALUE_CHARS else v[:MAX_VALUE_CHARS - 1] + '…')}</td>"
        f"</tr>" for k, v in shown)
    cut = f" (the first {MAX_CONFIG_ROWS:,} of {len(rows):,})" if len(rows) > MAX_CONFIG_ROWS else ""
    return (f"<div class='maze-lab-config' id='{prefix}-config-table'>"
            f"<input type='search' class='maze-lab-config-search' placeholder='search keys and values, e.g. lr seed "
            f"env.name' aria-label='search the configuration'> <span class='maze-lab-config-count'>{len(shown)} "
            f"values{cut}</span><div class='maze-lab-config-scroll'><table><thead><tr><th>key</th><th>value</th>"
            f"</tr></thead><tbody>{body}</tbody></table></div></div>")


def _fmt(value: Any) -> str:
    from maze_lab.widgets.trajectory_data import short_text as fmt

    return fmt(value)


def _episode_html(page: _Page, run_dir: Path, prefix: str, max_frames: int, allowed_classes: Any) -> str:
    from maze_lab.run.runs import load_run
    from maze_lab.widgets.trajectory_data import TrajectoryData
    from maze_lab.widgets.trajectory_viewer import strip_figure

    files = load_run(run_dir).trajectories()  # checked: no symlink leading out of the run
    if not files:
        return _note("no recorded episodes in this run: record some with <code>maze-lab rollout RUN_DIR</code> or "
                     "<code>RunContext.rollout()</code>, then write the report again")
    data = TrajectoryData(files[-1], allowed_classes)
    try:
        ep = data.load(0)
        n = ep.n_steps
        if n == 0:
            return _note("the newest recorded episode has no steps")
        kind = data.picture_kind(0)
        every = max(1, -(-n // max(1, max_frames)))
        indices = list(range(0, n, every))
        notes: list[str] = []
        steps: list[dict[str, Any]] = []
        spent = 0
        ret = ep.cumulative_rewards
        for step in indices:
            rec = ep.steps[step]
            picture = None
            if kind in ("frames", "renderer"):
                try:
                    png = data.png(0, step)
                except Exception as err:  # noqa: BLE001 - a step without a picture; the others are shown
                    png = None
                    if not notes or "could not be drawn" not in notes[-1]:
                        notes.append(f"a step could not be drawn: {_esc(type(err).__name__)}: {_esc(err)}")
                if png is not None and png.startswith(_PNG_SIGNATURE):
                    png = _compact_png(png)
                    if spent + len(png) > MAX_FRAME_BYTES:
                        notes.append(f"pictures stop at step {step}: the report holds at most "
                                     f"{MAX_FRAME_BYTES // 1024**2} MB of pictures per episode")
                        break
                    spent += len(png)
                    picture = "data:image/png;base64," + base64.b64encode(png).decode()
            flags = " (terminated)" if rec.terminated else " (truncated)" if rec.truncated else ""
            actions = []
            for sub in rec.substeps:
                act = ", ".join(f"{k}={_fmt(v)}" for k, v in sub.action.items()) if isinstance(sub.action, dict) \
                    else _fmt(sub.action)
                actions.append(f"{sub.actor_id.step_key}: {act}")
            events = ", ".join(f"{e.get('topic', '')}.{e.get('event', '')}" for e in rec.events[:6])
            events += f" (+{len(rec.events) - 6})" if len(rec.events) > 6 else ""
            steps.append({"step": step, "picture": picture, "return": float(ret[step]),
                          "title": f"step {step} / {n - 1}{flags}", "reward": _fmt(rec.reward),
                          "cumulative": _fmt(float(ret[step])), "actions": " · ".join(actions) or "–",
                          "events": events or "none"})
        if every > 1:
            notes.insert(0, f"{len(steps)} of the episode's {n} steps (every {every}th; the report keeps at most "
                            f"{max_frames} steps of an episode: <code>max_frames</code>, "
                            f"<code>maze-lab report --max-frames</code>)")
        if kind == "numbers":
            _, why = data.renderer(0)
            notes.append(f"no picture of the env ({_esc(why)}, and no frames were recorded): the recorded numbers "
                         f"are drawn instead")
        if ep.frames is not None and ep.frames.error:
            notes.append(f"recording the env's frames failed: {_esc(ep.frames.error)}")
        for path, reason in ep.refused_classes.items():
            notes.append(f"class <code>{_esc(path)}</code> was not rebuilt: {_esc(reason)}")
        if not ep.finished:
            notes.append("the episode was cut off (reset or closed before it ended)")
        figures = page.figure(strip_figure(data.strip(0), 0), "episode-strip")
        if kind == "numbers":
            numbers = _numbers_figure(data.numbers(0))
            if numbers is not None:
                figures = page.figure(numbers, "episode-numbers") + figures
        env = ep.metadata.get("gym_env_id") or ep.metadata.get("env") or ""
        head = (f"episode <code>{_esc(str(ep.episode_id)[:8])}</code>{' · ' + _esc(env) if env else ''} · {n} steps "
                f"· return {_esc(_fmt(ep.total_reward))}"
                + (f" · recorded {_esc(ep.metadata['created'])}" if ep.metadata.get("created") else "")
                + (f" · the newest of {len(files)} recorded episodes" if len(files) > 1 else ""))
        last = len(steps) - 1
        controls = (f"<div class='maze-lab-episode-controls'><button type='button' class='maze-lab-prev' "
                    f"title='previous step'>◀ prev</button><input type='range' class='maze-lab-slider' min='0' "
                    f"max='{last}' value='0' step='1' aria-label='step'><button type='button' class='maze-lab-next' "
                    f"title='next step'>next ▶</button><button type='button' class='maze-lab-play'>▶ play</button>"
                    f"<span class='maze-lab-step-title'></span></div>")
        info = ("<table class='maze-lab-step-info'><tr><th>reward</th><td class='maze-lab-step-reward'></td></tr>"
                "<tr><th>return</th><td class='maze-lab-step-return'></td></tr><tr><th>actions</th>"
                "<td class='maze-lab-step-actions'></td></tr><tr><th>events</th><td class='maze-lab-step-events'>"
                "</td></tr></table>")
        picture = "<img class='maze-lab-frame' alt='the env at this step'>" if kind != "numbers" else ""
        return (f"<div class='maze-lab-episode' id='{prefix}-episode-player' data-kind='{kind}' "
                f"data-steps='{len(steps)}'>"
                f"<div class='maze-lab-episode-head'>{head}</div>{''.join(_note(t) for t in notes)}{controls}"
                f"<div class='maze-lab-episode-body'>{picture}{info}</div>{figures}"
                f"<script type='application/json' class='maze-lab-episode-steps'>{_json_for_script(steps)}</script>"
                f"</div>")
    finally:
        data.close()


def _compact_png(png: bytes) -> bytes:
    """The picture with a palette of 256 colours where that is smaller (drawings and rendered envs are a few flat
    colours: a third of the bytes, no visible change); the picture as it was where it is small already, where the
    palette does not help, or where it cannot be read."""
    if len(png) <= _COMPACT_ABOVE:
        return png
    try:
        import io

        from PIL import Image

        with Image.open(io.BytesIO(png)) as image:
            if image.mode not in ("RGB", "RGBA"):
                return png
            small = image.quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
            out = io.BytesIO()
            small.save(out, "PNG", compress_level=9)
    except Exception:  # noqa: BLE001 - the recorded picture is shown as it is
        return png
    data = out.getvalue()
    return data if len(data) < len(png) else png


def _numbers_figure(numbers: dict[str, Any] | None) -> Any:
    """The recorded observations, actions and return of an episode without pictures (first policy key), the step
    marked by ``layout.shapes[0]``."""
    if numbers is None:
        return None
    from plotly.subplots import make_subplots

    rows = 3 if "act" in numbers else 2
    titles = [f"observation, policy key {numbers['key']}"] + (["action"] if "act" in numbers else []) + \
        ["cumulative reward"]
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.08, subplot_titles=titles)
    x = numbers["x"]
    for j, label in enumerate(numbers["obs_labels"]):
        fig.add_scatter(x=x, y=numbers["obs"][:, j], mode="lines", name=str(label), row=1, col=1)
    if "act" in numbers:
        for j, label in enumerate(numbers["act_labels"]):
            fig.add_scatter(x=x, y=numbers["act"][:, j], mode="lines", line={"shape": "hv"}, name=str(label),
                            row=2, col=1)
    fig.add_scatter(x=np.arange(len(numbers["cum"])), y=numbers["cum"], mode="lines", name="return",
                    line={"color": "#1e8449"}, row=rows, col=1)
    fig.add_shape(type="line", x0=0, x1=0, xref="x", y0=0, y1=1, yref="paper",
                  line={"color": "#c0392b", "width": 2, "dash": "dot"})
    fig.update_layout(height=120 + 150 * rows, template="plotly_white", margin={"l": 50, "r": 20, "t": 40, "b": 36},
                      legend={"font": {"size": 11}})
    fig.update_xaxes(title_text="step", row=rows, col=1)
    return fig


def _comparison_html(page: _Page, sources: list[Any], statistics: Iterable[str] | None) -> str:
    from maze_lab.widgets.comparison import RunComparison, _table_html

    cmp = RunComparison(sources, statistics=statistics)
    try:
        figures = [page.figure(cmp._figures[stat], "comparison", stat)  # noqa: SLF001 - the view's own drawing
                   for stat in cmp.selected if stat in cmp._figures]  # noqa: SLF001
        params = cmp.differing_params()
        named = (f"each run named by the hyperparameters that differ ({_esc(', '.join(params[:4]))}"
                 f"{', …' if len(params) > 4 else ''})" if params else "the runs' settings do not differ")
        note = _note(f"{len(sources)} runs, {named}.")
        curves = (f"<div class='maze-lab-grid'>{''.join(figures)}</div>" if figures
                  else _note("the runs have no reward statistics in common"))
        return note + curves + _table_html(cmp.table())
    finally:
        cmp.close()


def _run_section(page: _Page, index: int, run_dir: Path, charts: Any, x_axis: str, max_frames: int,
                 allowed_classes: Any, several: bool) -> tuple[str, Any]:
    """The section of one run and its RunSource (the comparison reads the statistics it took in)."""
    from maze_lab.widgets.dashboard import TrainingDashboard

    prefix = f"run{index}"
    dash = TrainingDashboard(run_dir, tabs=())
    try:
        dash.x_axis.value = x_axis
        if charts == "all":
            dash.show(dash.charts)
        elif charts != "default":
            dash.show(list(charts))
        reason = dash.reason_html.value if dash.reason_html.layout.display != "none" else ""
        error = dash.error_html.value if dash.error_html.layout.display != "none" else ""
        header = (f"<div class='maze-lab-run-header'>{dash.status_html.value} {dash.progress_html.value}</div>"
                  f"{reason}{error}")
        curves = _guarded("the curves", lambda: _curves_html(page, dash, x_axis))
        source = dash.source
    finally:
        dash.close()
    subsections = [
        ("curves", "Curves", curves),
        ("distributions", "Distributions of the last epoch", _guarded("the distributions",
                                                                      lambda: _distributions_html(page, source))),
        ("model", "Model", _guarded("the model graph", lambda: _model_html(run_dir, prefix))),
        ("config", "Configuration", _guarded("the configuration", lambda: _config_html(source, prefix))),
        ("episode", "A recorded episode", _guarded("the episode", lambda: _episode_html(
            page, run_dir, prefix, max_frames, allowed_classes))),
    ]
    body = "".join(f"<section id='{prefix}-{key}'><h3>{name}</h3>{content}</section>"
                   for key, name, content in subsections)
    links = " · ".join(f"<a href='#{prefix}-{key}'>{name}</a>" for key, name, _ in subsections)
    heading = f"<h2>Run {index + 1}: <code>{_esc(source.name)}</code></h2>" if several else ""
    return (f"<section class='maze-lab-run' id='{prefix}'>{heading}{header}<nav>{links}</nav>{body}</section>"), \
        source


def write_report(run_dirs: str | Path | Any | Sequence[str | Path | Any], path: str | Path, *,
                 title: str | None = None, charts: str | Iterable[str] = "default", x_axis: str = "env_steps",
                 max_frames: int = MAX_FRAMES, max_points: int = MAX_POINTS,
                 comparison_statistics: Iterable[str] | None = None,
                 allowed_classes: Iterable[str | type] | None = None) -> Path:
    """Write one self-contained HTML report of one or more runs to ``path`` (opens offline, no server); returns
    the path.

    Per run: status and progress, the curves the cockpit shows, the distributions of the last epoch, the model
    graphs, the configuration (searchable) and the newest recorded episode (replayable); given several runs, their
    comparison first.

    :param run_dirs: a run directory, or several (a RunContext, RunHandle or LoadedRun stands for its directory).
    :param charts: ``"default"`` (what the cockpit shows first), ``"all"``, or chart keys as the cockpit names
        them (``TrainingDashboard.charts``).
    :param x_axis: what the curves are drawn over: ``env_steps``, ``wall_time`` or ``epoch``.
    :param max_frames: the most steps of the episode the report holds (a longer episode shows every k-th step).
    :param max_points: the most points of a curve (a longer one is thinned, keeping each stretch's min and max).
    :param comparison_statistics: with several runs, the statistics overlaid (``prefix/Topic/event/name``; default
        the eval and train reward means).
    :param allowed_classes: classes (or dotted paths, module prefixes ending in ``.``) besides maze-lab's own that
        may be rebuilt from the recorded episode (its env's renderer, MazeStates).
    """
    from maze_lab import __version__
    from maze_lab.run.run_dir import RunDirectory
    from maze_lab.widgets.dashboard import X_AXES

    items = [run_dirs] if isinstance(run_dirs, str | Path) or not isinstance(run_dirs, Sequence) else list(run_dirs)
    if not items:
        raise ValueError("write_report needs at least one run directory")
    if x_axis not in X_AXES:
        raise ValueError(f"x_axis={x_axis!r}; one of {list(X_AXES)}")
    if max_frames < 1:
        raise ValueError(f"max_frames={max_frames}; at least 1")
    dirs = [RunDirectory.open(_run_dir_of(item)).path for item in items]  # refused: not a run directory
    path = Path(path)
    page = _Page(max_points=max(4, int(max_points)))
    several = len(dirs) > 1
    sections, sources = [], []
    for k, run_dir in enumerate(dirs):
        section, source = _run_section(page, k, run_dir, charts, x_axis, int(max_frames), allowed_classes, several)
        sections.append(section)
        sources.append(source)
    names = [s.name for s in sources]
    heading = title or (f"maze-lab report: {names[0]}" if not several else f"maze-lab report: {len(dirs)} runs")
    comparison = ""
    if several:
        comparison = ("<section class='maze-lab-comparison' id='comparison'><h2>Comparison</h2>"
                      + _guarded("the comparison", lambda: _comparison_html(page, sources, comparison_statistics))
                      + "</section>")
    toc = ""
    if several:
        toc = "<nav class='maze-lab-toc'>" + " · ".join(
            ["<a href='#comparison'>comparison</a>"]
            + [f"<a href='#run{k}'><code>{_esc(n)}</code></a>" for k, n in enumerate(names)]) + "</nav>"
    thinned = _note(f"Curves of more than {page.max_points:,} points are thinned to at most {page.max_points:,} per "
                    f"trace, keeping the lowest and the highest value of every stretch.") if page.thinned else ""
    written = time.strftime("%Y-%m-%d %H:%M:%S")
    document = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        # no request leaves the page: scripts and styles are inline, pictures are data URIs
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; script-src 'unsafe-inline'; "
        "style-src 'unsafe-inline'; img-src data: blob:; font-src data:\">"
        f"<title>{_esc(heading)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>{_esc(heading)}</h1><div class='maze-lab-meta'>written {_esc(written)} by maze-lab "
        f"{_esc(__version__)} · {len(dirs)} run{'s' if several else ''}: "
        + ", ".join(f"<code>{_esc(d)}</code>" for d in dirs) + f"</div>{toc}</header>{thinned}{comparison}"
        + "".join(sections)
        + f"<footer>A maze-lab report: one file, no server; plotly.js is embedded. Written {_esc(written)}.</footer>"
        + f"<script>{_plotly_js()}</script><script>{_JS}</script></body></html>")
    from maze_lab.core.utils.atomic import write_atomic

    write_atomic(path, document.encode("utf-8"))
    return path


def _run_dir_of(item: Any) -> Path:
    if isinstance(item, str | Path):
        return Path(item).expanduser()
    from maze_lab.widgets.sources import RunSource

    run_dir = RunSource(item).run_dir
    if run_dir is None:
        raise ValueError(f"a report needs run directories; {type(item).__name__} has none (statistics alone)")
    return run_dir


_PLOTLY_JS: str | None = None


def _plotly_js() -> str:
    """plotly.js as plotly ships it for offline pages (read once per process)."""
    global _PLOTLY_JS
    if _PLOTLY_JS is None:
        from plotly.offline import get_plotlyjs

        _PLOTLY_JS = get_plotlyjs()
    return _PLOTLY_JS


_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;color:#1f2328;margin:0 auto;padding:12px 24px 40px;
max-width:1500px;font-size:14px;line-height:1.45}
h1{font-size:22px;margin:6px 0 2px}h2{font-size:18px;margin:28px 0 6px;padding-top:8px;border-top:2px solid #d0d7de}
h3{font-size:15px;margin:18px 0 4px}h4{font-size:13px;margin:10px 0 0;color:#57606a}
code{font-size:12.5px}h1 code,h2 code{font-size:inherit}a{color:#0969da}nav{margin:4px 0;font-size:13px}
.maze-lab-meta{color:#57606a;font-size:12.5px}
.maze-lab-note{color:#57606a;font-size:12.5px;margin:2px 0 6px}
.maze-lab-problem{border-left:4px solid #cf222e;background:#ffebe9;padding:3px 8px;margin:4px 0;font-size:13px}
.maze-lab-run-header{margin:4px 0}
.maze-lab-grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(440px,1fr));gap:4px 8px}
.maze-lab-grid.wide{grid-template-columns:repeat(auto-fill,minmax(560px,1fr))}
.maze-lab-plot{min-width:0}
.maze-lab-graphs{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
.maze-lab-graph{margin:0;border:1px solid #d0d7de;border-radius:6px;padding:4px;max-width:100%;overflow:auto}
.maze-lab-graph figcaption{font-size:12px;color:#57606a;text-align:center}
.maze-lab-config-search{width:360px;padding:3px 6px}.maze-lab-config-count{color:#57606a;font-size:12.5px}
.maze-lab-config-scroll{max-height:420px;overflow:auto;border:1px solid #d0d7de;margin-top:4px}
.maze-lab-config table{border-collapse:collapse;font-family:ui-monospace,monospace;font-size:12px;width:100%}
.maze-lab-config th{position:sticky;top:0;background:#f6f8fa;text-align:left;padding:2px 10px}
.maze-lab-config td{padding:1px 10px;border-bottom:1px solid #f0f2f4;vertical-align:top;word-break:break-word}
.maze-lab-config td:first-child{white-space:nowrap}
.maze-lab-episode-controls{display:flex;align-items:center;gap:8px;margin:6px 0}
.maze-lab-episode-controls input[type=range]{width:420px}
.maze-lab-step-title{font-weight:600}
.maze-lab-episode-body{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
.maze-lab-frame{max-width:min(100%,640px);border:1px solid #d0d7de}
.maze-lab-step-info th{text-align:left;padding:1px 12px 1px 0;vertical-align:top;color:#57606a;font-weight:600}
.maze-lab-step-info td{font-family:ui-monospace,monospace;font-size:12.5px;max-width:520px;word-break:break-word}
header{margin-bottom:10px}
footer{margin-top:30px;color:#57606a;font-size:12px}
"""

_JS = r"""
(function () {
  "use strict";
  var config = {displaylogo: false, responsive: true};
  var plots = {};
  document.querySelectorAll("script.maze-lab-figure").forEach(function (block) {
    var div = document.getElementById(block.dataset.target);
    try {
      var spec = JSON.parse(block.textContent);
      Plotly.newPlot(div, spec.data, spec.layout, config);
      plots[block.dataset.target] = div;
    } catch (err) {
      div.textContent = "this figure could not be drawn: " + err;
    }
  });
  document.querySelectorAll(".maze-lab-config").forEach(function (box) {
    var input = box.querySelector("input"), count = box.querySelector(".maze-lab-config-count");
    var rows = Array.prototype.slice.call(box.querySelectorAll("tbody tr"));
    var texts = rows.map(function (r) { return r.textContent.toLowerCase(); });
    var total = count.textContent;
    input.addEventListener("input", function () {
      var words = input.value.toLowerCase().split(/\s+/).filter(Boolean), shown = 0;
      rows.forEach(function (row, i) {
        var ok = words.every(function (w) { return texts[i].indexOf(w) >= 0; });
        row.style.display = ok ? "" : "none";
        shown += ok ? 1 : 0;
      });
      count.textContent = words.length ? shown + " of " + rows.length + " values" : total;
    });
  });
  document.querySelectorAll(".maze-lab-episode").forEach(function (box) {
    var steps = JSON.parse(box.querySelector("script.maze-lab-episode-steps").textContent);
    var slider = box.querySelector(".maze-lab-slider"), img = box.querySelector(".maze-lab-frame");
    var play = box.querySelector(".maze-lab-play"), timer = null;
    var charts = Array.prototype.slice.call(box.querySelectorAll(".maze-lab-plot"));
    function text(cls, value) { box.querySelector(cls).textContent = value; }
    function show(i) {
      i = Math.max(0, Math.min(steps.length - 1, i));
      var s = steps[i];
      slider.value = String(i);
      box.dataset.current = String(s.step);
      if (img) {
        if (s.picture) { img.src = s.picture; img.style.visibility = "visible"; }
        else { img.removeAttribute("src"); img.style.visibility = "hidden"; }
      }
      text(".maze-lab-step-title", s.title);
      text(".maze-lab-step-reward", s.reward);
      text(".maze-lab-step-return", s.cumulative);
      text(".maze-lab-step-actions", s.actions);
      text(".maze-lab-step-events", s.events);
      charts.forEach(function (div) {
        if (!div.layout || !div.layout.shapes || !div.layout.shapes.length) return;
        Plotly.relayout(div, {"shapes[0].x0": s.step, "shapes[0].x1": s.step});
        if (div.data.length > 2 && div.data[2].name === "current step") {
          Plotly.restyle(div, {x: [[s.step]], y: [[s["return"]]]}, [2]);
        }
      });
    }
    function stop() { if (timer) { clearInterval(timer); timer = null; play.textContent = "\u25b6 play"; } }
    slider.addEventListener("input", function () { stop(); show(parseInt(slider.value, 10)); });
    box.querySelector(".maze-lab-prev").addEventListener("click", function () {
      stop(); show(parseInt(slider.value, 10) - 1);
    });
    box.querySelector(".maze-lab-next").addEventListener("click", function () {
      stop(); show(parseInt(slider.value, 10) + 1);
    });
    play.addEventListener("click", function () {
      if (timer) { stop(); return; }
      if (parseInt(slider.value, 10) >= steps.length - 1) show(0);
      play.textContent = "\u275a\u275a pause";
      timer = setInterval(function () {
        var next = parseInt(slider.value, 10) + 1;
        if (next >= steps.length) { stop(); return; }
        show(next);
      }, 300);
    });
    show(0);
  });
})();
"""
