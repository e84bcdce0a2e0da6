"""Model graphs: blocks and tensors of an inference graph, laid out and drawn as SVG by this module alone.

Blocks are blue boxes whose shade shows their share of the model's parameters; tensors are red boxes with their
shape (without batch dims). The layout is a layered (Sugiyama-style) drawing: longest-path layering, dummy
nodes on long edges, barycenter ordering and least-squares placement of nodes within their layers.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import torch
from torch import nn

from maze_lab.perception.blocks import InferenceBlock, PerceptionBlock, ShapeNormalizationBlock

FONT = "DejaVu Sans, Verdana, Arial, Helvetica, sans-serif"
MONO = "DejaVu Sans Mono, Menlo, Consolas, monospace"
FONT_SIZE = 12.0
SMALL = 10.5
LINE = 15.0
PAD_X = 12.0
PAD_Y = 8.0
LAYER_GAP = 34.0
NODE_GAP = 22.0
DUMMY_WIDTH = 6.0
MARGIN = 20.0

BLOCK_LIGHT = (234, 242, 251)
BLOCK_DARK = (31, 78, 153)
BLOCK_STROKE = "#2b5797"
TENSOR_FILL = "#fde4e1"
TENSOR_STROKE = "#c9453b"
TENSOR_IO_FILL = "#f9c8c2"
EDGE = "#6b7280"
TEXT = "#1f2937"
SUBTLE = "#4b5563"

_svg_ids = itertools.count()


def _text_width(text: str, size: float, mono: bool = False, bold: bool = False) -> float:
    """Approximate rendered width of a text line (DejaVu metrics: wide sans, 0.6em mono)."""
    if mono:
        return 0.602 * size * len(text)
    wide = sum(1 for c in text if c in "mwMW@%")
    narrow = sum(1 for c in text if c in "iljtfr.,:;'|!()[] ")
    per = 0.67 if bold else 0.61
    return size * (per * (len(text) - wide - narrow) + 0.9 * wide + 0.36 * narrow)


def _fmt_shape(shape: Sequence[int]) -> str:
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


@dataclass
class _Node:
    id: str
    kind: str  # "block", "tensor" or "dummy"
    lines: list[tuple[str, float, bool, bool, str]] = field(default_factory=list)  # text, size, bold, mono, color
    fill: str = "#ffffff"
    stroke: str = "#000000"
    width: float = DUMMY_WIDTH
    height: float = 0.0
    layer: int = 0
    order: float = 0.0
    x: float = 0.0  # center
    y: float = 0.0  # top
    title: str = ""

    def fit(self) -> None:
        """Size the box to its text."""
        if self.kind == "dummy":
            return
        self.width = max(_text_width(t, s, m, b) for t, s, b, m, _ in self.lines) + 2 * PAD_X
        self.height = LINE * len(self.lines) + 2 * PAD_Y - 2


class ModelGraph:
    """The drawable graph of one inference graph (or of one opaque network).

    :param net: An InferenceBlock, any PerceptionBlock, or an nn.Module that contains an InferenceBlock.
    :param title: Heading of the drawing.
    :param input_shapes: For opaque modules without an InferenceBlock: input shapes used to infer the outputs.
    """

    def __init__(self, net: nn.Module, title: str | None = None,
                 input_shapes: Mapping[str, Sequence[int]] | None = None):
        self.title = title or type(net).__name__
        self.nodes: dict[str, _Node] = {}
        self.edges: list[tuple[str, str]] = []
        self.total_params = sum(p.numel() for p in net.parameters())
        inference = find_inference_block(net)
        if inference is not None:
            self._from_inference_block(inference)
        elif isinstance(net, PerceptionBlock):
            self._from_single_block(net, dict(zip(net.in_keys, net.in_shapes, strict=True)), net.out_shapes_dict())
        else:
            outputs = _infer_outputs(net, input_shapes) if input_shapes else {}
            self._from_single_block(net, dict(input_shapes or {}), outputs)
        self._layout()

    # ---- graph construction ------------------------------------------------------------------------------

    def _tensor(self, key: str, shape: Sequence[int] | None, io: bool) -> None:
        lines = [(key, FONT_SIZE, True, False, TEXT)]
        if shape is not None:
            lines.append((_fmt_shape(shape), SMALL, False, True, SUBTLE))
        self.nodes[f"t:{key}"] = _Node(f"t:{key}", "tensor", lines, TENSOR_IO_FILL if io else TENSOR_FILL,
                                       TENSOR_STROKE, title=f"tensor {key} {_fmt_shape(shape or ())}")

    def _block(self, name: str, block: nn.Module) -> None:
        params = sum(p.numel() for p in block.parameters())
        share = params / self.total_params if self.total_params else 0.0
        rgb = [round(lo + (hi - lo) * share) for lo, hi in zip(BLOCK_LIGHT, BLOCK_DARK, strict=True)]
        fg = "#ffffff" if share > 0.42 else TEXT
        sub = "#e5edf8" if share > 0.42 else SUBTLE
        lines = [(type(block).__name__, FONT_SIZE, True, False, fg)]
        out_keys = getattr(block, "out_keys", [])
        if name != type(block).__name__ and name not in out_keys:
            lines.insert(0, (name, SMALL, False, True, sub))
        detail = _block_detail(block)
        if detail:
            lines.append((detail, SMALL, False, False, sub))
        lines.append((f"{params:,} params ({100 * share:.1f}%)" if params else "no params", SMALL, False, False, sub))
        self.nodes[f"b:{name}"] = _Node(f"b:{name}", "block", lines, "#{:02x}{:02x}{:02x}".format(*rgb),
                                        BLOCK_STROKE, title=f"{name}: {type(block).__name__}, {params:,} parameters")

    def _from_inference_block(self, net: InferenceBlock) -> None:
        shapes = net.tensor_shapes()
        for key in net.in_keys:
            self._tensor(key, shapes[key], io=True)
        for names in net.execution_plan.values():
            for name in names:
                block = net.perception_dict[name]
                self._block(name, block)
                for key in block.in_keys:
                    self.edges.append((f"t:{key}", f"b:{name}"))
                for key in block.out_keys:
                    self._tensor(key, shapes[key], io=key in net.out_keys)
                    self.edges.append((f"b:{name}", f"t:{key}"))

    def _from_single_block(self, block: nn.Module, inputs: Mapping[str, Sequence[int]],
                           outputs: Mapping[str, Sequence[int]]) -> None:
        name = type(block).__name__
        self._block(name, block)
        for key, shape in inputs.items():
            self._tensor(key, shape, io=True)
            self.edges.append((f"t:{key}", f"b:{name}"))
        for key, shape in outputs.items():
            self._tensor(key, shape, io=True)
            self.edges.append((f"b:{name}", f"t:{key}"))

    # ---- layout -------------------------------------------------------------------------------------------

    def _layout(self) -> None:
        for node in self.nodes.values():
            node.fit()
        preds: dict[str, list[str]] = {n: [] for n in self.nodes}
        succs: dict[str, list[str]] = {n: [] for n in self.nodes}
        for a, b in self.edges:
            succs[a].append(b)
            preds[b].append(a)
        # longest-path layering in insertion (= execution) order, then pull sources down next to their users
        for nid in self._topological(preds):
            self.nodes[nid].layer = max((self.nodes[p].layer + 1 for p in preds[nid]), default=0)
        for nid, node in self.nodes.items():
            if not preds[nid] and succs[nid]:
                node.layer = min(self.nodes[s].layer for s in succs[nid]) - 1
        # split long edges with dummy nodes
        self.paths: list[list[str]] = []
        dummy_id = itertools.count()
        for a, b in self.edges:
            path = [a]
            for layer in range(self.nodes[a].layer + 1, self.nodes[b].layer):
                d = _Node(f"d:{next(dummy_id)}", "dummy", layer=layer)
                self.nodes[d.id] = d
                path.append(d.id)
            path.append(b)
            self.paths.append(path)
        self._order_layers()
        self._place_x()
        self._place_y()

    def _topological(self, preds: Mapping[str, list[str]]) -> list[str]:
        done: set[str] = set()
        order: list[str] = []

        def visit(n: str) -> None:
            if n in done:
                return
            done.add(n)
            for p in preds[n]:
                visit(p)
            order.append(n)

        for n in self.nodes:
            visit(n)
        return order

    def _adjacency(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        up: dict[str, list[str]] = {n: [] for n in self.nodes}
        down: dict[str, list[str]] = {n: [] for n in self.nodes}
        for path in self.paths:
            for a, b in itertools.pairwise(path):
                down[a].append(b)
                up[b].append(a)
        return up, down

    def _layers(self) -> list[list[_Node]]:
        n_layers = max(n.layer for n in self.nodes.values()) + 1
        layers: list[list[_Node]] = [[] for _ in range(n_layers)]
        for node in self.nodes.values():
            layers[node.layer].append(node)
        for layer in layers:
            layer.sort(key=lambda n: n.order)
        return layers

    def _crossings(self, layers: list[list[_Node]], down: Mapping[str, list[str]]) -> int:
        total = 0
        for layer in layers[:-1]:
            pos = {n.id: i for i, n in enumerate(layer)}
            segs = [(pos[n.id], self.nodes[s].order) for n in layer for s in down[n.id]]
            total += sum(1 for (a1, b1), (a2, b2) in itertools.combinations(segs, 2) if (a1 - a2) * (b1 - b2) < 0)
        return total

    def _order_layers(self) -> None:
        up, down = self._adjacency()
        for i, node in enumerate(self.nodes.values()):
            node.order = float(i)
        layers = self._layers()
        for layer in layers:
            for i, n in enumerate(layer):
                n.order = float(i)
        best = {n.id: n.order for n in self.nodes.values()}
        best_cross = self._crossings(layers, down)
        for sweep in range(12):
            seq = layers[1:] if sweep % 2 == 0 else list(reversed(layers[:-1]))
            nbrs = up if sweep % 2 == 0 else down
            for layer in seq:
                for n in layer:
                    ns = nbrs[n.id]
                    if ns:
                        n.order = sum(self.nodes[m].order for m in ns) / len(ns) + 1e-3 * n.order
                layer.sort(key=lambda n: n.order)
                for i, n in enumerate(layer):
                    n.order = float(i)
            cross = self._crossings(layers, down)
            if cross < best_cross:
                best_cross = cross
                best = {n.id: n.order for n in self.nodes.values()}
        for nid, order in best.items():
            self.nodes[nid].order = order

    @staticmethod
    def _fit_row(layer: list[_Node], desired: list[float], weights: list[float] | None = None) -> None:
        """Weighted least-squares positions close to ``desired`` keeping order and spacing (isotonic regression)."""
        offsets = [0.0]
        for a, b in itertools.pairwise(layer):
            offsets.append(offsets[-1] + a.width / 2 + b.width / 2 + (NODE_GAP if a.kind != "dummy" or
                                                                      b.kind != "dummy" else 8.0))
        targets = [d - o for d, o in zip(desired, offsets, strict=True)]
        blocks: list[list[float]] = []  # [mean, weight, count]
        for t, w in zip(targets, weights or [1.0] * len(targets), strict=True):
            blocks.append([t, w, 1])
            while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
                m2, w2, c2 = blocks.pop()
                m1, w1, c1 = blocks.pop()
                blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
        values = [m for m, _, c in blocks for _ in range(int(c))]
        for node, v, o in zip(layer, values, offsets, strict=True):
            node.x = v + o

    def _place_x(self) -> None:
        up, down = self._adjacency()
        layers = self._layers()
        widest = max(layers, key=lambda lay: sum(n.width for n in lay))
        self._fit_row(widest, [0.0] * len(widest))
        for layer in layers:
            if layer is not widest:
                self._fit_row(layer, [0.0] * len(layer))
        for sweep in range(28):
            # later sweeps also pull the dummy nodes of each long edge onto one vertical line
            chain = self._chain_targets() if sweep >= 8 else {}
            order = layers if sweep % 2 == 0 else list(reversed(layers))
            for layer in order:
                desired, weights = [], []
                for n in layer:
                    if n.id in chain:
                        desired.append(chain[n.id])
                        weights.append(8.0)
                        continue
                    ns = up[n.id] + down[n.id] if sweep >= 12 else (up[n.id] if sweep % 2 == 0 else down[n.id])
                    ns = ns or up[n.id] + down[n.id]
                    desired.append(sum(self.nodes[m].x for m in ns) / len(ns) if ns else n.x)
                    weights.append(1.0)
                self._fit_row(layer, desired, weights)
        min_x = min(n.x - n.width / 2 for n in self.nodes.values())
        for n in self.nodes.values():
            n.x += MARGIN - min_x

    def _chain_targets(self) -> dict[str, float]:
        """Common x for each vertical chain: nodes linked one-to-one (single out-edge into a single in-edge)."""
        up, down = self._adjacency()
        parent: dict[str, str] = {}

        def find(a: str) -> str:
            while parent.get(a, a) != a:
                a = parent[a]
            return a

        for a, outs in down.items():
            if len(outs) == 1 and len(up[outs[0]]) == 1:
                parent[find(outs[0])] = find(a)
        groups: dict[str, list[_Node]] = {}
        for nid in self.nodes:
            groups.setdefault(find(nid), []).append(self.nodes[nid])
        targets: dict[str, float] = {}
        for members in groups.values():
            if len(members) > 1:
                mean_x = sum(n.x for n in members) / len(members)
                targets.update({n.id: mean_x for n in members})
        return targets

    def _place_y(self) -> None:
        self.top = MARGIN + 34.0
        y = self.top
        for layer in self._layers():
            h = max((n.height for n in layer), default=0.0)
            for n in layer:
                n.y = y + (h - n.height) / 2 if n.kind != "dummy" else y
                if n.kind == "dummy":
                    n.height = h
            y += h + LAYER_GAP
        self.width = max(n.x + n.width / 2 for n in self.nodes.values()) + MARGIN
        self.width = max(self.width, _text_width(self.title, 15, bold=True) + 2 * MARGIN, 330.0)
        self.height = y - LAYER_GAP + 60.0

    # ---- drawing ------------------------------------------------------------------------------------------

    def _ports(self) -> dict[tuple[str, int], float]:
        """x of each edge end on its node: edges fan out along the box in the order of their other ends."""
        ports: dict[tuple[str, int], float] = {}
        outs: dict[str, list[tuple[float, int]]] = {}
        ins: dict[str, list[tuple[float, int]]] = {}
        for i, path in enumerate(self.paths):
            outs.setdefault(path[0], []).append((self.nodes[path[1]].x, i))
            ins.setdefault(path[-1], []).append((self.nodes[path[-2]].x, i))
        for side, groups in ((0, outs), (1, ins)):
            for nid, items in groups.items():
                node = self.nodes[nid]
                items.sort()
                span = min(node.width * 0.6, 24.0 * (len(items) - 1))
                for j, (_, i) in enumerate(items):
                    off = 0.0 if len(items) == 1 else -span / 2 + span * j / (len(items) - 1)
                    ports[(nid, i * 2 + side)] = node.x + off
        return ports

    def _edges_svg(self, marker: str) -> list[str]:
        out = []
        ports = self._ports()
        for i, path in enumerate(self.paths):
            pts = []
            a = self.nodes[path[0]]
            pts.append((ports[(a.id, i * 2)], a.y + a.height))
            for nid in path[1:-1]:
                d = self.nodes[nid]
                pts.append((d.x, d.y))
                pts.append((d.x, d.y + d.height))
            b = self.nodes[path[-1]]
            pts.append((ports[(b.id, i * 2 + 1)], b.y - 2.0))
            d = f"M{pts[0][0]:.1f},{pts[0][1]:.1f}"
            for (x0, y0), (x1, y1) in itertools.pairwise(pts):
                if abs(x1 - x0) < 0.5:
                    d += f" L{x1:.1f},{y1:.1f}"
                else:
                    my = (y0 + y1) / 2
                    d += f" C{x0:.1f},{my:.1f} {x1:.1f},{my:.1f} {x1:.1f},{y1:.1f}"
            out.append(f'<path d="{d}" fill="none" stroke="{EDGE}" stroke-width="1.3" marker-end="url(#{marker})"/>')
        return out

    def _node_svg(self, n: _Node) -> str:
        x0 = n.x - n.width / 2
        rx = 10 if n.kind == "tensor" else 3
        parts = [f'<g><title>{escape(n.title)}</title>',
                 f'<rect x="{x0:.1f}" y="{n.y:.1f}" width="{n.width:.1f}" height="{n.height:.1f}" rx="{rx}" '
                 f'fill="{n.fill}" stroke="{n.stroke}" stroke-width="1.2"/>']
        ty = n.y + PAD_Y + LINE * 0.5
        for text, size, bold, mono, color in n.lines:
            weight = ' font-weight="bold"' if bold else ""
            family = MONO if mono else FONT
            parts.append(f'<text x="{n.x:.1f}" y="{ty:.1f}" text-anchor="middle" dominant-baseline="central" '
                         f'font-family="{family}" font-size="{size}"{weight} fill="{color}">{escape(text)}</text>')
            ty += LINE
        parts.append("</g>")
        return "".join(parts)

    def svg_body(self, marker: str, legend: bool = True) -> list[str]:
        """The SVG elements of this graph (without the svg root), for embedding."""
        body = [f'<text x="{MARGIN}" y="{MARGIN + 12}" font-family="{FONT}" font-size="15" font-weight="bold" '
                f'fill="{TEXT}">{escape(self.title)}</text>',
                f'<text x="{MARGIN}" y="{MARGIN + 28}" font-family="{FONT}" font-size="{SMALL}" fill="{SUBTLE}">'
                f'{self.total_params:,} parameters · {sum(1 for n in self.nodes.values() if n.kind == "block")} '
                f'blocks</text>']
        body += self._edges_svg(marker)
        body += [self._node_svg(n) for n in self.nodes.values() if n.kind != "dummy"]
        if legend:
            body += _legend(MARGIN, self.height - 30)
        return body

    def to_svg(self) -> str:
        """The drawing as a standalone SVG document string."""
        marker = f"arrow{next(_svg_ids)}"
        return _document(max(self.width, LEGEND_WIDTH + 2 * MARGIN), self.height, marker, self.svg_body(marker))

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def save(self, path: str | Path) -> Path:
        """Write the SVG to ``path``."""
        path = Path(path)
        path.write_text(self.to_svg(), encoding="utf-8")
        return path

    def summary(self) -> str:
        """A text table of the blocks and tensors."""
        rows = [f"{self.title}: {self.total_params:,} parameters"]
        for n in sorted(self.nodes.values(), key=lambda n: (n.layer, n.x)):
            if n.kind != "dummy":
                rows.append(f"  [{n.layer:2d}] {n.kind:6s} " + " | ".join(t for t, *_ in n.lines))
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
            body.append(f'<text x="{MARGIN}" y="{MARGIN + 14}" font-family="{FONT}" font-size="18" '
                        f'font-weight="bold" fill="{TEXT}">{escape(self.title)}</text>')
        x, y, row_h, width = 0.0, top, 0.0, LEGEND_WIDTH + 2 * MARGIN
        for graph in self.graphs.values():
            if x > 0 and x + graph.width > self.max_row_width:
                x, y, row_h = 0.0, y + row_h, 0.0
            if x > 0:
                body.append(f'<line x1="{x:.1f}" y1="{y + 12:.1f}" x2="{x:.1f}" y2="{y + graph.height - 12:.1f}" '
                            f'stroke="#e5e7eb" stroke-width="1"/>')
            body.append(f'<g transform="translate({x:.1f},{y:.1f})">')
            body += graph.svg_body(marker, legend=False)
            body.append("</g>")
            x += graph.width
            width = max(width, x)
            row_h = max(row_h, graph.height - 30.0)
        body += _legend(MARGIN, y + row_h)
        return _document(width, y + row_h + 30.0, marker, body)

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def save(self, path: str | Path) -> Path:
        """Write the SVG to ``path``."""
        path = Path(path)
        path.write_text(self.to_svg(), encoding="utf-8")
        return path


LEGEND_LABELS = ("block (shade = share of parameters)", "tensor (shape without batch dims)")
LEGEND_WIDTH = 3 * 20 + sum(_text_width(label, SMALL) + 18 for label in LEGEND_LABELS)


def _legend(x: float, y: float) -> list[str]:
    items = []
    cx = x
    for fill, stroke, rx, label in ((f"#{BLOCK_LIGHT[0]:02x}{BLOCK_LIGHT[1]:02x}{BLOCK_LIGHT[2]:02x}", BLOCK_STROKE, 2,
                                     None),
                                    (f"#{BLOCK_DARK[0]:02x}{BLOCK_DARK[1]:02x}{BLOCK_DARK[2]:02x}", BLOCK_STROKE, 2,
                                     LEGEND_LABELS[0]),
                                    (TENSOR_FILL, TENSOR_STROKE, 6, LEGEND_LABELS[1])):
        items.append(f'<rect x="{cx:.1f}" y="{y:.1f}" width="16" height="12" rx="{rx}" fill="{fill}" '
                     f'stroke="{stroke}" stroke-width="1"/>')
        cx += 20
        if label:
            items.append(f'<text x="{cx:.1f}" y="{y + 10:.1f}" font-family="{FONT}" font-size="{SMALL}" '
                         f'fill="{SUBTLE}">{escape(label)}</text>')
            cx += _text_width(label, SMALL) + 18
    return items


def _document(width: float, height: float, marker: str, body: list[str]) -> str:
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}">'
            f'<defs><marker id="{marker}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
            f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{EDGE}"/></marker></defs>'
            f'<rect width="100%" height="100%" fill="#ffffff"/>')
    return head + "\n".join(body) + "</svg>"


def find_inference_block(net: nn.Module) -> InferenceBlock | None:
    """The InferenceBlock that makes up ``net`` (itself, or the outermost one among its sub-modules)."""
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


def composer_graphs(model: Any) -> dict[str, ModelGraph]:
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
                                                         input_shapes=shapes_for(key))
        elif isinstance(part, TorchStateCritic):
            for key, net in part.networks.items():
                graphs[name("critic", key)] = ModelGraph(net, title=name("critic", key).replace("_", " ", 1),
                                                         input_shapes=shapes_for(key))
        elif isinstance(part, TorchStateActionCritic):
            for key, nets in part.networks.items():
                for i, net in enumerate(nets):
                    graphs[f"critic_{key}_q{i}"] = ModelGraph(net, title=f"critic {key} (Q network {i})")
    return graphs


def model_graph(model: Any, title: str | None = None) -> ModelGraph | ModelGraphSet:
    """The model graph of a block or network, or the set of graphs of a composer / policy / critic."""
    if isinstance(model, nn.Module):
        return ModelGraph(model, title=title)
    graphs = composer_graphs(model)
    if not graphs:
        raise TypeError(f"cannot draw a {type(model).__name__}: give an InferenceBlock, a PerceptionBlock, an "
                        f"nn.Module, a model composer, a TorchPolicy, a critic or a TorchActorCritic")
    return ModelGraphSet(graphs, title=title)
