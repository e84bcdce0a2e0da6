"""Model graphs: SVG drawings of inference graphs and composed models laid out by Graphviz's dot (and by the plain
fallback without it), labels escaped on the way to dot and to the SVG, and a headless-Chromium rendering."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest_perception import (
    CUTTING_MASKS,
    cartpole_builder,
    cartpole_spaces,
    cutting2d_builder,
    cutting2d_masked_spaces,
    image_vector_builder,
    image_vector_spaces,
    pendulum_spaces,
)

from maze_lab.agent import graph as graph_module
from maze_lab.agent.composers import CustomModelComposer, TemplateModelComposer
from maze_lab.agent.graph import GraphvizMissingWarning, ModelGraph, ModelGraphSet, model_graph
from maze_lab.perception.blocks import DenseBlock, InferenceBlock, LinearOutputBlock

SVG = "{http://www.w3.org/2000/svg}"
CHROMIUM = "/usr/bin/chromium"
DOT = shutil.which("dot")
needs_dot = pytest.mark.skipif(DOT is None, reason="Graphviz's dot is not installed (Debian: apt-get install graphviz)")


def _composer(name: str) -> TemplateModelComposer:
    spaces, builder, kw = {
        "cartpole": (cartpole_spaces(), cartpole_builder(), {}),
        "pendulum": (pendulum_spaces(), cartpole_builder(), {}),
        "image_vector": (image_vector_spaces(), image_vector_builder(), {}),
        "cutting2d": (cutting2d_masked_spaces(), cutting2d_builder(), {"action_masks": CUTTING_MASKS}),
    }[name]
    critic = "StepStateCriticComposer" if name == "cutting2d" else "SharedStateCriticComposer"
    obs, act = spaces
    return TemplateModelComposer(act, obs, model_builder=builder, policy={"_target_": "ProbabilisticPolicyComposer"},
                                 critic={"_target_": critic}, **kw)


def _texts(svg: str) -> list[str]:
    return [t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text")]


def _boxes(svg: str) -> list[tuple[float, float, float, float, str]]:
    root = ET.fromstring(svg)
    return [(float(r.get("x")), float(r.get("y")), float(r.get("width")), float(r.get("height")), r.get("fill"))
            for g in root.iter(f"{SVG}g") for r in g.findall(f"{SVG}rect")]


@pytest.mark.parametrize("name", ["cartpole", "pendulum", "image_vector", "cutting2d"])
def test_composer_graph_svgs(name: str, tmp_path: Path) -> None:
    comp = _composer(name)
    graph = comp.graph()
    assert isinstance(graph, ModelGraphSet)
    svg = graph.to_svg()
    texts = _texts(svg)
    for panel in graph.graphs:
        assert panel.replace("_", " ", 1) in texts
    assert "LinearOutputBlock" in texts and "value" in texts
    net = comp.policy.networks[next(iter(comp.policy.networks))]
    for key, shape in net.tensor_shapes().items():
        assert key in texts
        assert "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")" in texts
    assert graph._repr_svg_().startswith("<svg")
    paths = comp.save_graphs(tmp_path)
    assert sorted(p.name for p in paths) == sorted(f"{k}.svg" for k in graph.graphs)
    for p in paths:
        ET.fromstring(p.read_text())


def test_cutting2d_graph_shows_masking() -> None:
    graph = _composer("cutting2d").graph()
    texts = _texts(graph["policy_selection"].to_svg())
    assert {"ActionMaskingBlock", "inventory_mask", "piece_idx_logits", "piece_idx"} <= set(texts)
    assert "masked by inventory_mask (0 = not allowed)" in texts
    assert set(graph.graphs) == {"policy_selection", "policy_cutting", "critic_selection", "critic_cutting"}


def test_block_shade_follows_parameter_share() -> None:
    net = InferenceBlock("x", "y", (8,), {
        "big": DenseBlock("x", "big", (8,), hidden_units=[64, 64]),
        "small": LinearOutputBlock("big", "y", (64,), output_units=1),
    })
    graph = ModelGraph(net, title="shades")
    blocks = {n.id: n for n in graph.nodes.values() if n.kind == "block"}

    def darkness(fill: str) -> int:
        return -sum(int(fill[i:i + 2], 16) for i in (1, 3, 5))

    assert darkness(blocks["b:big"].fill) > darkness(blocks["b:small"].fill)
    texts = _texts(graph.to_svg())
    big_params = sum(p.numel() for p in net.perception_dict["big"].parameters())
    total = sum(p.numel() for p in net.parameters())
    assert f"{big_params:,} params ({100 * big_params / total:.1f}%)" in texts
    assert f"{total:,} parameters · 2 blocks" in texts


def test_layout_has_no_overlaps_and_fits() -> None:
    graph = _composer("cutting2d").graph()["policy_selection"]
    boxes = [n for n in graph.nodes.values() if n.kind != "dummy"]
    for a in boxes:
        assert a.x - a.width / 2 >= 0 and a.x + a.width / 2 <= graph.width
        assert a.y >= 0 and a.y + a.height <= graph.height
        for b in boxes:
            if a is not b and a.layer == b.layer:
                assert abs(a.x - b.x) >= (a.width + b.width) / 2, (a.id, b.id)
    # data flows downwards: every edge starts above where it ends
    for src, dst in graph.edges:
        assert graph.nodes[src].y < graph.nodes[dst].y


def test_graph_of_single_blocks_and_plain_networks(tmp_path: Path) -> None:
    block = DenseBlock("obs", "h", (4,), hidden_units=[8])
    svg = model_graph(block).save(tmp_path / "block.svg").read_text()
    assert {"obs", "h", "DenseBlock", "(8,)"} <= set(_texts(svg))
    obs, act = cartpole_spaces()
    comp = CustomModelComposer(act, obs, policy={"_target_": "ProbabilisticPolicyComposer",
                                                 "networks": [{"_target_": "test_models.PlainPolicyNet", "hidden": 4}]},
                               critic=None)
    texts = _texts(model_graph(comp, title="plain").to_svg())
    assert "PlainPolicyNet" in _texts(model_graph(comp.policy).to_svg())  # without spaces: an opaque box
    assert {"plain", "PlainPolicyNet", "observation", "action", "(2,)"} <= set(texts)
    with pytest.raises(TypeError, match="cannot draw a str"):
        model_graph("not a model")


def test_a_narrow_graph_makes_a_narrow_drawing_its_legend_wrapped() -> None:
    """A chain of blocks was drawn 876 px wide, the legend's one row setting the width; the legend now wraps."""
    from maze_lab.agent.graph import LEGEND_MIN_WIDTH, MARGIN

    block = DenseBlock("obs", "h", (4,), hidden_units=[8])
    graph = model_graph(block)
    root = ET.fromstring(graph.to_svg())
    width, height = float(root.get("width")), float(root.get("height"))
    assert width <= max(graph.layout.width, LEGEND_MIN_WIDTH + 2 * MARGIN) + 1 < 500
    legend = [t for t in root.iter("{http://www.w3.org/2000/svg}text") if "tensor between blocks" in (t.text or "")
              or "block (shade" in (t.text or "")]
    assert len(legend) == 2 and len({t.get("y") for t in legend}) == 2  # on rows of their own
    assert all(float(t.get("y")) < height for t in legend)


