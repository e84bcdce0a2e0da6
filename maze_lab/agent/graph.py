"""Model graphs: the blocks and tensors of an inference graph as data, laid out by Graphviz and drawn as SVG.

:class:`GraphData` is the graph as data: input, block and output nodes (label, block type, shapes, parameter count,
details) and edges that carry a tensor (its key and shape). Graphviz's ``dot`` lays it out where the ``dot`` program
is installed (Debian: ``apt-get install graphviz``, which ``scripts/setup.sh`` does): that is the good layout, ranked
top to bottom with few crossings, edges routed round the boxes and their tensor labels placed beside them. Where
``dot`` is missing, a plain fallback stacks the nodes in rows by depth with straight edges and sets all text in a
monospace font (whose widths are known), and a warning says so once. Either way the SVG is drawn from the layout's
positions; each drawing of one network carries its data as JSON in its ``<metadata>``, which the model-graph widget
reads instead of the drawing.

Blocks are blue boxes whose shade shows their share of the model's parameters; the network's input and output tensors
are red boxes with their shape (without batch dims); the tensors between blocks label the edges.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape, quoteattr

if TYPE_CHECKING:  # torch is imported where a network is drawn, not where a saved drawing is read
    from torch import nn

    from maze_lab.perception.blocks import InferenceBlock

FONT = "DejaVu Sans, Verdana, Arial, Helvetica, sans-serif"
MONO = "DejaVu Sans Mono, Menlo, Consolas, monospace"
DOT_FONT = "DejaVu Sans"
DOT_MONO = "DejaVu Sans Mono"
MONO_ADVANCE = 0.602
"""Advance width of every glyph of DejaVu Sans Mono in em: the fallback layout and the legend, set in it, know their
text widths exactly."""
FONT_SIZE = 12
SMALL = 10
TITLE_SIZE = 15
LINE = 14.0
PAD_X = 10.0
PAD_Y = 7.0
ROW_GAP = 30.0
NODE_GAP = 22.0
MARGIN = 16.0
DOT_TIMEOUT_S = 30.0
"""Longest wait for ``dot``; past it the plain layout is used."""

BLOCK_LIGHT = (234, 242, 251)
BLOCK_DARK = (31, 78, 153)
BLOCK_STROKE = "#2b5797"
TENSOR_FILL = "#f9c8c2"
TENSOR_STROKE = "#c9453b"
EDGE = "#6b7280"
TEXT = "#1f2937"
SUBTLE = "#4b5563"

METADATA_ID = "maze-lab-model-graph"
FORMAT = "maze-lab model graph"
FORMAT_VERSION = 1
MAX_NODES = 10_000
"""A graph read back from a dict with more nodes (or edges) than this is refused."""

Shape = tuple[int, ...]

_svg_ids = itertools.count()
_dot_warned = False


class GraphvizMissingWarning(UserWarning):
    """Graphviz's ``dot`` is not installed (or failed): model graphs get the plain fallback layout."""


# ---- the graph as data -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GraphNode:
    """One node: an input tensor, a block or an output tensor of the network.

    :param kind: ``input``, ``block`` or ``output``.
    :param label: the block's name, or the tensor's key.
    :param block_type: the block's class name (empty for tensors).
    :param in_shapes: the tensors a block reads, by key.
    :param out_shapes: the tensors a block writes, by key; for an input or output, its tensor.
    :param details: a short description of the block's configuration.
    """

    id: str
    kind: str
    label: str
    block_type: str = ""
    in_shapes: dict[str, Shape] = field(default_factory=dict)
    out_shapes: dict[str, Shape] = field(default_factory=dict)
    params: int = 0
    details: str = ""

    @property
    def shape(self) -> Shape | None:
        """The tensor's shape (inputs and outputs; None for blocks)."""
        return next(iter(self.out_shapes.values()), None) if self.kind != "block" else None


@dataclass(frozen=True)
class GraphEdge:
    """A tensor from the node that writes it (or the input) to a node that reads it."""

    source: str
    target: str
    key: str
    shape: Shape | None


