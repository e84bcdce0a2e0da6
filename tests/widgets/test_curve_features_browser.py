"""Each curve feature of the cockpit as a user meets it in the browser (voila, headless Chromium): the x-axis switch,
the smoothing slider and the log scale change what plotly draws; and a run deleted from the Lab app goes from the
list and from the disk after the confirmation."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from browser_utils import (
    browser_skip_reason,
    chromium_page,
    jupyter_env,
    screenshot,
    start_maze_lab_lab,
    start_voila,
    wait_for_plots,
    wait_until,
    write_notebook,
)
from run_utils import train_tiny_run

pytestmark = pytest.mark.browser

# the traces plotly holds for the cockpit's figure titled `title`: role (the trace's meta), x values, visibility;
# and the figure's y-axis type
FIGURE = """(title) => {
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    if (!gd.layout || !gd.layout.title || gd.layout.title.text !== title) continue;
    const trace = (t) => ({role: (t.meta || {}).role, prefix: (t.meta || {}).prefix, x: Array.from(t.x || []),
                           visible: t.visible === undefined ? true : t.visible});
    return {yType: (gd._fullLayout.yaxis || {}).type, traces: gd.data.map(trace)};
  }
  return null;
}"""
REWARD = "episode reward (mean, min–max)"


def _skip_without_browser() -> None:
    reason = browser_skip_reason()
    if reason:
        pytest.skip(reason)


def test_the_x_axis_smoothing_and_log_scale_in_the_browser(tmp_path: Path) -> None:
    _skip_without_browser()
    from maze_lab.widgets.dashboard import TrainingDashboard

    run_dir = train_tiny_run(tmp_path / "runs")
    kernel_side = TrainingDashboard(run_dir).figure("BaseEnvEvents / reward (mean, min–max)")
    steps = next([float(x) for x in t.x] for t in kernel_side.data if t.meta == {"prefix": "train", "role": "mean"})
    assert steps and steps != [1.0]  # env steps, not epochs
    write_notebook(tmp_path / "cockpit.ipynb",
                   [f"from maze_lab.widgets.dashboard import TrainingDashboard\nTrainingDashboard({str(run_dir)!r})"])
    server = start_voila(tmp_path / "cockpit.ipynb", tmp_path)
    try:
        server.wait_ready()
        with chromium_page() as page:
            page.goto(server.url, timeout=120_000)
            wait_for_plots(page, min_plots=2, min_points=1, timeout=120)

            def mean_x() -> list[float]:
                fig = page.evaluate(FIGURE, REWARD)
                return next(t["x"] for t in fig["traces"] if t["role"] == "mean" and t["prefix"] == "train")

            assert mean_x() == steps  # env steps by default, as the kernel-side figure says

            # the x-axis switch: over epochs the train mean sits at epoch 1
            page.select_option(".maze-lab-x-axis select", label="epoch")
            wait_until(lambda: mean_x() == [1.0], timeout=60, what="the reward curve drawn over epochs")
            screenshot(page, "cockpit_over_epochs")

            # smoothing: the EMA trace shows up over the raw one
            readout = page.locator(".maze-lab-smoothing .widget-readout")
            readout.click()
            page.keyboard.press("Control+A")
            page.keyboard.type("0.6")
            page.keyboard.press("Enter")
            wait_until(lambda: any(t["role"] == "smooth" and t["visible"] is True
                                   for t in page.evaluate(FIGURE, REWARD)["traces"]),
                       timeout=60, what="a visible smoothed trace on the reward figure")

            # the log scale: the figure's own lin/log switch
            assert page.evaluate(FIGURE, REWARD)["yType"] == "linear"
            reward_plot = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text="episode reward"))
            reward_plot.locator(".updatemenu-button", has_text="log").first.click()
            wait_until(lambda: page.evaluate(FIGURE, REWARD)["yType"] == "log", timeout=30,
                       what="the reward figure's y-axis on a log scale")
            screenshot(page, "cockpit_smoothed_log")
    finally:
        server.stop()


def test_a_run_is_deleted_from_the_lab_app_after_the_confirmation(tmp_path: Path) -> None:
    _skip_without_browser()
    run_dir = train_tiny_run(tmp_path / "made")
    base = tmp_path / "runs"
    for name in ("keep", "drop"):
        shutil.copytree(run_dir, base / "default" / name)
    server = start_maze_lab_lab(tmp_path, cwd=tmp_path, env=jupyter_env(tmp_path, MAZE_LAB_OUTPUTS=str(base)))
    try:
        server.wait_ready(timeout=90)
        with chromium_page(width=1400, height=1000) as page:
            page.goto(server.url, timeout=120_000)
            page.wait_for_selector(".maze-lab-app .maze-lab-start", timeout=120_000)

            def names() -> list[str]:
                return [o.split()[0] for o in page.locator(".maze-lab-runs option").all_inner_texts()]

            wait_until(lambda: sorted(names()) == ["default/drop", "default/keep"], timeout=60, what="both runs listed")
            option = page.locator(".maze-lab-runs option", has_text="default/drop")
            page.locator(".maze-lab-runs select").select_option(option.get_attribute("value"))
            page.click(".maze-lab-delete")
            page.wait_for_selector(".maze-lab-delete-yes", state="visible", timeout=30_000)
            assert (base / "default" / "drop").is_dir()  # nothing goes before the confirmation
            screenshot(page, "lab_app_delete_confirmation")
            page.click(".maze-lab-delete-yes")
            wait_until(lambda: names() == ["default/keep"], timeout=60, what="the deleted run gone from the list")
            assert not (base / "default" / "drop").exists() and (base / "default" / "keep").is_dir()
    finally:
        server.stop()