@pytest.mark.browser
def test_render_graph_png_in_headless_chromium(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        pytest.skip(f"{CHROMIUM} is not installed")
    playwright = pytest.importorskip("playwright.sync_api")
    svg = _composer("cutting2d").graph().to_svg()
    width, height = (int(float(v)) for v in re.search(r'width="([\d.]+)" height="([\d.]+)"', svg).groups())
    png = tmp_path / "cutting2d_model.png"
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu",
                                                                    "--disable-background-networking"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_content(f"<html><body style='margin:0'>{svg}</body></html>")
            box = page.locator("svg").bounding_box()
            page.screenshot(path=str(png), timeout=30000)
        finally:
            browser.close()
    assert box is not None and abs(box["width"] - width) < 2 and abs(box["height"] - height) < 2
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    png_w, png_h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (png_w, png_h) == (width, height)
    assert len(data) > 20000  # a blank page compresses to a few hundred bytes


# ---- the layout engines ---------------------------------------------------------------------------------------------
def _node_rects(svg: str) -> list[tuple[float, float, float, float]]:
    """Centre x, centre y, width and height of each node's box, in drawing order."""
    root = ET.fromstring(svg)
    rects = [g.find(f"{SVG}rect") for g in root.iter(f"{SVG}g") if "node" in (g.get("class") or "").split()]
    return [(float(r.get("x")) + float(r.get("width")) / 2, float(r.get("y")) + float(r.get("height")) / 2,
             float(r.get("width")), float(r.get("height"))) for r in rects]


@needs_dot
def test_svg_comes_from_dots_layout() -> None:
    graph = _composer("cutting2d").graph()["policy_selection"]
    assert graph.layout.engine == "dot"
    dot_text = graph.to_dot()
    ids = list(graph.data.nodes)
    # the DOT text holds every node and every edge of the data
    assert len(re.findall(r"^  n\d+ \[label=", dot_text, re.M)) == len(ids)
    declared = [f"n{ids.index(e.source)} -> n{ids.index(e.target)}" for e in graph.data.edges]
    assert [m for m in re.findall(r"^  (n\d+ -> n\d+)", dot_text, re.M)] == declared
    # the boxes of the SVG are where dot puts the nodes (up to one translation; dot's y grows upwards)
    out = json.loads(subprocess.run([DOT, "-Tjson"], input=dot_text, capture_output=True, text=True, check=True,
                                    timeout=60).stdout)
    placed = {o["name"]: o for o in out["objects"] if "pos" in o}
    rects = _node_rects(graph.to_svg())
    assert len(rects) == len(ids)
    x0, y0 = (float(v) for v in placed["n0"]["pos"].split(","))
    for i, (cx, cy, w, h) in enumerate(rects):
        x, y = (float(v) for v in placed[f"n{i}"]["pos"].split(","))
        assert cx - rects[0][0] == pytest.approx(x - x0, abs=0.1)
        assert cy - rects[0][1] == pytest.approx(y0 - y, abs=0.1)
        assert (w, h) == pytest.approx((float(placed[f"n{i}"]["width"]) * 72, float(placed[f"n{i}"]["height"]) * 72),
                                       abs=0.1)
    # and each edge is drawn along dot's spline, its tensor label where dot put it
    texts = _texts(graph.to_svg())
    assert texts.count("concat") == 1 and "piece_idx_logits" in texts
    assert len(graph.layout.routes) == len(graph.data.edges)


def test_fallback_without_dot_draws_every_node_and_edge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot here
    monkeypatch.setattr(graph_module, "_dot_warned", False)
    comp = _composer("cutting2d")
    with pytest.warns(GraphvizMissingWarning, match="apt-get install graphviz"):
        graph = comp.graph()
    with warnings.catch_warnings(record=True) as later:
        warnings.simplefilter("always")
        comp.graph()
    assert not [w for w in later if issubclass(w.category, GraphvizMissingWarning)]  # warned once
    with pytest.raises(FileNotFoundError, match="dot is not on PATH"):
        ModelGraph(comp.policy.networks["selection"], layout="dot")
    panel = graph["policy_selection"]
    assert panel.layout.engine == "plain"
    svg = panel.to_svg()
    rects = _node_rects(svg)
    assert len(rects) == len(panel.data.nodes)
    paths = [p for p in ET.fromstring(svg).iter(f"{SVG}path") if p.get("marker-end")]
    assert len(paths) == len(panel.data.edges) == len(panel.edges)
    for route, (src, dst) in zip(panel.layout.routes, panel.edges, strict=True):
        a, b = panel.nodes[src], panel.nodes[dst]
        assert route.points[0][0] == pytest.approx(a.x) and route.points[0][1] >= a.y + a.height
        assert route.points[-1] == pytest.approx((b.x, b.y))
    texts = _texts(svg)
    net = comp.policy.networks["selection"]
    for key, shape in net.tensor_shapes().items():
        shape_text = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
        assert key in texts or f"{key} {shape_text}" in texts  # a tensor between blocks: a caption
    assert "masked by inventory_mask (0 = not allowed)" in texts
    _assert_no_overlaps(panel)


def _assert_no_overlaps(graph: ModelGraph) -> None:
    boxes = list(graph.nodes.values())
    for a in boxes:
        assert a.x - a.width / 2 >= 0 and a.x + a.width / 2 <= graph.width
        assert a.y >= 0 and a.y + a.height <= graph.height
        for b in boxes:
            if a is not b and a.layer == b.layer:
                assert abs(a.x - b.x) >= (a.width + b.width) / 2, (a.id, b.id)
    for src, dst in graph.edges:
        assert graph.nodes[src].y < graph.nodes[dst].y


@pytest.mark.parametrize("layout", ["auto", "plain"])
def test_labels_with_markup_characters_are_escaped(layout: str) -> None:
    key, name, title = 'obs <x> & "y"', 'h<1> & "2"', 'net </text> & "quotes"'
    net = InferenceBlock(key, "out", (4,), {name: DenseBlock(key, name, (4,), hidden_units=[8]),
                                            "out": LinearOutputBlock(name, "out", (8,), output_units=2)})
    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphvizMissingWarning)  # dot, where installed, takes these labels
        graph = ModelGraph(net, title=title, layout=layout)
    assert graph.layout.engine == ("dot" if layout == "auto" and DOT else "plain")
    dot_text = graph.to_dot()
    assert "&lt;x&gt; &amp; &quot;y&quot;" in dot_text and "h&lt;1&gt; &amp; &quot;2&quot;" in dot_text
    assert "<x>" not in dot_text and "</text>" not in dot_text
    svg = graph.to_svg()
    texts = _texts(svg)  # the document parses, and the texts read back as they were
    assert {title, key, "DenseBlock", "(4,)"} <= set(texts) and any(name in t for t in texts)
    meta = ET.fromstring(svg).find(f"{SVG}metadata")
    again = ModelGraph.from_dict(json.loads(meta.text))
    assert [n.label for n in again.data.nodes.values()] == [n.label for n in graph.data.nodes.values()]
    assert again.title == title and again.edges == graph.edges