@dataclass
class GraphData:
    """A network's graph: nodes by id in execution order (inputs first, outputs last), and its edges."""

    title: str
    nodes: dict[str, GraphNode]
    edges: list[GraphEdge]
    total_params: int = 0

    @classmethod
    def from_network(cls, net: nn.Module, title: str | None = None,
                     input_shapes: Mapping[str, Sequence[int]] | None = None) -> GraphData:
        """The graph of an InferenceBlock, a PerceptionBlock or an nn.Module (see :class:`ModelGraph`)."""
        from maze_lab.perception.blocks import PerceptionBlock

        graph = cls(title=title or type(net).__name__, nodes={}, edges=[],
                    total_params=sum(p.numel() for p in net.parameters()))
        inference = find_inference_block(net)
        if inference is not None:
            graph._add_inference_block(inference)
        elif isinstance(net, PerceptionBlock):
            graph._add_single_block(net, dict(zip(net.in_keys, net.in_shapes, strict=True)), net.out_shapes_dict())
        else:
            outputs = _infer_outputs(net, input_shapes) if input_shapes else {}
            graph._add_single_block(net, dict(input_shapes or {}), outputs)
        return graph

    def _add_block(self, name: str, block: nn.Module, ins: Mapping[str, Any], outs: Mapping[str, Any]) -> str:
        node = GraphNode(f"b:{name}", "block", name, type(block).__name__, _shapes(ins), _shapes(outs),
                         sum(p.numel() for p in block.parameters()), _block_detail(block))
        self.nodes[node.id] = node
        return node.id

    def _add_tensor(self, kind: str, key: str, shape: Sequence[int] | None) -> str:
        node = GraphNode(f"{'in' if kind == 'input' else 'out'}:{key}", kind, key,
                         out_shapes=_shapes({key: shape}) if shape is not None else {})
        self.nodes[node.id] = node
        return node.id

    def _add_inference_block(self, net: InferenceBlock) -> None:
        shapes = net.tensor_shapes()
        writer = {key: self._add_tensor("input", key, shapes[key]) for key in net.in_keys}
        for names in net.execution_plan.values():
            for name in names:
                block = net.perception_dict[name]
                nid = self._add_block(name, block, {k: shapes[k] for k in block.in_keys},
                                      {k: shapes[k] for k in block.out_keys})
                for key in block.in_keys:
                    if key in writer:
                        self.edges.append(GraphEdge(writer[key], nid, key, _shape(shapes.get(key))))
                writer.update({key: nid for key in block.out_keys})
        for key in net.out_keys:
            nid = self._add_tensor("output", key, shapes[key])
            if key in writer:
                self.edges.append(GraphEdge(writer[key], nid, key, _shape(shapes[key])))

    def _add_single_block(self, block: nn.Module, inputs: Mapping[str, Sequence[int]],
                          outputs: Mapping[str, Sequence[int]]) -> None:
        ins = [self._add_tensor("input", key, shape) for key, shape in inputs.items()]
        nid = self._add_block(type(block).__name__, block, inputs, outputs)
        for src, (key, shape) in zip(ins, inputs.items(), strict=True):
            self.edges.append(GraphEdge(src, nid, key, _shape(shape)))
        for key, shape in outputs.items():
            self.edges.append(GraphEdge(nid, self._add_tensor("output", key, shape), key, _shape(shape)))

    @property
    def blocks(self) -> list[GraphNode]:
        """The blocks in execution order."""
        return [n for n in self.nodes.values() if n.kind == "block"]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data."""
        return {"title": self.title, "total_params": self.total_params,
                "nodes": [{"id": n.id, "kind": n.kind, "label": n.label, "block_type": n.block_type,
                           "in_shapes": {k: list(s) for k, s in n.in_shapes.items()},
                           "out_shapes": {k: list(s) for k, s in n.out_shapes.items()},
                           "params": n.params, "details": n.details} for n in self.nodes.values()],
                "edges": [{"source": e.source, "target": e.target, "key": e.key,
                           "shape": None if e.shape is None else list(e.shape)} for e in self.edges]}

    @classmethod
    def from_dict(cls, data: Any) -> GraphData:
        """The graph of :meth:`to_dict`'s data, checked field by field (a ValueError names what is wrong)."""
        d = _Check(data, "graph")
        nodes: dict[str, GraphNode] = {}
        for i, item in enumerate(d.items("nodes", MAX_NODES)):
            n = _Check(item, f"graph.nodes[{i}]")
            node = GraphNode(n.text("id"), n.choice("kind", ("input", "block", "output")), n.text("label"),
                             n.text("block_type"), n.shapes("in_shapes"), n.shapes("out_shapes"), n.integer("params"),
                             n.text("details"))
            nodes[node.id] = node
        edges = []
        for i, item in enumerate(d.items("edges", MAX_NODES)):
            e = _Check(item, f"graph.edges[{i}]")
            edge = GraphEdge(e.text("source"), e.text("target"), e.text("key"), e.shape("shape", optional=True))
            if edge.source not in nodes or edge.target not in nodes:
                raise ValueError(f"graph.edges[{i}] joins {edge.source!r} and {edge.target!r}, not both nodes")
            edges.append(edge)
        return cls(d.text("title"), nodes, edges, d.integer("total_params"))

    def to_dot(self) -> str:
        """The graph in Graphviz's DOT language, nodes named ``n0, n1, ...`` in order, labels as HTML-like labels."""
        return _to_dot(self, {nid: f"n{i}" for i, nid in enumerate(self.nodes)})


def _shape(shape: Sequence[int] | None) -> Shape | None:
    return None if shape is None else tuple(int(d) for d in shape)


def _shapes(shapes: Mapping[str, Sequence[int] | None]) -> dict[str, Shape]:
    return {k: tuple(int(d) for d in s) for k, s in shapes.items() if s is not None}


def _fmt_shape(shape: Sequence[int] | None) -> str:
    if shape is None:
        return "(?)"
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _block_detail(block: nn.Module) -> str:
    """A short description of a block's configuration for the drawing."""
    name = type(block).__name__

    def act(mod: nn.Module) -> str:
        acts = [type(m).__name__ for m in mod.modules() if type(m).__module__.startswith("torch.nn.modules.activation")]
        return acts[0] if acts else ""

    if hasattr(block, "hidden_units") and isinstance(block.hidden_units, list):
        a = act(block)
        return f"units {block.hidden_units}" + (f" · {a}" if a else "")
    if hasattr(block, "output_units"):
        return f"units {block.output_units}"
    if hasattr(block, "hidden_channels"):
        return f"channels {block.hidden_channels}"
    if hasattr(block, "hidden_size"):
        return f"hidden {block.hidden_size}"
    if name == "ConcatenationBlock":
        return f"dim {block.concat_dim}"
    if hasattr(block, "chain"):
        return " → ".join(type(b).__name__.replace("Block", "") for b in block.chain)
    if name == "TorchModelBlock":
        return type(block.net).__name__
    if name == "ActionMaskingBlock":
        return f"masked by {block.in_keys[1]} (0 = not allowed)"
    return ""


class _Check:
    """Typed access to one dict of untrusted data; every mismatch is a ValueError naming the field."""

    def __init__(self, data: Any, where: str):
        if not isinstance(data, dict):
            raise ValueError(f"{where} must be a JSON object, not {type(data).__name__}")
        self.data, self.where = data, where

    def _get(self, key: str, types: type | tuple[type, ...], what: str) -> Any:
        value = self.data.get(key)
        if not isinstance(value, types) or isinstance(value, bool):
            raise ValueError(f"{self.where}.{key} must be {what}, not {value!r:.60}")
        return value

    def text(self, key: str) -> str:
        return self._get(key, str, "a string")

    def integer(self, key: str) -> int:
        return self._get(key, int, "an integer")

    def number(self, key: str) -> float:
        value = float(self._get(key, (int, float), "a number"))
        if not math.isfinite(value):
            raise ValueError(f"{self.where}.{key} must be a finite number, not {value}")
        return value

    def choice(self, key: str, options: tuple[str, ...]) -> str:
        value = self.text(key)
        if value not in options:
            raise ValueError(f"{self.where}.{key} must be one of {list(options)}, not {value!r}")
        return value

    def items(self, key: str, limit: int) -> list:
        value = self._get(key, list, "a list")
        if len(value) > limit:
            raise ValueError(f"{self.where}.{key} has {len(value):,} items, more than {limit:,}")
        return value

    def shape(self, key: str, optional: bool = False) -> Shape | None:
        value = self.data.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, list) or len(value) > 16 or not all(
                isinstance(d, int) and not isinstance(d, bool) for d in value):
            raise ValueError(f"{self.where}.{key} must be a list of at most 16 integers, not {value!r:.60}")
        return tuple(value)

    def shapes(self, key: str) -> dict[str, Shape]:
        value = self._get(key, dict, "an object of shapes")
        return {k: _Check({"s": v}, f"{self.where}.{key}[{k!r}]").shape("s") for k, v in value.items()
                if isinstance(k, str)}

    def point(self, value: Any, where: str) -> tuple[float, float]:
        if not isinstance(value, list) or len(value) != 2:
            raise ValueError(f"{self.where}.{where} must be a point [x, y], not {value!r:.60}")
        c = _Check({"x": value[0], "y": value[1]}, f"{self.where}.{where}")
        return c.number("x"), c.number("y")


