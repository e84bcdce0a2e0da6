"""The policy and critic graphs of a run, per policy key, as a zoomable plotly figure with block details.

The graphs come from the run directory (``model_graphs/*.svg``, written by the model composer when the run's model
is built). Each drawing carries its graph as data, JSON in its ``<metadata>`` (see :mod:`maze_lab.agent.graph`): the
nodes, the edges with their tensors, the block details and the layout's geometry. That is what is read, never the
drawing itself: a bounded read, parsed with defusedxml (no entities, no external references), the JSON checked field
by field. Where a run has no drawings yet and trains in this kernel, the graphs are taken from its live model instead.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from maze_lab.widgets.view import PollingView

MAX_GRAPH_BYTES = 4 * 1024 * 1024
"""A model drawing larger than this is not read (the drawings of real models are a few dozen kB)."""
MAX_GRAPH_FILES = 64


@dataclass
class GraphNode:
    """One input, block or output of a model graph, with its box in drawing coordinates (y grows downwards)."""

    id: str
    kind: str  # "input", "block" or "output"
    name: str  # block name or tensor key
    type: str = ""  # block class name; "tensor" for inputs and outputs
    shape: tuple[int, ...] | None = None  # inputs and outputs: shape without batch dims
    out_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # blocks: the tensors they write
    params: int = 0
    detail: str = ""
    x: float = 0.0  # centre
    y: float = 0.0  # top
    width: float = 0.0
    height: float = 0.0
    inputs: list[str] = field(default_factory=list)  # ids of the nodes with an edge into this one
    outputs: list[str] = field(default_factory=list)

    @property
    def is_tensor(self) -> bool:
        """An input or output of the network (not a block)."""
        return self.kind != "block"


@dataclass
class GraphEdge:
    """One tensor read: from its writer to its reader, drawn along ``path``; its label centred on ``label_at``."""

    source: str
    target: str
    key: str
    shape: tuple[int, ...] | None
    path: list[tuple[float, float]] = field(default_factory=list)
    label_at: tuple[float, float] | None = None


@dataclass
class GraphData:
    """One network's graph: nodes by id, edges as (from id, to id)."""

    name: str  # e.g. policy_0, critic_1
    title: str
    nodes: dict[str, GraphNode]
    edges: list[tuple[str, str]]
    total_params: int = 0
    tensors: list[GraphEdge] = field(default_factory=list)  # the edges with their tensors and paths

    @property
    def blocks(self) -> list[GraphNode]:
        """The blocks in execution order."""
        return [n for n in self.nodes.values() if n.kind == "block"]

    @property
    def role(self) -> str:
        """``policy`` or ``critic``."""
        return self.name.split("_", 1)[0]

    @property
    def key(self) -> str:
        """The policy key (what follows the role in the name)."""
        return self.name.split("_", 1)[1] if "_" in self.name else ""

    def output_shapes(self, block: GraphNode) -> dict[str, tuple[int, ...] | None]:
        """The tensors a block writes, with their shapes."""
        return dict(block.out_shapes)

    def input_tensors(self) -> dict[str, tuple[int, ...] | None]:
        """The graph's inputs: the observations the network reads."""
        return {n.name: n.shape for n in self.nodes.values() if n.kind == "input"}

    def output_tensors(self) -> dict[str, tuple[int, ...] | None]:
        """The graph's outputs: action logits / distribution parameters, values."""
        return {n.name: n.shape for n in self.nodes.values() if n.kind == "output"}

    def describe(self, node: GraphNode) -> str:
        """One block's or tensor's details as a few lines of text."""
        if node.is_tensor:
            writers = ", ".join(self.nodes[i].name for i in node.inputs) or "- (graph input)"
            readers = ", ".join(self.nodes[o].name for o in node.outputs) or "- (graph output)"
            return (f"{node.kind} tensor {node.name}\nshape {_fmt_shape(node.shape)}\nwritten by {writers}\n"
                    f"read by {readers}")
        outs = ", ".join(f"{k} {_fmt_shape(s)}" for k, s in self.output_shapes(node).items()) or "-"
        ins = ", ".join(f"{e.key} {_fmt_shape(e.shape)}" for e in self.tensors if e.target == node.id) or "-"
        share = f" ({100 * node.params / self.total_params:.1f}% of {self.total_params:,})" if self.total_params else ""
        lines = [f"{node.name}: {node.type}", f"output {outs}", f"input {ins}", f"parameters {node.params:,}{share}"]
        if node.detail:
            lines.append(node.detail)
        return "\n".join(lines)

    def describe_tensor(self, edge: GraphEdge) -> str:
        """One tensor between nodes: key, shape, writer and reader."""
        return (f"tensor {edge.key}\nshape {_fmt_shape(edge.shape)}\nwritten by {self.nodes[edge.source].name}\n"
                f"read by {self.nodes[edge.target].name}")


