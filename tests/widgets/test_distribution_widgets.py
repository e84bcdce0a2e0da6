"""DistributionsView on real runs: a live run, finished run directories (CartPole, structured Cutting-2D) and a run
that failed after some epochs; its numbers checked against the StatsStore's samples."""

from __future__ import annotations

import asyncio
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from run_utils import TINY

from maze_lab.core.log_stats.writers import StatsStore
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.run.run_context import RunContext, RunFailedError
from maze_lab.widgets.distributions import DistributionsView

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")


@pytest.fixture(scope="module")
def cartpole_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rc = RunContext(overrides={**TINY, "n_epochs": 3, "log_base_dir": str(tmp_path_factory.mktemp("cp"))},
                    silent=True)
    rc.train()
    rc.close()
    return rc.run_dir


@pytest.fixture(scope="module")
def cutting_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rc = RunContext(experiment="cutting2d_masked_ppo",
                    overrides={**TINY, "log_base_dir": str(tmp_path_factory.mktemp("cut"))}, silent=True)
    rc.train()
    rc.close()
    return rc.run_dir


class _FailsAfter(gym.Wrapper):
    """CartPole that raises after a number of steps (a run that fails after a few epochs)."""

    def __init__(self, env: gym.Env, steps: int):
        super().__init__(env)
        self.left = steps

    def step(self, action):  # noqa: ANN001, ANN201 - gymnasium's signature
        self.left -= 1
        if self.left < 0:
            raise RuntimeError("the env broke down on purpose")
        return self.env.step(action)


def _failing_env() -> GymMazeEnv:
    return GymMazeEnv(_FailsAfter(gym.make("CartPole-v1"), steps=45))


def _check_numbers(view: DistributionsView, store: StatsStore) -> int:
    """Every action count and observation histogram of the view against the store; returns how many were checked."""
    checked = 0
    for epoch, prefix, topic, event, name, arr in store.samples():
        if topic == "DiscreteActionEvents":
            counts = view.action_counts(epoch, name, prefix=prefix)
            values, n = np.unique(arr.astype(int), return_counts=True)
            assert {v: c for v, c in counts.items() if c} == dict(zip(values.tolist(), n.tolist(), strict=True))
            assert sum(counts.values()) == arr.size
            checked += 1
        elif topic == "ObservationEvents":
            stage = event.split("_")[1]
            dim = view.data.dim("observation", name, stage)
            assert dim is not None, name
            rows = arr.reshape(-1, dim)
            for d in range(min(dim, 3)):
                counts, edges = view.histogram(epoch, name, d, stage=stage, prefix=prefix)
                assert counts.sum() == rows.shape[0]  # every observation of the epoch, once
                assert np.array_equal(counts, np.histogram(rows[:, d], bins=edges)[0])
                checked += 1
    return checked


def _check_labels(view: DistributionsView) -> None:
    assert view.action_fig.layout.title.text and view.action_fig.layout.xaxis.title.text \
        and view.action_fig.layout.yaxis.title.text
    assert view.obs_fig.layout.title.text and all(view.panels()["observations"])
    for trace in view.obs_fig.data:
        suffix = trace.xaxis[1:]
        assert view.obs_fig.layout[f"xaxis{suffix}"].title.text, trace.xaxis


def test_finished_cartpole_run(cartpole_dir: Path) -> None:
    store = StatsStore.load(cartpole_dir)
    view = DistributionsView(cartpole_dir)
    assert view.error is None
    assert view.action_heads() == ["0/action"] and view.observation_keys() == ["0/observation"]
    assert view.data.prefixes() == ["train", "eval"]
    assert view.epoch_slider.max == max(s[0] for s in store.samples()) == view.play.max
    assert view.data.dim("observation", "0/observation", "original") == 4  # the policy graph's input shape
    assert _check_numbers(view, store) > 10
    # every value of the head's range is shown (2 for CartPole), one panel per dimension
    assert list(view.action_counts(1, "0/action")) == [0, 1]
    assert view.panels()["observations"] == [f"dimension [{i}], original (from the env)" for i in range(4)]
    _check_labels(view)
    # stepping the epochs (as the play button does) redraws the same traces in place
    bars, first = view.action_fig.data[0], view.obs_fig.data[0]
    view.play.value = 1
    assert view.epoch_slider.value == 1 and "epoch 1" in view.action_fig.layout.title.text
    counts = view.action_counts(1, "0/action")
    assert list(bars.y) == list(counts.values())
    assert view.action_fig.data[0] is bars and view.obs_fig.data[0] is first
    eval_counts = view.action_counts(1, "0/action", prefix="eval")
    view.prefix_select.value = "eval"
    assert list(view.action_fig.data[0].y) == list(eval_counts.values()) and "eval" in \
        view.action_fig.layout.title.text
    # what a front-end connecting now (a VBox's first view, a browser reload, voila) receives is the figure as drawn
    for fig in (view.action_fig, view.obs_fig, view.summary_fig):
        state = fig.get_state()  # what a front-end connecting now (a reload, voila) receives
        assert state["_widget_data"] == fig._data and state["_widget_layout"] == fig._layout_obj._props
    assert view.update() is False  # nothing new: nothing redrawn
    view.close()