# ---- the layout ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Text:
    """One line of text, placed: ``x`` where ``anchor`` says, ``y`` its baseline."""

    x: float
    y: float
    text: str
    size: float = FONT_SIZE
    bold: bool = False
    mono: bool = False
    color: str = TEXT
    anchor: str = "middle"  # start, middle or end


@dataclass
class Box:
    """A node as laid out: ``x`` its centre, ``y`` its top (y grows downwards)."""

    id: str
    kind: str  # input, block or output
    x: float
    y: float
    width: float
    height: float
    layer: int = 0  # the row (rank) it sits in, from the top
    fill: str = "#ffffff"
    stroke: str = BLOCK_STROKE
    title: str = ""  # tooltip
    texts: list[Text] = field(default_factory=list)


@dataclass
class Route:
    """An edge as laid out: a cubic Bézier path (``points``: start, then three points per segment), the arrow's tip,
    the point its label is centred on and the label's lines."""

    source: str
    target: str
    points: list[tuple[float, float]]
    tip: tuple[float, float] | None = None
    label_at: tuple[float, float] | None = None
    label: list[Text] = field(default_factory=list)

    def polyline(self, per_segment: int = 8) -> list[tuple[float, float]]:
        """The path as a polyline (each Bézier segment sampled ``per_segment`` times), ending at the tip."""
        pts = self.points
        out = [pts[0]] if pts else []
        for i in range(0, len(pts) - 3, 3):
            (x0, y0), (x1, y1), (x2, y2), (x3, y3) = pts[i:i + 4]
            for k in range(1, per_segment + 1):
                t = k / per_segment
                a, b, c, d = (1 - t) ** 3, 3 * t * (1 - t) ** 2, 3 * t * t * (1 - t), t ** 3
                out.append((a * x0 + b * x1 + c * x2 + d * x3, a * y0 + b * y1 + c * y2 + d * y3))
        if self.tip is not None:
            out.append(self.tip)
        return out


@dataclass
class Layout:
    """Where everything goes, in drawing coordinates: the header's lines, the boxes, the edges."""

    engine: str  # "dot" or "plain"
    width: float
    height: float
    boxes: dict[str, Box]
    routes: list[Route]
    header: list[Text] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The geometry as plain JSON-able data (without the text lines)."""
        r = _round
        return {"engine": self.engine, "width": r(self.width), "height": r(self.height),
                "boxes": [{"id": b.id, "x": r(b.x), "y": r(b.y), "width": r(b.width), "height": r(b.height),
                           "layer": b.layer} for b in self.boxes.values()],
                "routes": [{"source": e.source, "target": e.target, "points": [[r(x), r(y)] for x, y in e.points],
                            "tip": None if e.tip is None else [r(e.tip[0]), r(e.tip[1])],
                            "label_at": None if e.label_at is None else [r(e.label_at[0]), r(e.label_at[1])]}
                           for e in self.routes]}

    @classmethod
    def from_dict(cls, data: Any, graph: GraphData) -> Layout:
        """The geometry of :meth:`to_dict`'s data for ``graph`` (checked; a ValueError names what is wrong)."""
        d = _Check(data, "layout")
        boxes: dict[str, Box] = {}
        for i, item in enumerate(d.items("boxes", MAX_NODES)):
            b = _Check(item, f"layout.boxes[{i}]")
            nid = b.text("id")
            if nid not in graph.nodes:
                raise ValueError(f"layout.boxes[{i}] is {nid!r}, not a node of the graph")
            _, fill, stroke, title = _style(graph.nodes[nid], graph)
            boxes[nid] = Box(nid, graph.nodes[nid].kind, b.number("x"), b.number("y"), b.number("width"),
                             b.number("height"), b.integer("layer"), fill, stroke, title)
        routes = []
        for i, item in enumerate(d.items("routes", MAX_NODES)):
            e = _Check(item, f"layout.routes[{i}]")
            points = [e.point(p, f"points[{j}]") for j, p in enumerate(e.items("points", 4 * MAX_NODES))]
            if not points or (len(points) - 1) % 3:
                raise ValueError(f"layout.routes[{i}].points must hold 3n+1 points, not {len(points)}")
            tip = e.point(e.data["tip"], "tip") if e.data.get("tip") is not None else None
            at = e.point(e.data["label_at"], "label_at") if e.data.get("label_at") is not None else None
            routes.append(Route(e.text("source"), e.text("target"), points, tip, at))
        return cls(d.choice("engine", ("dot", "plain")), d.number("width"), d.number("height"), boxes, routes)


def _round(v: float) -> float:
    return round(float(v), 2)


@dataclass(frozen=True)
class _Line:
    text: str
    size: float = SMALL
    bold: bool = False
    mono: bool = False
    color: str = SUBTLE


