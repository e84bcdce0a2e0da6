"""Model graphs: SVG drawings of inference graphs and composed models, and a headless-Chromium rendering."""

from __future__ import annotations

import re
import shutil
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

from maze_lab.agent.composers import CustomModelComposer, TemplateModelComposer
from maze_lab.agent.graph import ModelGraph, ModelGraphSet, model_graph
from maze_lab.perception.blocks import DenseBlock, InferenceBlock, LinearOutputBlock

SVG = "{http://www.w3.org/2000/svg}"
CHROMIUM = "/usr/bin/chromium"


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
