"""The training dashboard: figures follow the StatsStore, render in Chromium, and update live in a kernel."""

from __future__ import annotations

import os
import shutil
import textwrap

import numpy as np
import pytest

from maze_lab.core.log_stats.aggregation import StatKey
from maze_lab.core.log_stats.base_events import BaseEnvEvents, DiscreteActionEvents
from maze_lab.core.log_stats.writers import StatsStore

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _store(n_epochs: int = 3) -> StatsStore:
    store = StatsStore()
    for epoch in range(1, n_epochs + 1):
        for prefix, offset in (("train", 0.0), ("eval", 5.0)):
            store.write(prefix, epoch, {
                StatKey(BaseEnvEvents.reward, "mean", None): 10.0 * epoch + offset,
                StatKey(BaseEnvEvents.reward, "min", None): 10.0 * epoch + offset - 2,
                StatKey(BaseEnvEvents.reward, "max", None): 10.0 * epoch + offset + 2,
                StatKey(BaseEnvEvents.reward, "mean_step_count", None): 20.0 * epoch,
                StatKey(BaseEnvEvents.kpi, "mean", ("usage",)): 1.0 / epoch,
                StatKey(DiscreteActionEvents.action, None, (0, "action")): [0, 1, 1, 1],
            })
    return store


def test_figures_follow_the_store():
    from maze_lab.widgets.dashboard import TrainingDashboard

    store = _store(3)
    dash = TrainingDashboard(store)
    means = [t for t in dash.rewards.data if t.name == "train mean"]
    assert list(means[0].x) == [1, 2, 3] and list(means[0].y) == [10.0, 20.0, 30.0]
    assert [t.name for t in dash.kpis.data] == ["eval usage", "train usage"]
    bars = dash.actions.data[0]
    assert list(bars.x) == [0, 1] and np.allclose(bars.y, [0.25, 0.75])
    assert dash.epoch_slider.max == 3
    assert not dash.refresh()  # nothing new
    store.write("train", 4, {StatKey(BaseEnvEvents.reward, "mean", None): 99.0})
    assert dash.refresh()
    means = [t for t in dash.rewards.data if t.name == "train mean"]
    assert list(means[0].y)[-1] == 99.0


@pytest.mark.browser
def test_dashboard_renders_in_chromium(tmp_path):
    pytest.importorskip("playwright")
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (bash scripts/setup.sh --dev installs it)")
    from playwright.sync_api import sync_playwright

    from maze_lab.widgets.dashboard import TrainingDashboard

    page_file = TrainingDashboard(_store(4)).to_html(tmp_path / "dashboard.html")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu",
                                                                    "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(page_file.as_uri())
        page.wait_for_selector(".main-svg")
        assert page.locator(".scatterlayer .trace").count() >= 6  # reward bands, means, lengths, KPIs
        assert page.locator(".barlayer .trace").count() == 1
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        browser.close()
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000


@pytest.mark.slow
def test_dashboard_updates_live_in_a_kernel(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    cells = [
        f"""
        from maze_lab.run.run_context import RunContext
        from maze_lab.widgets.dashboard import TrainingDashboard
        rc = RunContext(experiment="cartpole_ppo", silent=True,
                        overrides={{"log_base_dir": {str(tmp_path)!r}, "n_epochs": 6, "runner.concurrency": 2,
                                   "algorithm.epoch_length": 2, "algorithm.n_rollout_steps": 16,
                                   "algorithm.eval_repeats": 2}})
        handle = rc.train_async()
        dash = TrainingDashboard(handle, refresh_seconds=0.2)
        dash
        """,
        # awaiting lets the kernel's event loop run the dashboard's refresh task while training goes on
        """
        import asyncio
        for _ in range(300):
            await asyncio.sleep(0.1)
            if not handle.running:
                break
        await asyncio.sleep(0.5)
        """,
        """
        means = [t for t in dash.rewards.data if t.name == "train mean"]
        assert handle.status == "done", handle.status
        assert list(means[0].x) == list(range(1, 7)), list(means[0].x)
        assert "done" in dash.header.value
        print("ok")
        """,
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(textwrap.dedent(c)) for c in cells])
    NotebookClient(nb, kernel_name="maze-lab", timeout=180).execute()
    assert "ok" in nb.cells[2].outputs[0]["text"]