def _shade(share: float) -> str:
    rgb = [round(lo + (hi - lo) * share) for lo, hi in zip(BLOCK_LIGHT, BLOCK_DARK, strict=True)]
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def _style(node: GraphNode, graph: GraphData) -> tuple[list[_Line], str, str, str]:
    """A node's text lines, fill, stroke and tooltip."""
    if node.kind != "block":
        lines = [_Line(node.label, FONT_SIZE, bold=True, color=TEXT)]
        if node.shape is not None:
            lines.append(_Line(_fmt_shape(node.shape), mono=True))
        return lines, TENSOR_FILL, TENSOR_STROKE, f"{node.kind} {node.label} {_fmt_shape(node.shape)}"
    share = node.params / graph.total_params if graph.total_params else 0.0
    dark = share > 0.42
    fg, sub = ("#ffffff", "#e5edf8") if dark else (TEXT, SUBTLE)
    lines = [_Line(node.block_type, FONT_SIZE, bold=True, color=fg)]
    if node.label != node.block_type and node.label not in node.out_shapes:
        lines.insert(0, _Line(node.label, mono=True, color=sub))
    if node.details:
        lines.append(_Line(node.details, color=sub))
    used = {e.key for e in graph.edges if e.source == node.id}
    lines += [_Line(f"{key} {_fmt_shape(s)} (not read)", mono=True, color=sub) for key, s in node.out_shapes.items()
              if key not in used]
    lines.append(_Line(f"{node.params:,} params ({100 * share:.1f}%)" if node.params else "no params", color=sub))
    title = f"{node.label}: {node.block_type}, {node.params:,} parameters"
    return lines, _shade(share), BLOCK_STROKE, title


def _edge_lines(edge: GraphEdge, graph: GraphData) -> list[_Line]:
    """An edge between two blocks is labelled with its tensor (inputs and outputs show theirs in their box)."""
    if graph.nodes[edge.source].kind != "block" or graph.nodes[edge.target].kind != "block":
        return []
    return [_Line(edge.key, mono=True, color=TEXT), _Line(_fmt_shape(edge.shape), mono=True)]


def _header_lines(graph: GraphData) -> list[_Line]:
    n_blocks = len(graph.blocks)
    return [_Line(graph.title, TITLE_SIZE, bold=True, color=TEXT),
            _Line(f"{graph.total_params:,} parameters · {n_blocks} block{'s' if n_blocks != 1 else ''}")]


def lay_out(graph: GraphData, engine: str = "auto") -> Layout:
    """Lay ``graph`` out with Graphviz's ``dot`` (``engine="auto"`` where it is installed, else the plain fallback
    with a warning once; ``"dot"`` raises where it cannot run; ``"plain"`` never asks for ``dot``)."""
    if engine not in ("auto", "dot", "plain"):
        raise ValueError(f"unknown layout engine {engine!r}; valid: 'auto', 'dot', 'plain'")
    if engine == "plain":
        return _plain_layout(graph)
    dot = shutil.which("dot")
    if dot is None:
        if engine == "dot":
            raise FileNotFoundError("Graphviz's dot is not on PATH (Debian: apt-get install graphviz)")
        _warn_once("Graphviz's dot is not installed: model graphs get a plain layout (rows by depth, straight "
                   "edges). Install graphviz (Debian: apt-get install graphviz) for the good layout.")
        return _plain_layout(graph)
    try:
        return _dot_layout(graph, dot)
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError, TypeError) as err:
        if engine == "dot":
            raise
        _warn_once(f"Graphviz's dot failed ({type(err).__name__}: {str(err)[:300]}); model graphs get a plain "
                   f"layout")
        return _plain_layout(graph)


def _warn_once(message: str) -> None:
    global _dot_warned
    if not _dot_warned:
        _dot_warned = True
        warnings.warn(message, GraphvizMissingWarning, stacklevel=4)


# ---- Graphviz's dot ------------------------------------------------------------------------------------------------
def _html(text: str) -> str:
    """Text for a Graphviz HTML-like label: markup characters as entities, control characters dropped."""
    text = "".join(c if c >= " " or c == "\t" else " " for c in text)
    return escape(text, {'"': "&quot;", "'": "&#39;"})


def _html_label(lines: Sequence[_Line], align: str = "") -> str:
    br = f'<BR ALIGN="{align}"/>' if align else "<BR/>"
    parts = []
    for line in lines:
        text = _html(line.text) or " "
        if line.bold:
            text = f"<B>{text}</B>"
        face = DOT_MONO if line.mono else DOT_FONT
        parts.append(f'<FONT FACE="{face}" POINT-SIZE="{line.size:g}" COLOR="{line.color}">{text}</FONT>')
    return "<" + br.join(parts) + (br if align else "") + ">"


def _to_dot(graph: GraphData, names: Mapping[str, str]) -> str:
    out = ["digraph model {",
           f'  graph [rankdir=TB, nodesep=0.3, ranksep=0.3, pad=0, fontname="{DOT_FONT}", labelloc=t, labeljust=l, '
           f'label={_html_label(_header_lines(graph), align="LEFT")}];',
           f'  node [shape=box, style=filled, fontname="{DOT_FONT}", fontsize={FONT_SIZE}, margin="0.14,0.06", '
           f'penwidth=1.2];',
           f'  edge [fontname="{DOT_MONO}", fontsize={SMALL}, arrowsize=0.7];']
    for nid, node in graph.nodes.items():
        lines, fill, stroke, _ = _style(node, graph)
        style = "rounded,filled" if node.kind != "block" else "filled"
        out.append(f'  {names[nid]} [label={_html_label(lines)}, style="{style}", fillcolor="{fill}", '
                   f'color="{stroke}"];')
    for edge in graph.edges:
        lines = _edge_lines(edge, graph)
        label = f" [label={_html_label(lines)}]" if lines else ""
        out.append(f"  {names[edge.source]} -> {names[edge.target]}{label};")
    out.append("}")
    return "\n".join(out) + "\n"


def run_dot(dot_text: str, fmt: str = "json", dot: str | None = None, timeout: float = DOT_TIMEOUT_S) -> str:
    """Graphviz's output of ``dot_text`` in format ``fmt`` (``json``, ``svg``, ...), within ``timeout`` seconds."""
    dot = dot or shutil.which("dot")
    if dot is None:
        raise FileNotFoundError("Graphviz's dot is not on PATH (Debian: apt-get install graphviz)")
    done = subprocess.run([dot, f"-T{fmt}"], input=dot_text.encode("utf-8"), capture_output=True, timeout=timeout,
                          check=False)
    if done.returncode != 0:
        raise subprocess.SubprocessError(f"dot exited with {done.returncode}: "
                                         f"{done.stderr.decode('utf-8', 'replace').strip()[:500]}")
    return done.stdout.decode("utf-8")