def test_cutting2d_structured_run_has_a_panel_per_key_and_head(cutting_dir: Path) -> None:
    store = StatsStore.load(cutting_dir)
    view = DistributionsView(cutting_dir)
    assert view.error is None
    assert view.action_heads() == ["0/piece_idx", "1/cut_order", "1/cut_rotation"]
    assert {k.split("/")[0] for k in view.observation_keys()} == {"0", "1"}
    assert _check_numbers(view, store) > 10
    for head in view.action_heads():
        view.action_select.value = head
        key, name = head.split("/")
        assert f"policy {key} · {name}" in view.action_fig.layout.title.text
    # the selection head's range (50 inventory slots) is shown even where a value was never taken
    epoch = view.epoch_slider.value
    assert list(view.action_counts(epoch, "0/piece_idx")) == list(range(50))
    view.action_select.value = "0/piece_idx"
    assert len(view.action_fig.data[0].x) == 50
    # original and processed side by side
    view.obs_select.value = "0/ordered_piece"
    titles = view.panels()["observations"]
    assert titles == ["dimension [0], original (from the env)", "dimension [0], processed (after pre-processing)",
                      "dimension [1], original (from the env)", "dimension [1], processed (after pre-processing)"]
    _check_labels(view)
    # 100 dimensions: a picker and a per-dimension summary instead of 100 panels
    view.obs_select.value = "0/inventory"
    assert view.dim_select.layout.display == "" and len(view.dim_select.options) == 100
    assert view.dim_select.options[3] == ("[1, 1]", 3)  # named by the observation's (50, 2) shape
    assert len(view.panels()["observations"]) == 2 and view.panels()["summary"][0]
    view.dim_select.value = (3, 57)
    assert view.panels()["observations"][2] == "dimension [28, 1], original (from the env)"
    mean = next(t for t in view.summary_fig.data if t.name == "processed: mean")
    arr = next(a for e, p, t, ev, n, a in store.samples(event="observation_processed", epoch=epoch)
               if n == "0/inventory" and p == view.prefix)
    assert np.allclose(mean.y, arr.reshape(-1, 100).mean(axis=0))
    view.close()


def test_live_run_is_followed_and_polling_ends_with_the_run(tmp_path: Path) -> None:
    rc = RunContext(overrides={**TINY, "n_epochs": 4, "log_base_dir": str(tmp_path)}, silent=True)
    handle = rc.train_async()
    view = DistributionsView(handle)
    assert view.source.live or handle.status in ("done", "stopped")
    while not view.data.epochs() and handle.running:  # wait for the first epoch by condition
        handle.wait(timeout=0.2)
        view.update()
    view.update()
    assert view.data.epochs() and view.error is None

    async def follow() -> None:
        closed = DistributionsView(handle)
        closed.refresh_seconds = 0.05
        task = closed.start()
        closed.close()  # cancels its task
        with pytest.raises(asyncio.CancelledError):
            await task
        view.refresh_seconds = 0.05
        task = view.start()
        await asyncio.wait_for(task, timeout=300)  # ends by itself once the run ended
        assert task.done() and not task.cancelled()

    asyncio.run(follow())
    assert handle.wait() == "done"
    view.update()
    store = StatsStore.load(rc.run_dir)
    assert view.data.epochs() == sorted({s[0] for s in store.samples()}) and view.epoch_slider.value == 4
    assert _check_numbers(view, handle.store) > 0
    view.close()
    rc.close()


def test_failed_run_shows_its_epochs_and_the_error(tmp_path: Path) -> None:
    rc = RunContext(env=_failing_env, overrides={**TINY, "n_epochs": 10, "log_base_dir": str(tmp_path)},
                    silent=True)
    handle = rc.train_async()
    with pytest.raises(RunFailedError, match="broke down on purpose"):
        handle.wait()
    assert handle.status == "failed"
    store = StatsStore.load(rc.run_dir)
    assert store.samples(), "the run should have finished an epoch before failing"
    for source in (rc.run_dir, handle):
        view = DistributionsView(source)
        assert view.error is None and view.data.epochs()
        assert "failed" in view.header.value and "the env broke down on purpose" in view.header.value
        assert _check_numbers(view, store) > 0
        view.close()
    rc.close()


def test_a_store_without_samples_and_damaged_sources_do_not_raise(tmp_path: Path) -> None:
    view = DistributionsView(StatsStore())
    assert view.action_heads() == [] and "no action or observation samples" in view.header.value
    assert "no action samples" in view.action_fig.layout.title.text
    view.close()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "stats.arrows").write_bytes(b"not a stats file")
    (run_dir / "config.yaml").write_text("{}\n")
    (run_dir / "maze_lab_run.json").write_text('{"status": "running"}')
    view = DistributionsView(run_dir)
    assert view.update(force=True) in (True, False)  # never raises
    view.close()