def _fmt_shape(shape: tuple[int, ...] | None) -> str:
    if shape is None:
        return "(?)"
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


# ---- reading graphs ------------------------------------------------------------------------------------------------
def parse_graph_svg(text: str, name: str) -> GraphData:
    """The graph data in a drawing written by :class:`maze_lab.agent.graph.ModelGraph` (read as data only).

    :param text: the SVG document.
    :param name: the graph's name (file stem), e.g. ``policy_0``.
    """
    from defusedxml import ElementTree

    from maze_lab.agent.graph import METADATA_ID, ModelGraph

    root = ElementTree.fromstring(text, forbid_dtd=True)
    meta = next((el for el in root.iter("{http://www.w3.org/2000/svg}metadata") if el.get("id") == METADATA_ID),
                None)
    if meta is None:
        raise ValueError("no graph data in this drawing (drawn by a maze-lab older than its graph data)")
    return graph_from_model_graph(ModelGraph.from_dict(json.loads(meta.text or "")), name)


def graph_from_model_graph(graph: Any, name: str) -> GraphData:
    """The view's graph of a :class:`maze_lab.agent.graph.ModelGraph` (its data and its layout's geometry)."""
    nodes: dict[str, GraphNode] = {}
    for nid, n in graph.data.nodes.items():
        box = graph.layout.boxes.get(nid)
        geometry = {"x": box.x, "y": box.y, "width": box.width, "height": box.height} if box is not None else {}
        nodes[nid] = GraphNode(id=nid, kind=n.kind, name=n.label, type=n.block_type or "tensor", shape=n.shape,
                               out_shapes=dict(n.out_shapes), params=n.params, detail=n.details, **geometry)
    pending: dict[tuple[str, str], list[Any]] = {}  # the routes of each pair of nodes, in the edges' order
    for route in graph.layout.routes:
        pending.setdefault((route.source, route.target), []).append(route)
    tensors = []
    for e in graph.data.edges:
        queue = pending.get((e.source, e.target))
        route = queue.pop(0) if queue else None
        tensors.append(GraphEdge(e.source, e.target, e.key, e.shape, route.polyline() if route else [],
                                 route.label_at if route else None))
        nodes[e.source].outputs.append(e.target)
        nodes[e.target].inputs.append(e.source)
    return GraphData(name=name, title=graph.title, nodes=nodes, edges=[(e.source, e.target) for e in tensors],
                     total_params=graph.total_params, tensors=tensors)


def read_run_graphs(run_dir: str | Path, max_bytes: int = MAX_GRAPH_BYTES) -> tuple[dict[str, GraphData], list[str]]:
    """The graphs of a run directory by name (``policy_0``, ``critic_0``, ...), and a note per file not read."""
    from maze_lab.core.utils.safe_files import open_regular, read_at_most
    from maze_lab.run.run_dir import RunDirectory

    graph_dir = RunDirectory(Path(run_dir)).graph_dir
    graphs: dict[str, GraphData] = {}
    problems: list[str] = []
    if not graph_dir.is_dir():
        return graphs, problems
    files = sorted(p for p in graph_dir.glob("*.svg") if p.is_file() and not p.is_symlink())
    for path in files[:MAX_GRAPH_FILES]:
        try:
            with open_regular(path, run_dir, what="model graph") as f:  # never blocks on a FIFO
                data = read_at_most(f, max_bytes + 1)
            if len(data) > max_bytes:
                problems.append(f"{path.name}: larger than {max_bytes:,} bytes, not read")
                continue
            graphs[path.stem] = parse_graph_svg(data.decode("utf-8"), path.stem)
        except Exception as err:  # noqa: BLE001 - a damaged drawing is reported, the others still shown
            problems.append(f"{path.name}: {type(err).__name__}: {err}")
    if len(files) > MAX_GRAPH_FILES:
        problems.append(f"{len(files) - MAX_GRAPH_FILES} more drawings not read")
    return graphs, problems