def _xdot_texts(ops: Sequence[Mapping[str, Any]], place: Any) -> list[Text]:
    """The text lines of xdot drawing operations (font, colour and bold as set by the operations before each)."""
    size, face, bold, color = float(FONT_SIZE), DOT_FONT, False, TEXT
    texts = []
    for op in ops:
        kind = op.get("op")
        if kind == "F":
            size, face = float(op["size"]), str(op["face"])
        elif kind == "t":
            bold = bool(int(op["fontchar"]) & 1)
        elif kind == "c":
            color = str(op["color"])[:7]
        elif kind == "T":
            x, y = place(*op["pt"])
            anchor = {"l": "start", "c": "middle", "r": "end"}.get(str(op.get("align")), "middle")
            texts.append(Text(x, y, str(op["text"]), size, bold, "Mono" in face, color, anchor))
    return texts


def _spline(pos: str, place: Any) -> tuple[list[tuple[float, float]], tuple[float, float] | None]:
    """The Bézier points and arrow tip of an edge's ``pos`` attribute (``e,x,y p0 p1 ...``)."""
    points: list[tuple[float, float]] = []
    tip = None
    for item in pos.split(";")[0].split():
        parts = item.split(",")
        if parts[0] == "e":
            tip = place(float(parts[1]), float(parts[2]))
        elif parts[0] != "s":
            points.append(place(float(parts[0]), float(parts[1])))
    if not points or (len(points) - 1) % 3:
        raise ValueError(f"dot gave an edge path of {len(points)} points")
    return points, tip


def _dot_layout(graph: GraphData, dot: str) -> Layout:
    names = {nid: f"n{i}" for i, nid in enumerate(graph.nodes)}
    data = json.loads(run_dot(_to_dot(graph, names), "json", dot))
    x0, y0, x1, y1 = (float(v) for v in data["bb"].split(","))

    def place(x: float, y: float) -> tuple[float, float]:  # dot's y grows upwards
        return x - x0 + MARGIN, y1 - y + MARGIN

    by_name = {name: nid for nid, name in names.items()}
    gvid: dict[int, str] = {}
    boxes: dict[str, Box] = {}
    for obj in data.get("objects", []):
        nid = by_name.get(obj.get("name"))
        if nid is None:
            continue
        gvid[int(obj["_gvid"])] = nid
        cx, cy = place(*(float(v) for v in obj["pos"].split(",")))
        w, h = float(obj["width"]) * 72, float(obj["height"]) * 72
        _, fill, stroke, title = _style(graph.nodes[nid], graph)
        boxes[nid] = Box(nid, graph.nodes[nid].kind, cx, cy - h / 2, w, h, fill=fill, stroke=stroke, title=title,
                         texts=_xdot_texts(obj.get("_ldraw_", []), place))
    if set(boxes) != set(graph.nodes):
        raise ValueError("dot's output lacks some nodes")
    rows = sorted({round(b.y + b.height / 2) for b in boxes.values()})
    for b in boxes.values():
        b.layer = rows.index(round(b.y + b.height / 2))
    routes = []
    for edge in data.get("edges", []):
        points, tip = _spline(edge["pos"], place)
        at = place(*(float(v) for v in edge["lp"].split(","))) if edge.get("lp") else None
        routes.append(Route(gvid[int(edge["tail"])], gvid[int(edge["head"])], points, tip, at,
                            _xdot_texts(edge.get("_ldraw_", []), place)))
    return Layout("dot", x1 - x0 + 2 * MARGIN, y1 - y0 + 2 * MARGIN, boxes, routes,
                  _xdot_texts(data.get("_ldraw_", []), place))


# ---- the plain fallback ----------------------------------------------------------------------------------------------
def _mono_width(line: _Line) -> float:
    return MONO_ADVANCE * line.size * len(line.text)