def test_continuous_actions_are_histograms(tmp_path: Path) -> None:
    rc = RunContext(overrides={**TINY, "env.name": "Pendulum-v1", "log_base_dir": str(tmp_path)}, silent=True)
    rc.train()
    store = StatsStore.load(rc.run_dir)
    for source in (rc.run_dir, rc):
        view = DistributionsView(source)
        assert view.error is None and view.action_heads() == ["0/action"]
        assert view.data.keys[("action", "0/action")].space == "continuous"
        actions = [s for s in store.samples(topic="ContinuousActionEvents")]
        assert actions
        for epoch, prefix, _, _, name, arr in actions:
            counts, edges = view.histogram(epoch, name, None, prefix=prefix, kind="action")
            assert counts.sum() == arr.size and np.array_equal(counts, np.histogram(arr, bins=edges)[0])
        view.prefix_select.value = actions[-1][1]
        view.epoch_slider.value = actions[-1][0]
        fig = view.action_fig
        assert "continuous" in fig.layout.title.text and fig.layout.xaxis.title.text == "action value"
        assert sum(fig.data[0].y) == actions[-1][5].size
        assert view.data.dim("observation", "0/observation", "original") == 3  # Pendulum's (3,) observation
        if source is rc:  # the spaces of the run's env give the action's shape: one histogram per dimension
            assert [t.name for t in fig.data] == ["dimension [0]"] and view.action_note.value == ""
        view.close()
    rc.close()


@pytest.mark.browser
def test_views_render_in_voila_and_after_a_reload(cutting_dir: Path, tmp_path: Path) -> None:
    """Both views inside their containers draw every plot in voila, again after a reload; screenshots of each go to
    test-artifacts/ (distributions.png, model_graph.png)."""
    import browser_utils as bu
    import nbformat

    reason = bu.browser_skip_reason()
    if reason:
        pytest.skip(reason)
    notebook = tmp_path / "views.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("from maze_lab.widgets.distributions import DistributionsView\n"
                                  f"view = DistributionsView({str(cutting_dir)!r})\n"
                                  "view.obs_select.value = '0/ordered_piece'\nview"),
        nbformat.v4.new_code_cell("from maze_lab.widgets.model_graph import ModelGraphView\n"
                                  f"graph = ModelGraphView({str(cutting_dir)!r})\ngraph"),
    ]
    nbformat.write(nb, notebook)
    server = bu.start_voila(notebook, tmp_path)
    try:
        server.wait_ready()
        with bu.chromium_page(1400, 3200) as page:
            for visit in range(2):
                if visit == 0:
                    page.goto(server.url, timeout=120_000)
                else:
                    page.reload(timeout=120_000)
                drawn = bu.wait_for_plots(page, min_plots=4, timeout=120)
                titles = [p["title"] for p in drawn]
                assert any(t.startswith("Actions of policy 0 · piece_idx") for t in titles), titles
                assert any(t.startswith("Observation policy 0 · ordered_piece") for t in titles), titles
                assert any(t.startswith("policy 0 —") for t in titles), titles
                assert all(p["points"] > 0 for p in drawn if p["visible"]), drawn
            plots = page.locator(".js-plotly-plot")
            bu.screenshot(page, "distributions", locator=page.locator(".widget-vbox").first)
            bu.screenshot(page, "model_graph", locator=plots.nth(plots.count() - 1))
    finally:
        server.stop()


class _Switches(gym.Env):
    """Three on/off switches (MultiBinary) and a discrete dial beside a (2,) observation: episodes of 8 steps."""

    def __init__(self):
        self.action_space = gym.spaces.Dict({"switches": gym.spaces.MultiBinary(3), "dial": gym.spaces.Discrete(4)})
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2,))
        self.t = 0

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN201 - gymnasium's signature
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):  # noqa: ANN001, ANN201 - gymnasium's signature
        self.t += 1
        return np.full(2, self.t / 8, dtype=np.float32), float(np.sum(action["switches"])), self.t >= 8, False, {}


def test_multi_binary_heads_count_each_bit(tmp_path: Path) -> None:
    rc = RunContext(env=lambda: GymMazeEnv(_Switches()), overrides={**TINY, "log_base_dir": str(tmp_path)},
                    silent=True)
    rc.train()
    for source in (rc, rc.run_dir):  # the live run's spaces say multi-binary; a directory tells it from the sizes
        view = DistributionsView(source)
        assert view.error is None and set(view.action_heads()) == {"0/switches", "0/dial"}
        assert view.data.action_space("0/switches") == "multi-binary" and view.data.action_space("0/dial") == \
            "discrete"
        for epoch, prefix, _, _, name, arr in rc._single().store.samples(topic="DiscreteActionEvents"):
            counts = view.action_counts(epoch, name, prefix=prefix)
            if name == "0/switches":
                assert counts == {i: int(c) for i, c in enumerate(arr.reshape(-1, 3).sum(axis=0))}
            else:
                assert list(counts) == [0, 1, 2, 3] and sum(counts.values()) == arr.size
        view.action_select.value = "0/switches"
        assert view.action_fig.layout.xaxis.title.text == "bit of the action" and len(view.action_fig.data[0].x) == 3
        view.close()
    rc.close()