def live_model_graphs(source: Any) -> dict[str, GraphData]:
    """The graphs of the model of a run in this kernel (``{}`` where its trainer is not built yet).

    Opaque networks (no InferenceBlock) get their output shapes from one forward pass on dummy input; that is done
    only once the run no longer trains, so that the kernel never runs the model beside the training thread.
    """
    run = _run_of(source)
    trainer = getattr(run, "_trainer", None)
    model = getattr(trainer, "model", None)
    if model is None:
        return {}
    handle = getattr(run, "handle", None)
    running = bool(handle is not None and handle.running)
    from maze_lab.agent.graph import ModelGraph, composer_graphs
    from maze_lab.perception.perception_utils import space_shapes

    spaces = {} if running else dict(getattr(getattr(run, "train_env", None), "observation_spaces_dict",
                                                    None) or {})
    graphs: dict[str, GraphData] = {}
    for role in ("policy", "critic"):
        networks = getattr(getattr(model, role, None), "networks", None)
        if not isinstance(networks, dict) or not all(hasattr(n, "parameters") for n in networks.values()):
            return {name: graph_from_model_graph(g, name) for name, g in composer_graphs(model).items()}
        for key, net in networks.items():
            step = getattr(key, "step_key", key)
            name = f"{role}_{key.step_key}_{key.agent_id}" if hasattr(key, "agent_id") else f"{role}_{key}"
            shapes = space_shapes(spaces[step]) if step in spaces else None
            graphs[name] = graph_from_model_graph(ModelGraph(net, title=name.replace("_", " ", 1),
                                                             input_shapes=shapes), name)
    return graphs


def _run_of(source: Any) -> Any:
    """The run object behind a RunContext, RunHandle or RunSource of one (None for directories and stores)."""
    if hasattr(source, "_single"):  # RunContext
        try:
            return source._single()
        except Exception:  # noqa: BLE001 - e.g. a sweep: no single run
            return None
    if hasattr(source, "_origin"):  # RunSource made by a view
        return _run_of(source._origin)
    handle = getattr(source, "handle", None) if not hasattr(source, "_run") else source
    return getattr(handle, "_run", None)