def _plain_layout(graph: GraphData) -> Layout:
    """Rows by depth (longest path; inputs just above their first reader), each row ordered by its predecessors and
    centred; straight edges; the tensors between blocks as captions under the block that writes them; every text in
    the monospace font."""
    preds: dict[str, list[str]] = {n: [] for n in graph.nodes}
    succs: dict[str, list[str]] = {n: [] for n in graph.nodes}
    for e in graph.edges:
        succs[e.source].append(e.target)
        preds[e.target].append(e.source)
    depth: dict[str, int] = {}
    for nid in _topological(graph.nodes, preds):
        depth[nid] = max((depth[p] + 1 for p in preds[nid]), default=0)
    for nid in graph.nodes:
        if not preds[nid] and succs[nid]:
            depth[nid] = min(depth[s] for s in succs[nid]) - 1
    title, stats = _header_lines(graph)
    header = [Text(MARGIN, MARGIN + TITLE_SIZE, title.text, TITLE_SIZE, True, True, TEXT, "start"),
              Text(MARGIN, MARGIN + TITLE_SIZE + LINE, stats.text, SMALL, False, True, SUBTLE, "start")]
    captions: dict[str, dict[str, _Line]] = {nid: {} for nid in graph.nodes}  # tensor key -> caption, per writer
    for e in graph.edges:
        if _edge_lines(e, graph):
            captions[e.source].setdefault(e.key, _Line(f"{e.key} {_fmt_shape(e.shape)}", mono=True, color=TEXT))
    boxes: dict[str, Box] = {}
    foot: dict[str, tuple[float, float]] = {}  # width and height with the captions
    for nid, node in graph.nodes.items():
        lines, fill, stroke, tip = _style(node, graph)
        w = max(_mono_width(line) for line in lines) + 2 * PAD_X
        h = LINE * len(lines) + 2 * PAD_Y
        boxes[nid] = Box(nid, node.kind, 0.0, 0.0, w, h, depth[nid], fill, stroke, tip,
                         [Text(0.0, LINE * (i + 0.75) + PAD_Y, ln.text, ln.size, ln.bold, True, ln.color)
                          for i, ln in enumerate(lines)])
        caps = list(captions[nid].values())
        foot[nid] = (max([w, *(_mono_width(c) for c in caps)]), h + LINE * len(caps) + (4.0 if caps else 0.0))
    rows: list[list[Box]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for nid in graph.nodes:
        rows[depth[nid]].append(boxes[nid])
    rank: dict[str, float] = {}
    for row in rows:
        row.sort(key=lambda b: sum(rank[p] for p in preds[b.id]) / len(preds[b.id]) if preds[b.id] else -1.0)
        rank.update({b.id: float(i) for i, b in enumerate(row)})
    row_w = [sum(foot[b.id][0] for b in row) + NODE_GAP * (len(row) - 1) for row in rows]
    inner = max([*row_w, *(_mono_width(_Line(t.text, t.size)) for t in header)])
    y = MARGIN + TITLE_SIZE + LINE + 16.0
    for row, w in zip(rows, row_w, strict=True):
        x = MARGIN + (inner - w) / 2
        for b in row:
            b.x, b.y = x + foot[b.id][0] / 2, y
            b.texts = [Text(b.x, b.y + t.y, t.text, t.size, t.bold, t.mono, t.color) for t in b.texts]
            x += foot[b.id][0] + NODE_GAP
        y += max(foot[b.id][1] for b in row) + ROW_GAP
    routes = []
    drawn: set[tuple[str, str]] = set()
    for e in graph.edges:
        a, b = boxes[e.source], boxes[e.target]
        caps = list(captions[e.source])
        p0, p3 = (a.x, a.y + foot[a.id][1] if caps else a.y + a.height), (b.x, b.y)
        at, label = None, []
        if e.key in caps:
            at = (a.x, a.y + a.height + LINE * (caps.index(e.key) + 0.5))
            if (e.source, e.key) not in drawn:  # a caption once per tensor, with the first edge that carries it
                drawn.add((e.source, e.key))
                label = [Text(a.x, at[1] + 0.35 * SMALL, captions[e.source][e.key].text, SMALL, False, True, TEXT)]
        routes.append(Route(e.source, e.target, [p0, _lerp(p0, p3, 1 / 3), _lerp(p0, p3, 2 / 3), p3], None, at,
                            label))
    bottom = max((b.y + foot[b.id][1] for b in boxes.values()), default=y)
    return Layout("plain", inner + 2 * MARGIN, bottom + MARGIN, boxes, routes, header)


def _lerp(p: tuple[float, float], q: tuple[float, float], t: float) -> tuple[float, float]:
    return p[0] + (q[0] - p[0]) * t, p[1] + (q[1] - p[1]) * t


def _topological(nodes: Mapping[str, Any], preds: Mapping[str, list[str]]) -> list[str]:
    done: set[str] = set()
    order: list[str] = []
    for start in nodes:
        stack = [(start, iter(preds[start]))]
        if start in done:
            continue
        done.add(start)
        while stack:
            nid, it = stack[-1]
            nxt = next((p for p in it if p not in done), None)
            if nxt is None:
                stack.pop()
                order.append(nid)
            else:
                done.add(nxt)
                stack.append((nxt, iter(preds[nxt])))
    return order


# ---- drawing ---------------------------------------------------------------------------------------------------------
def _text_svg(t: Text, halo: bool = False) -> str:
    extra = ' font-weight="bold"' if t.bold else ""
    if halo:  # an edge label stays readable where it crosses a line
        extra += ' stroke="#ffffff" stroke-width="3" stroke-linejoin="round" paint-order="stroke"'
    return (f'<text x="{t.x:.1f}" y="{t.y:.1f}" text-anchor="{t.anchor}" font-family="{MONO if t.mono else FONT}" '
            f'font-size="{t.size:g}" fill="{t.color}"{extra}>{escape(t.text)}</text>')


def _route_svg(r: Route, marker: str) -> str:
    (x, y), rest = r.points[0], r.points[1:]
    d = f"M{x:.1f},{y:.1f}"
    for i in range(0, len(rest), 3):
        (ax, ay), (bx, by), (cx, cy) = rest[i:i + 3]
        d += f" C{ax:.1f},{ay:.1f} {bx:.1f},{by:.1f} {cx:.1f},{cy:.1f}"
    if r.tip is not None:
        d += f" L{r.tip[0]:.1f},{r.tip[1]:.1f}"
    return f'<path d="{d}" fill="none" stroke="{EDGE}" stroke-width="1.2" marker-end="url(#{marker})"/>'


def _box_svg(b: Box) -> str:
    rx = 9 if b.kind != "block" else 2
    parts = [f'<g class="node {b.kind}"><title>{escape(b.title)}</title>',
             f'<rect x="{b.x - b.width / 2:.1f}" y="{b.y:.1f}" width="{b.width:.1f}" height="{b.height:.1f}" '
             f'rx="{rx}" fill="{b.fill}" stroke="{b.stroke}" stroke-width="1.2"/>']
    parts += [_text_svg(t) for t in b.texts]
    parts.append("</g>")
    return "".join(parts)


class ModelGraph:
    """The drawable graph of one inference graph (or of one opaque network): its data, its layout and its SVG.

    Laid out by Graphviz's ``dot`` where it is installed (the good layout); otherwise by a plain fallback (rows by
    depth, straight edges), with a warning once.

    :param net: An InferenceBlock, any PerceptionBlock, or an nn.Module that contains an InferenceBlock.
    :param title: Heading of the drawing.
    :param input_shapes: For opaque modules without an InferenceBlock: input shapes used to infer the outputs.
    :param layout: ``auto`` (dot where installed), ``dot`` (an error without it) or ``plain``.
    """

    def __init__(self, net: nn.Module, title: str | None = None,
                 input_shapes: Mapping[str, Sequence[int]] | None = None, layout: str = "auto"):
        self.data = GraphData.from_network(net, title, input_shapes)
        self.layout = lay_out(self.data, layout)

    @classmethod
    def from_data(cls, data: GraphData, layout: Layout | str = "auto") -> ModelGraph:
        """The graph of ``data``, laid out anew (``layout`` an engine name) or as ``layout`` says."""
        graph = cls.__new__(cls)
        graph.data = data
        graph.layout = layout if isinstance(layout, Layout) else lay_out(data, layout)
        return graph

    @classmethod
    def from_dict(cls, data: Any) -> ModelGraph:
        """The graph and geometry of :meth:`to_dict`'s data (checked: a ValueError names what is wrong; no text)."""
        d = _Check(data, "model graph")
        if d.data.get("format") != FORMAT or d.data.get("version") != FORMAT_VERSION:
            raise ValueError(f"not a {FORMAT} of version {FORMAT_VERSION}: format {d.data.get('format')!r:.40}, "
                             f"version {d.data.get('version')!r:.20}")
        graph = GraphData.from_dict(d.data.get("graph"))
        return cls.from_data(graph, Layout.from_dict(d.data.get("layout"), graph))

    def to_dict(self) -> dict[str, Any]:
        """The graph and its geometry as JSON-able data (what a saved drawing carries in its metadata)."""
        return {"format": FORMAT, "version": FORMAT_VERSION, "graph": self.data.to_dict(),
                "layout": self.layout.to_dict()}

    def to_dot(self) -> str:
        """The graph in Graphviz's DOT language (what ``dot`` lays out)."""
        return self.data.to_dot()

    @property
    def title(self) -> str:
        """Heading of the drawing."""
        return self.data.title

    @property
    def total_params(self) -> int:
        """Parameters of the whole network."""
        return self.data.total_params

    @property
    def nodes(self) -> dict[str, Box]:
        """The laid-out nodes by id (``in:<key>``, ``b:<block name>``, ``out:<key>``)."""
        return self.layout.boxes

    @property
    def edges(self) -> list[tuple[str, str]]:
        """The edges as (source id, target id), one per tensor read."""
        return [(e.source, e.target) for e in self.data.edges]

    @property
    def width(self) -> float:
        """Width of the standalone drawing."""
        return max(self.layout.width, LEGEND_MIN_WIDTH + 2 * MARGIN)

    @property
    def height(self) -> float:
        """Height of the standalone drawing (with the legend)."""
        return self.layout.height + _legend(MARGIN, 0.0, self.width - 2 * MARGIN)[1]

    def svg_body(self, marker: str, legend: bool = True) -> list[str]:
        """The SVG elements of this graph (without the svg root), for embedding."""
        lay = self.layout
        body = [_text_svg(t) for t in lay.header]
        body += [_route_svg(r, marker) for r in lay.routes]
        body += [_box_svg(b) for b in lay.boxes.values()]
        body += [_text_svg(t, halo=True) for r in lay.routes for t in r.label]
        if legend:
            body += _legend(MARGIN, lay.height + 4.0, self.width - 2 * MARGIN)[0]
        return body

    def to_svg(self) -> str:
        """The drawing as a standalone SVG document string, its data as JSON in its ``<metadata>``."""
        marker = f"arrow{next(_svg_ids)}"
        meta = (f'<metadata id="{METADATA_ID}">'
                f'{escape(json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False))}</metadata>')
        return _document(self.width, self.height, marker, [meta, *self.svg_body(marker)])

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def save(self, path: str | Path) -> Path:
        """Write the SVG to ``path``."""
        path = Path(path)
        path.write_text(self.to_svg(), encoding="utf-8")
        return path

    def summary(self) -> str:
        """A text table of the nodes, row by row."""
        rows = [f"{self.title}: {self.total_params:,} parameters ({self.layout.engine} layout)"]
        for b in sorted(self.nodes.values(), key=lambda b: (b.layer, b.x)):
            n = self.data.nodes[b.id]
            what = (f"{n.label} {n.block_type} {n.params:,} params" if n.kind == "block"
                    else f"{n.label} {_fmt_shape(n.shape)}")
            rows.append(f"  [{b.layer:2d}] {n.kind:6s} {what}")
        return "\n".join(rows)


class ModelGraphSet:
    """Several model graphs drawn side by side (e.g. the policy and critic networks of a model).

    :param graphs: Graphs by panel title.
    :param title: Optional overall heading.
    """

    def __init__(self, graphs: Mapping[str, ModelGraph], title: str | None = None, max_row_width: float = 1900.0):
        self.graphs = dict(graphs)
        self.title = title
        self.max_row_width = max_row_width

    def __getitem__(self, name: str) -> ModelGraph:
        return self.graphs[name]

    def to_svg(self) -> str:
        """All graphs in one SVG document."""
        marker = f"arrow{next(_svg_ids)}"
        top = 36.0 if self.title else 0.0
        body: list[str] = []
        if self.title:
            body.append(_text_svg(Text(MARGIN, MARGIN + 14, self.title, 18, True, color=TEXT, anchor="start")))
        x, y, row_h, width = 0.0, top, 0.0, LEGEND_MIN_WIDTH + 2 * MARGIN
        for graph in self.graphs.values():
            w, h = graph.layout.width, graph.layout.height
            if x > 0 and x + w > self.max_row_width:
                x, y, row_h = 0.0, y + row_h, 0.0
            if x > 0:
                body.append(f'<line x1="{x:.1f}" y1="{y + 12:.1f}" x2="{x:.1f}" y2="{y + h - 12:.1f}" '
                            f'stroke="#e5e7eb" stroke-width="1"/>')
            body.append(f'<g transform="translate({x:.1f},{y:.1f})">')
            body += graph.svg_body(marker, legend=False)
            body.append("</g>")
            x += w
            width = max(width, x)
            row_h = max(row_h, h)
        legend, legend_height = _legend(MARGIN, y + row_h + 4.0, width - 2 * MARGIN)
        return _document(width, y + row_h + legend_height, marker, body + legend)

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def save(self, path: str | Path) -> Path:
        """Write the SVG to ``path``."""
        path = Path(path)
        path.write_text(self.to_svg(), encoding="utf-8")
        return path


LEGEND_LABELS = ("block (shade = share of parameters)", "input / output tensor (shape without batch dims)",
                 "tensor between blocks")
LEGEND_ROW = 22.0
"""Height of a row of the legend."""


def _legend_entries() -> list[tuple[tuple[tuple[str, str, int], ...], str]]:
    light = "#{:02x}{:02x}{:02x}".format(*BLOCK_LIGHT)
    dark = "#{:02x}{:02x}{:02x}".format(*BLOCK_DARK)
    return [(((light, BLOCK_STROKE, 2), (dark, BLOCK_STROKE, 2)), LEGEND_LABELS[0]),
            (((TENSOR_FILL, TENSOR_STROKE, 6),), LEGEND_LABELS[1]),
            ((), LEGEND_LABELS[2])]


def _legend_entry_width(swatches: tuple, label: str) -> float:
    return 20 * max(1, len(swatches)) + MONO_ADVANCE * SMALL * len(label) + 18


LEGEND_MIN_WIDTH = max(_legend_entry_width(s, label) for s, label in _legend_entries())
"""The widest entry of the legend: the narrowest a drawing gets (a narrow graph's legend wraps to more rows)."""


def _legend(x: float, y: float, max_width: float) -> tuple[list[str], float]:
    """Swatches and labels in rows no wider than ``max_width``, set in the monospace font (so that their widths are
    known); returns the SVG elements and the legend's height."""
    items: list[str] = []
    cx, row = x, 0
    for swatches, label in _legend_entries():
        if cx > x and cx - x + _legend_entry_width(swatches, label) > max_width:
            cx, row = x, row + 1
        ry = y + row * LEGEND_ROW
        for fill, stroke, rx in swatches:
            items.append(f'<rect x="{cx:.1f}" y="{ry + 8:.1f}" width="16" height="12" rx="{rx}" fill="{fill}" '
                         f'stroke="{stroke}" stroke-width="1"/>')
            cx += 20
        if not swatches:
            items.append(f'<path d="M{cx:.1f},{ry + 14:.1f} H{cx + 16:.1f}" stroke="{EDGE}" stroke-width="1.2"/>')
            cx += 20
        items.append(_text_svg(Text(cx, ry + 18, label, SMALL, mono=True, color=SUBTLE, anchor="start")))
        cx += MONO_ADVANCE * SMALL * len(label) + 18
    return items, (row + 1) * LEGEND_ROW + 12.0


def _document(width: float, height: float, marker: str, body: list[str]) -> str:
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}">'
            f'<defs><marker id={quoteattr(marker)} viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{EDGE}"/></marker></defs>'
            f'<rect width="100%" height="100%" fill="#ffffff"/>')
    return head + "\n".join(body) + "</svg>"


