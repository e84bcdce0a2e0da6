"""The views follow the page's theme: in JupyterLab's dark theme and in voila's (``?theme=dark``) the cockpit's and
the Lab app's text is readable (its colour is light on the dark page) and the figures are not white boxes; in the
light theme the same views keep dark text on a light page. Headless Chromium reads the colours the browser
computed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from browser_utils import (
    browser_skip_reason,
    chromium_page,
    jupyter_env,
    screenshot,
    start_jupyterlab,
    start_maze_lab_lab,
    start_voila,
    wait_for_plots,
    wait_until,
    write_notebook,
)
from run_utils import train_tiny_run

pytestmark = pytest.mark.browser

# the colours the browser computed: the page's background (the first element up from `sel` that has one), the text
# of `sel`, the background of plotly's figures and the fill of their tick labels and titles
COLOURS = """(sel) => {
  const rgb = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  const el = document.querySelector(sel);
  let bg = null;
  for (let e = el; e; e = e.parentElement) {
    const c = rgb(getComputedStyle(e).backgroundColor);
    if (c.length === 3 || (c.length === 4 && c[3] > 0)) { bg = c.slice(0, 3); break; }
  }
  if (!bg) bg = rgb(getComputedStyle(document.documentElement).backgroundColor).slice(0, 3);
  const svgs = [...document.querySelectorAll('.js-plotly-plot .main-svg')];
  const ticks = [...document.querySelectorAll('.js-plotly-plot .ytick text, .js-plotly-plot .gtitle')];
  return {
    page: bg,
    text: rgb(getComputedStyle(el).color).slice(0, 3),
    figures: svgs.map((s) => rgb(getComputedStyle(s).backgroundColor)),
    ticks: ticks.map((t) => rgb(getComputedStyle(t).fill).slice(0, 3)),
  };
}"""


def _luminance(rgb: list[float]) -> float:
    def channel(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(a: list[float], b: list[float]) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def _check_readable(colours: dict, dark: bool) -> None:
    page, text = colours["page"], colours["text"]
    assert (_luminance(page) < 0.2) == dark, colours  # the page is in the theme asked for
    assert _contrast(text, page) >= 4.5, colours  # WCAG AA for body text
    for fill in colours["ticks"]:
        assert _contrast(fill, page) >= 3.0, colours  # the figures' titles and tick labels
    for background in colours["figures"]:  # see-through (or the page's own colour): no white box on a dark page
        assert len(background) == 4 and background[3] == 0 or _contrast(background[:3], page) < 1.5, colours


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tiny_run(tmp_path_factory.mktemp("theme-runs"))


@pytest.mark.parametrize("theme", ["dark", "light"])
def test_the_cockpit_in_voila_follows_the_theme(tmp_path: Path, finished_run: Path, theme: str) -> None:
    reason = browser_skip_reason()
    if reason:
        pytest.skip(reason)
    code = f"from maze_lab.widgets.dashboard import TrainingDashboard\nTrainingDashboard({str(finished_run)!r})"
    write_notebook(tmp_path / "cockpit.ipynb", [code])
    server = start_voila(tmp_path / "cockpit.ipynb", tmp_path)
    try:
        server.wait_ready()
        with chromium_page() as page:
            page.goto(f"{server.url}?theme={theme}", timeout=120_000)
            wait_for_plots(page, min_plots=2, min_points=1, timeout=120)
            screenshot(page, f"cockpit_theme_{theme}")
            colours = page.evaluate(COLOURS, ".maze-lab-cockpit-header")
            assert colours["figures"] and colours["ticks"], colours
            _check_readable(colours, dark=theme == "dark")
    finally:
        server.stop()


def test_the_lab_app_follows_the_dark_theme(tmp_path: Path, finished_run: Path) -> None:
    reason = browser_skip_reason()
    if reason:
        pytest.skip(reason)
    base = tmp_path / "runs"
    shutil.copytree(finished_run, base / "default" / "earlier")
    server = start_maze_lab_lab(tmp_path, cwd=tmp_path, env=jupyter_env(tmp_path, MAZE_LAB_OUTPUTS=str(base)))
    try:
        server.wait_ready(timeout=90)
        with chromium_page(width=1400, height=1000) as page:
            page.goto(f"{server.url}?theme=dark", timeout=120_000)
            page.wait_for_selector(".maze-lab-app .maze-lab-start", timeout=120_000)
            page.wait_for_selector(".maze-lab-runs option", timeout=30_000)
            screenshot(page, "lab_app_theme_dark")
            for selector in (".maze-lab-app .maze-lab-section-title", ".maze-lab-app .widget-label",
                             ".maze-lab-app .maze-lab-note"):
                colours = page.evaluate(COLOURS, selector)
                _check_readable(colours, dark=True)
    finally:
        server.stop()


def test_the_cockpit_in_jupyterlabs_dark_theme(tmp_path: Path, finished_run: Path) -> None:
    reason = browser_skip_reason()
    if reason:
        pytest.skip(reason)
    # the user's theme setting, as JupyterLab's settings menu writes it (into the test server's own settings folder)
    themes = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension" / "themes.jupyterlab-settings"
    themes.parent.mkdir(parents=True)
    themes.write_text(json.dumps({"theme": "JupyterLab Dark"}))
    code = f"from maze_lab.widgets.dashboard import TrainingDashboard\nTrainingDashboard({str(finished_run)!r})"
    root = write_notebook(tmp_path / "lab" / "cockpit.ipynb", [code]).parent
    server = start_jupyterlab(root, tmp_path)
    try:
        server.wait_ready(timeout=120)
        with chromium_page(width=1300, height=1100) as page:
            page.goto(server.url.replace("/lab?", "/lab/tree/cockpit.ipynb?"))
            page.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')", timeout=120_000)
            assert page.evaluate("() => document.body.dataset.jpThemeLight") == "false"  # the dark theme is on
            page.click(".jp-Notebook .jp-Cell .jp-InputArea-editor")
            page.keyboard.press("Shift+Enter")
            wait_until(lambda: page.query_selector(".maze-lab-cockpit-header") is not None, timeout=120,
                       what="the cockpit in the notebook")
            wait_for_plots(page, min_plots=2, min_points=1, timeout=120)
            screenshot(page, "jupyterlab_cockpit_theme_dark")
            colours = page.evaluate(COLOURS, ".maze-lab-cockpit-header")
            assert colours["figures"] and colours["ticks"], colours
            _check_readable(colours, dark=True)
    finally:
        server.stop()
