"""ModelGraphView on real runs: the graphs of a finished run directory (CartPole, structured Cutting-2D), of a live
run, of a failed run, and from the live model where the drawings are missing; of each drawing only the graph data it
carries is read, and checked."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import gymnasium as gym
import pytest
from run_utils import TINY

from maze_lab.core.log_stats.writers import StatsStore
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.run.run_context import RunContext, RunFailedError
from maze_lab.widgets.model_graph import ModelGraphView, graph_from_model_graph, live_model_graphs, read_run_graphs

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")


def _blocks(graph) -> set[tuple]:  # noqa: ANN001
    return {(b.name, b.type, tuple(sorted(graph.output_shapes(b).items())), b.params) for b in graph.blocks}


def _trained(base: Path, **kwargs) -> RunContext:  # noqa: ANN003
    rc = RunContext(overrides={**TINY, "log_base_dir": str(base)}, silent=True, **kwargs)
    rc.train()
    return rc


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory: pytest.TempPathFactory) -> RunContext:
    rc = _trained(tmp_path_factory.mktemp("cp"))
    yield rc
    rc.close()


@pytest.fixture(scope="module")
def cutting(tmp_path_factory: pytest.TempPathFactory) -> RunContext:
    rc = _trained(tmp_path_factory.mktemp("cut"), experiment="cutting2d_masked_ppo")
    yield rc
    rc.close()


def _check_against_live_model(view: ModelGraphView, rc: RunContext) -> None:
    """Every block of each saved drawing, with its output shape and parameters, as the live model has it."""
    live = live_model_graphs(rc)
    assert set(view.graphs) == set(live)
    for name, graph in view.graphs.items():
        assert _blocks(graph) == _blocks(live[name]), name
        assert graph.input_tensors() == live[name].input_tensors()
        assert len(graph.edges) == len(live[name].edges)
        assert view.block_table(name) == [{"name": b.name, "type": b.type, "outputs": graph.output_shapes(b),
                                           "params": b.params} for b in graph.blocks]


def test_cartpole_run_directory(cartpole: RunContext) -> None:
    view = ModelGraphView(cartpole.run_dir)
    assert view.origin == "run directory" and view.keys() == ["0"]
    assert set(view.graphs) == {"policy_0", "critic_0"}
    table = {row["name"]: row for row in view.block_table("policy_0")}
    assert table["concat"]["outputs"] == {"concat": (4,)} and table["latent"]["outputs"] == {"latent": (64,)}
    assert table["action"]["type"] == "LinearOutputBlock" and table["action"]["outputs"] == {"action": (2,)}
    assert sum(row["params"] for row in table.values()) == view.graph("policy_0").total_params > 0
    _check_against_live_model(view, cartpole)
    # the figure: a box per node, hover text per node, the shown graph named in the title
    fig = view.figure
    graph = view.graph("policy_0")
    assert len(fig.layout.shapes) == len(graph.nodes) == len(fig.data[1].x)
    assert "policy 0" in fig.layout.title.text and fig.layout.dragmode == "pan"
    assert any("LinearOutputBlock" in h and "(2,)" in h for h in fig.data[1].hovertext)
    details = view.show_details("b:latent")
    assert "DenseBlock" in details and "output latent (64,)" in details and f"{table['latent']['params']:,}" in details
    assert "DenseBlock" in view.details.value
    nodes, edges = fig.data[1], fig.data[0]
    view.role_select.value = "critic"
    assert "critic 0" in fig.layout.title.text and fig.data[1] is nodes and fig.data[0] is edges
    assert any("value" in t for t in fig.data[1].text)
    state = fig.get_state()  # what a front-end connecting now (a reload, voila) receives
    assert state["_widget_data"] == fig._data and state["_widget_layout"] == fig._layout_obj._props
    assert view.update() is False
    view.close()


def test_reading_a_runs_drawings_imports_no_torch(cartpole: RunContext) -> None:
    """The distributions view and the report read the drawings of a finished run: that costs no torch import (3 s
    in a fresh kernel)."""
    import subprocess
    import sys

    code = ("import sys\nfrom maze_lab.widgets.model_graph import read_run_graphs\n"
            f"graphs, problems = read_run_graphs({str(cartpole.run_dir)!r})\n"
            "assert graphs and not problems, problems\nprint(sorted(graphs), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "False", out.stdout


def test_cutting2d_has_a_graph_per_policy_key_and_role(cutting: RunContext) -> None:
    view = ModelGraphView(cutting.run_dir)
    assert view.keys() == ["0", "1"]
    assert set(view.graphs) == {"policy_0", "policy_1", "critic_0", "critic_1"}
    _check_against_live_model(view, cutting)
    assert view.graph("policy_1").output_tensors() == {"cut_rotation": (2,), "cut_order": (2,)}
    assert view.graph("policy_0").input_tensors()["inventory"] == (50, 2)
    for key in ("0", "1"):
        for role in ("policy", "critic"):
            view.key_select.value, view.role_select.value = key, role
            assert view.graph_select.value == f"{role}_{key}"
            assert f"{role} {key}" in view.figure.layout.title.text
    critic = {row["name"]: row for row in view.block_table("critic_0")}
    assert critic["inventory_flat"]["outputs"] == {"inventory_flat": (100,)}
    assert critic["value"]["outputs"] == {"value": (1,)}
    view.close()


def test_graphs_come_from_the_live_model_without_drawings(cartpole: RunContext, tmp_path: Path) -> None:
    graph_dir = cartpole.run_dir / "model_graphs"
    kept = tmp_path / "kept"
    shutil.copytree(graph_dir, kept)
    shutil.rmtree(graph_dir)
    try:
        view = ModelGraphView(cartpole)
        assert view.origin == "live model" and set(view.graphs) == {"policy_0", "critic_0"}
        _check_against_live_model(view, cartpole)
        view.close()
        empty = ModelGraphView(StatsStore())
        assert empty.graphs == {} and "no model graphs" in empty.header.value
        assert empty.figure.layout.title.text == "no model graph"
        empty.close()
    finally:
        shutil.copytree(kept, graph_dir)


def test_live_run_and_polling(tmp_path: Path) -> None:
    rc = RunContext(overrides={**TINY, "n_epochs": 3, "log_base_dir": str(tmp_path)}, silent=True)
    handle = rc.train_async()
    view = ModelGraphView(handle)
    assert view.update() in (True, False)

    async def follow() -> None:
        view.refresh_seconds = 0.05
        task = view.start()
        await asyncio.wait_for(task, timeout=300)  # ends by itself once the run ended
        assert task.done() and not task.cancelled()

    asyncio.run(follow())
    assert handle.wait() == "done"
    assert set(view.graphs) == {"policy_0", "critic_0"} and view.figure.layout.shapes
    view.close()
    rc.close()


class _Broken(gym.Wrapper):
    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.left = 40

    def step(self, action):  # noqa: ANN001, ANN201 - gymnasium's signature
        self.left -= 1
        if self.left < 0:
            raise RuntimeError("the env broke down on purpose")
        return self.env.step(action)


def test_failed_run_still_shows_its_model(tmp_path: Path) -> None:
    rc = RunContext(env=lambda: GymMazeEnv(_Broken(gym.make("CartPole-v1"))),
                    overrides={**TINY, "n_epochs": 10, "log_base_dir": str(tmp_path)}, silent=True)
    handle = rc.train_async()
    with pytest.raises(RunFailedError):
        handle.wait()
    view = ModelGraphView(rc.run_dir)
    assert set(view.graphs) == {"policy_0", "critic_0"} and "model graph error" not in view.header.value
    view.close()
    rc.close()


def test_drawings_are_read_as_bounded_data(cartpole: RunContext, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(cartpole.run_dir, run, ignore=shutil.ignore_patterns("checkpoints", "tensorboard"))
    graphs, problems = read_run_graphs(run, max_bytes=200)
    assert graphs == {} and all("not read" in p for p in problems) and len(problems) == 2
    (run / "model_graphs" / "policy_0.svg").write_text(
        '<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]>'
        '<svg xmlns="http://www.w3.org/2000/svg"><text>&b;</text></svg>')
    (run / "model_graphs" / "critic_0.svg").write_text("<svg><g><title>half a file")
    view = ModelGraphView(run)
    assert view.graphs == {} and "policy_0.svg" in view.header.value and "critic_0.svg" in view.header.value
    view.close()


def test_drawings_carry_their_graph_as_checked_data(tmp_path: Path) -> None:
    from conftest_perception import CUTTING_MASKS, cutting2d_builder, cutting2d_masked_spaces

    from maze_lab.agent.composers import TemplateModelComposer
    from maze_lab.agent.graph import composer_graphs

    obs, act = cutting2d_masked_spaces()
    comp = TemplateModelComposer(act, obs, model_builder=cutting2d_builder(), action_masks=CUTTING_MASKS,
                                 policy={"_target_": "ProbabilisticPolicyComposer"},
                                 critic={"_target_": "StepStateCriticComposer"})
    graph_dir = tmp_path / "model_graphs"
    comp.save_graphs(graph_dir)
    graphs, problems = read_run_graphs(tmp_path)
    assert not problems
    for name, live in composer_graphs(comp).items():
        drawn, expected = graphs[name], graph_from_model_graph(live, name)
        assert _blocks(drawn) == _blocks(expected) and drawn.edges == expected.edges
        assert [(e.key, e.shape) for e in drawn.tensors] == [(e.key, e.shape) for e in expected.tensors]
        for nid, node in expected.nodes.items():  # the drawing's geometry, not a layout of its own
            got = drawn.nodes[nid]
            assert (got.x, got.y, got.width, got.height) == pytest.approx((node.x, node.y, node.width, node.height),
                                                                          abs=0.01)
        assert all(len(e.path) >= 2 for e in drawn.tensors)
    assert graphs["policy_selection"].nodes["b:piece_idx"].detail == "masked by inventory_mask (0 = not allowed)"
    # a drawing without graph data, and one whose data was tampered with, are named; the others still read
    (graph_dir / "policy_selection.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"><g><title>x: DenseBlock, '
                                                    '5 parameters</title><rect width="5" height="5"/></g></svg>')
    critic = graph_dir / "critic_cutting.svg"
    critic.write_text(critic.read_text().replace('"kind":"block"', '"kind":"os.system"', 1))
    graphs, problems = read_run_graphs(tmp_path)
    assert set(graphs) == {"policy_cutting", "critic_selection"}
    assert any(p.startswith("policy_selection.svg") and "no graph data" in p for p in problems)
    assert any(p.startswith("critic_cutting.svg") and "kind must be one of" in p for p in problems)