def find_inference_block(net: nn.Module) -> InferenceBlock | None:
    """The InferenceBlock that makes up ``net`` (itself, or the outermost one among its sub-modules)."""
    from maze_lab.perception.blocks import InferenceBlock, ShapeNormalizationBlock

    if isinstance(net, InferenceBlock):
        return net
    if isinstance(net, ShapeNormalizationBlock) and hasattr(net, "net"):
        return find_inference_block(net.net)
    queue = list(net.children())
    while queue:
        child = queue.pop(0)
        if isinstance(child, InferenceBlock):
            return child
        queue.extend(child.children())
    return None


def _infer_outputs(net: nn.Module, input_shapes: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, ...]]:
    """Output shapes of an opaque dict-to-dict module, from one forward pass on dummy input."""
    import torch

    device = next((p.device for p in net.parameters()), torch.device("cpu"))
    was_training = net.training
    net.eval()
    try:
        with torch.no_grad():
            out = net({k: torch.zeros((2, *s), device=device) for k, s in input_shapes.items()})
    except Exception:  # noqa: BLE001 - a drawing must not fail because a custom net rejects dummy input
        return {}
    finally:
        net.train(was_training)
    return {k: tuple(v.shape[1:]) for k, v in out.items()} if isinstance(out, Mapping) else {}


