"""The shareable report in headless Chromium, opened from a ``file://`` URL with every network request refused: its
figures are drawn, its configuration filters, and its episode slider and buttons move through the recorded steps.
The screenshot goes to ``test-artifacts/report.png`` and to ``docs/report.png`` (the guide shows it)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from browser_utils import ARTIFACTS, REPO, browser_skip_reason, chromium_page, plots, screenshot, wait_until
from run_utils import run_with_an_episode

from maze_lab.widgets.dashboard import TrainingDashboard

pytestmark = pytest.mark.browser


def test_the_report_opens_offline_with_its_figures_drawn_and_its_episode_replayable(tmp_path: Path):
    reason = browser_skip_reason()
    if reason:
        pytest.skip(reason)
    from maze_lab.widgets import write_report

    run_dir = run_with_an_episode(tmp_path / "runs")
    report = write_report(run_dir, tmp_path / "report.html")
    expected = TrainingDashboard(run_dir, tabs=())
    n_curves = len(expected.shown)
    curve_titles = {expected.charts[key].title for key in expected.shown}
    expected.close()

    requests: list[str] = []
    with chromium_page(width=1400, height=1000) as page:
        def refuse(route) -> None:  # noqa: ANN001 - playwright's Route
            requests.append(route.request.url)
            route.abort()

        page.route(lambda url: url.startswith(("http://", "https://")), refuse)
        page.goto(report.as_uri())

        def drawn() -> list[dict]:
            shown = plots(page)
            return shown if sum(p["drawn"] > 0 for p in shown) >= n_curves else []

        shown = wait_until(drawn, 60, what=f"{n_curves} drawn plots")
        assert page.locator(".js-plotly-plot .main-svg").count() > 0
        titles = {p["title"] for p in shown}
        assert {"episode reward (mean, min–max)", "episode length (mean steps)"} <= curve_titles <= titles, titles
        for plot in shown:
            if plot["title"] in curve_titles:
                assert plot["drawn"] == plot["traces"] > 0, plot  # every trace of a curve reached the drawing
            else:  # distributions, the episode's strip: drawn (some of their traces are hidden until picked)
                assert plot["drawn"] > 0, plot
        assert page.locator(".maze-lab-graph svg").count() == 2  # policy and critic drawings, inline

        # the configuration table filters as one types
        search = page.locator(".maze-lab-config-search")
        total = page.locator(".maze-lab-config tbody tr").count()
        search.fill("algorithm.lr")
        visible = page.locator(".maze-lab-config tbody tr:visible")
        wait_until(lambda: 0 < visible.count() < total, 10, what="the configuration filtered")
        assert all("algorithm.lr" in t.lower() for t in visible.all_inner_texts())
        search.fill("")

        # the episode: the slider and the buttons move through the steps, the picture changes with them
        episode = page.locator(".maze-lab-episode")
        frame = page.locator(".maze-lab-frame")
        wait_until(lambda: (frame.get_attribute("src") or "").startswith("data:image/png;base64,"), 10,
                   what="the first frame")
        first = frame.get_attribute("src")
        assert page.locator(".maze-lab-step-title").inner_text().startswith("step 0 /")
        slider = page.locator(".maze-lab-slider")
        last = int(slider.get_attribute("max"))
        assert last > 5
        slider.evaluate("(el, v) => { el.value = v; el.dispatchEvent(new Event('input')); }", str(last // 2))
        wait_until(lambda: episode.get_attribute("data-current") != "0", 10, what="the slider to move the episode")
        middle = frame.get_attribute("src")
        assert middle != first, "the picture did not change with the slider"
        step = int(episode.get_attribute("data-current"))
        assert page.locator(".maze-lab-step-title").inner_text().startswith(f"step {step} /")
        page.locator(".maze-lab-next").click()
        wait_until(lambda: int(episode.get_attribute("data-current")) > step, 10, what="next to move on")
        page.locator(".maze-lab-prev").click()
        wait_until(lambda: int(episode.get_attribute("data-current")) == step, 10, what="prev to move back")
        # the strip's marker follows the step
        marker = page.evaluate("() => document.querySelector('.maze-lab-episode .js-plotly-plot')"
                               ".layout.shapes[0].x0")
        assert marker == step

        assert not page.console_errors, page.console_errors
        page.evaluate("() => window.scrollTo(0, 0)")
        page.mouse.move(1390, 5)  # no figure's toolbar in the picture
        path = screenshot(page, "report", full_page=True)
    assert not requests, f"the report asked the network for {requests}"
    assert path == ARTIFACTS / "report.png" and path.stat().st_size > 50_000
    shutil.copyfile(path, REPO / "docs" / "report.png")