# ---- the view ------------------------------------------------------------------------------------------------------
class ModelGraphView(PollingView):
    """The policy and critic graphs of a run per policy key: zoom and pan (plotly), details on hover and click.

    :param source: a RunHandle, RunContext, LoadedRun, StatsStore or run directory (see ``RunSource``).
    """

    def __init__(self, source: Any):
        import ipywidgets as w
        import plotly.graph_objects as go

        from maze_lab.widgets.plotly_widgets import FigureWidget
        from maze_lab.widgets.sources import RunSource

        self.source = RunSource(source)
        self._origin = source  # for the live model of a RunContext / RunHandle
        self.graphs: dict[str, GraphData] = {}
        self.problems: list[str] = []
        self.origin = "none"  # "run directory", "live model" or "none"
        self._drawn: str | None = None
        self._seen: tuple | None = None
        self._node_ids: list[str] = []
        self.header = w.HTML()
        self.key_select = w.Dropdown(description="policy key", options=[], layout=w.Layout(width="220px"))
        self.role_select = w.ToggleButtons(options=["policy", "critic"], description="network",
                                           style={"button_width": "70px"})
        self.graph_select = w.Dropdown(description="graph", options=[], layout=w.Layout(width="260px",
                                                                                         display="none"))
        self.details = w.HTML(value=self._details_html(None), layout=w.Layout(width="300px", min_width="260px"))
        self.figure = FigureWidget(layout=go.Layout(
            height=520, margin={"l": 10, "r": 10, "t": 50, "b": 10}, dragmode="pan", showlegend=False,
            plot_bgcolor="#ffffff", hovermode="closest",
            xaxis={"visible": False}, yaxis={"visible": False, "autorange": "reversed", "scaleanchor": "x"},
            title={"text": "model graph", "x": 0.01}))
        self.figure.add_scatter(x=[], y=[], mode="lines", line={"color": "#6b7280", "width": 1.3}, hoverinfo="skip",
                                name="edges")
        self.figure.add_scatter(x=[], y=[], mode="markers+text", name="nodes", hoverinfo="text", text=[],
                                hovertext=[], textfont={"size": 11},
                                marker={"symbol": "square", "size": 1, "opacity": 0.01})
        self.figure.add_scatter(x=[], y=[], mode="text", name="tensors", hoverinfo="text", text=[], hovertext=[],
                                textfont={"size": 10, "family": "DejaVu Sans Mono, monospace", "color": "#1f2937"})
        self.figure.data[1].on_click(self._on_click)
        self.key_select.observe(lambda _: self._select(), names="value")
        self.role_select.observe(lambda _: self._select(), names="value")
        self.graph_select.observe(lambda _: self._draw_selected(), names="value")
        controls = w.HBox([self.key_select, self.role_select, self.graph_select])
        self.widget = w.VBox([self.header, controls, w.HBox([self.figure, self.details])])
        self.update(force=True)

    # ---- data --------------------------------------------------------------------------------------------------
    def _load(self) -> None:
        graphs: dict[str, GraphData] = {}
        problems: list[str] = []
        origin = "none"
        if self.source.run_dir is not None:
            graphs, problems = read_run_graphs(self.source.run_dir)
            origin = "run directory" if graphs else origin
        if not graphs:
            graphs = live_model_graphs(self._origin)
            origin = "live model" if graphs else origin
        self.graphs, self.problems, self.origin = graphs, problems, origin

    def _fingerprint(self) -> tuple:
        if self.source.run_dir is None:
            return (self.source.version,)
        graph_dir = Path(self.source.run_dir) / "model_graphs"
        with contextlib.suppress(OSError):
            return tuple(sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in graph_dir.glob("*.svg")))
        return ()

    def keys(self) -> list[str]:
        """The policy keys with a graph."""
        return sorted({g.key for g in self.graphs.values()}, key=_natural)

    def graph(self, name: str) -> GraphData:
        """One graph by name (``policy_0``); a KeyError lists those there are."""
        if name not in self.graphs:
            raise KeyError(f"no model graph {name!r}; this run has {sorted(self.graphs)}")
        return self.graphs[name]

    def block_table(self, name: str) -> list[dict[str, Any]]:
        """Every block of a graph: name, type, output shapes and parameters (what the view shows)."""
        g = self.graph(name)
        return [{"name": b.name, "type": b.type, "outputs": g.output_shapes(b), "params": b.params}
                for b in g.blocks]

    # ---- drawing -----------------------------------------------------------------------------------------------
    def update(self, force: bool = False) -> bool:
        """Re-read the graphs where the drawings changed (cheap otherwise); returns whether it redrew. Never raises:
        an error is shown in the header."""
        try:
            self.source.refresh()
            fingerprint = self._fingerprint()
            if not force and fingerprint == self._seen and (self.graphs or not self.source.live):
                self._draw_header()
                return False
            self._seen = fingerprint
            self._load()
            keys = self.keys()
            if list(self.key_select.options) != keys:
                current = self.key_select.value
                self.key_select.options = keys
                self.key_select.value = current if current in keys else (keys[0] if keys else None)
            self._select()
            self._draw_header()
            return True
        except Exception as err:  # noqa: BLE001 - a drawing error must not reach the caller (or the run)
            self.header.value = (f"<div style='color:#b91c1c'><b>model graph error:</b> "
                                 f"{html.escape(type(err).__name__)}: {html.escape(str(err))}</div>")
            return False

    def _draw_header(self) -> None:
        parts = [f"<b>{html.escape(self.source.name)}</b> · model graphs"]
        if self.graphs:
            parts.append(f"{len(self.graphs)} networks from the {self.origin}")
        elif self.source.live:
            parts.append("waiting for the run to build its model")
        else:
            parts.append("this run has no model graphs")
        text = " · ".join(parts)
        if self.problems:
            text += "<br><span style='color:#b45309'>" + "<br>".join(html.escape(p) for p in self.problems) + "</span>"
        text += ("<br><span style='color:#6b7280;font-size:90%'>drag to pan, scroll or box-select to zoom, "
                 "double-click to reset; click a block for its details</span>")
        if self.header.value != text:
            self.header.value = text

    def _select(self) -> None:
        key, role = self.key_select.value, self.role_select.value
        names = [n for n, g in self.graphs.items() if g.key == key and g.role == role]
        if not names:  # e.g. a Q-critic named critic_<key>_q0: match on the start
            names = [n for n in self.graphs if n.startswith(f"{role}_{key}")]
        names.sort(key=_natural)
        if list(self.graph_select.options) != names:
            current = self.graph_select.value
            self.graph_select.options = names
            self.graph_select.value = current if current in names else (names[0] if names else None)
        self.graph_select.layout.display = "" if len(names) > 1 else "none"
        if names and self.graph_select.value not in names:
            self.graph_select.value = names[0]
        self._draw_selected(force=True)

    def _draw_selected(self, force: bool = False) -> None:
        name = self.graph_select.value if self.graph_select.options else None
        if name == self._drawn and not force:
            return
        self._drawn = name
        self.draw(name)

    def draw(self, name: str | None) -> None:
        """Show one graph (None: an empty figure saying why)."""
        g = self.graphs.get(name) if name else None
        fig = self.figure
        with fig.batch_update():
            if g is None:
                fig.data[0].x, fig.data[0].y = [], []
                for trace in fig.data[1:]:
                    trace.x, trace.y, trace.text, trace.hovertext = [], [], [], []
                fig.layout.shapes = []
                fig.layout.title.text = "no model graph" if not self.graphs else "no graph for this selection"
                self._node_ids = []
                return
            ex: list[float | None] = []
            ey: list[float | None] = []
            for e in g.tensors:  # along the layout's routes
                ex += [x for x, _ in e.path] + [None]
                ey += [y for _, y in e.path] + [None]
            fig.data[0].x, fig.data[0].y = ex, ey
            labelled = [e for e in g.tensors if e.label_at is not None]
            fig.data[2].x = [e.label_at[0] for e in labelled]
            fig.data[2].y = [e.label_at[1] for e in labelled]
            fig.data[2].text = [f"{html.escape(e.key)}<br>{_fmt_shape(e.shape)}" for e in labelled]
            fig.data[2].hovertext = [g.describe_tensor(e).replace("\n", "<br>") for e in labelled]
            nodes = list(g.nodes.values())
            self._node_ids = [n.id for n in nodes]
            fig.data[1].x = [n.x for n in nodes]
            fig.data[1].y = [n.y + n.height / 2 for n in nodes]
            fig.data[1].text = [self._label(g, n) for n in nodes]
            fig.data[1].hovertext = [g.describe(n).replace("\n", "<br>") for n in nodes]
            fig.layout.shapes = [self._box(g, n) for n in nodes]
            blocks = f"{len(g.blocks)} block" + ("s" if len(g.blocks) != 1 else "")
            fig.layout.title.text = (f"{html.escape(g.title)} — {g.total_params:,} parameters, {blocks}"
                                     f"  <span style='font-size:11px;color:#6b7280'>(blue: blocks, shade = share "
                                     f"of parameters; red: inputs and outputs; labels on edges: tensors between "
                                     f"blocks)</span>")
            height = max((n.y + n.height for n in nodes), default=100.0)
            fig.layout.height = int(min(900, max(360, height * 1.15 + 80)))
            fig.layout.xaxis.range = None
            fig.layout.yaxis.range = None
        self.details.value = self._details_html(None)

    @staticmethod
    def _label(g: GraphData, n: GraphNode) -> str:
        if n.is_tensor:
            return f"<b>{html.escape(n.name)}</b><br>{_fmt_shape(n.shape)}"
        head = html.escape(n.type) if n.name in (n.type, *n.out_shapes) else \
            f"{html.escape(n.name)}<br><b>{html.escape(n.type)}</b>"
        return f"{head}<br>{n.params:,} params"

    @staticmethod
    def _box(g: GraphData, n: GraphNode) -> dict[str, Any]:
        if n.is_tensor:
            fill, line = "#f9c8c2", "#c9453b"
        else:
            share = n.params / g.total_params if g.total_params else 0.0
            light, dark = (234, 242, 251), (120, 160, 215)
            fill = "#{:02x}{:02x}{:02x}".format(*[round(lo + (hi - lo) * share) for lo, hi in zip(light, dark,
                                                                                                   strict=True)])
            line = "#2b5797"
        return {"type": "rect", "xref": "x", "yref": "y", "x0": n.x - n.width / 2, "x1": n.x + n.width / 2,
                "y0": n.y, "y1": n.y + n.height, "fillcolor": fill, "line": {"color": line, "width": 1.2},
                "layer": "below"}

    def _on_click(self, trace: Any, points: Any, state: Any) -> None:
        try:
            if points.point_inds:
                self.show_details(self._node_ids[points.point_inds[0]])
        except Exception as err:  # noqa: BLE001 - a click must never raise into the front-end
            self.details.value = f"<div style='color:#b91c1c'>{html.escape(str(err))}</div>"

    def show_details(self, node_id: str) -> str:
        """Fill the details panel with one node of the shown graph (as a click does); returns its text."""
        g = self.graphs[self._drawn]
        text = g.describe(g.nodes[node_id])
        self.details.value = self._details_html(text)
        return text

    @staticmethod
    def _details_html(text: str | None) -> str:
        body = ("<i style='color:#6b7280'>click a block or tensor to see its type, output shape and parameters</i>"
                if text is None else "<br>".join(html.escape(line) for line in text.splitlines()))
        return f"<div style='padding:8px;border-left:3px solid #2b5797'><b>details</b><br>{body}</div>"



def _natural(text: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(text)))