def composer_graphs(model: Any, layout: str = "auto") -> dict[str, ModelGraph]:
    """One graph per network of a composer, TorchActorCritic, TorchPolicy or critic."""
    from maze_lab.agent.torch_policy import TorchPolicy
    from maze_lab.agent.torch_state_action_critic import TorchStateActionCritic
    from maze_lab.agent.torch_state_critic import TorchStateCritic
    from maze_lab.perception.perception_utils import space_shapes

    obs_spaces = getattr(model, "observation_spaces_dict", None) or {}
    graphs: dict[str, ModelGraph] = {}

    def shapes_for(key: Any) -> dict[str, tuple[int, ...]] | None:
        step = getattr(key, "step_key", key)
        return space_shapes(obs_spaces[step]) if step in obs_spaces else None

    def name(prefix: str, key: Any) -> str:
        return f"{prefix}_{key.step_key}_{key.agent_id}" if hasattr(key, "agent_id") else f"{prefix}_{key}"

    if hasattr(model, "policy") and hasattr(model, "critic"):  # a composer or a TorchActorCritic: both parts
        parts = [model.policy, model.critic]
    else:
        parts = [model]
    for part in parts:
        if isinstance(part, TorchPolicy):
            for key, net in part.networks.items():
                graphs[name("policy", key)] = ModelGraph(net, title=name("policy", key).replace("_", " ", 1),
                                                         input_shapes=shapes_for(key), layout=layout)
        elif isinstance(part, TorchStateCritic):
            for key, net in part.networks.items():
                graphs[name("critic", key)] = ModelGraph(net, title=name("critic", key).replace("_", " ", 1),
                                                         input_shapes=shapes_for(key), layout=layout)
        elif isinstance(part, TorchStateActionCritic):
            for key, nets in part.networks.items():
                for i, net in enumerate(nets):
                    graphs[f"critic_{key}_q{i}"] = ModelGraph(net, title=f"critic {key} (Q network {i})",
                                                              layout=layout)
    return graphs


def model_graph(model: Any, title: str | None = None, layout: str = "auto") -> ModelGraph | ModelGraphSet:
    """The model graph of a block or network, or the set of graphs of a composer / policy / critic.

    :param layout: ``auto`` (Graphviz's dot where installed, else a plain fallback), ``dot`` or ``plain``.
    """
    from torch import nn

    if isinstance(model, nn.Module):
        return ModelGraph(model, title=title, layout=layout)
    graphs = composer_graphs(model, layout=layout)
    if not graphs:
        raise TypeError(f"cannot draw a {type(model).__name__}: give an InferenceBlock, a PerceptionBlock, an "
                        f"nn.Module, a model composer, a TorchPolicy, a critic or a TorchActorCritic")
    return ModelGraphSet(graphs, title=title)
