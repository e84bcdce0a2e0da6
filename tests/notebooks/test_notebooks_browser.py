"""Every notebook of ``notebooks/`` opened in JupyterLab in headless Chromium, run top to bottom with *Run All Cells*
as a user runs it, and a screenshot of its last output (and of its last picture or widget) written to
``test-artifacts/notebooks/``. The run fails on an error output, a widget that could not be displayed, or a cell
that never finished.

One JupyterLab serves a copy of the notebooks folder (the repository's notebooks are never saved into); runs go to
the test's own outputs directory; each notebook's kernel is shut down after its test.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from browser_utils import (
    ARTIFACTS,
    LAB_TOKEN,
    browser_skip_reason,
    chromium_page,
    jupyter_env,
    start_jupyterlab,
    wait_until,
)
from notebook_utils import NOTEBOOKS

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NOTEBOOK_NAMES = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
SHOTS = ARTIFACTS / "notebooks"

RUN_TIMEOUT = 600.0
"""Seconds one notebook may take in the browser (the papermill runs take a fraction of this on a quiet machine)."""

# JupyterLab settings of the test server: every cell stays in the page (no virtual scrolling), nothing autosaves
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                          "checkForUpdates": False},
}

# per code cell: its prompt ("[3]:", "[*]:", "[ ]:"), whether it has output, and the text of error outputs
CELLS_JS = """() => Array.from(document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell'))
    .map((cell) => {
        const prompt = cell.querySelector('.jp-InputArea-prompt');
        const errors = Array.from(cell.querySelectorAll(
            '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'))
            .map((e) => e.innerText).filter((t) => /Traceback|Error/.test(t) && !/Warning/.test(t.split('\\n')[0]));
        const text = cell.querySelector('.jp-OutputArea') ? cell.querySelector('.jp-OutputArea').innerText : '';
        return {
            prompt: prompt ? prompt.innerText.trim() : '',
            outputs: cell.querySelectorAll('.jp-OutputArea-child').length,
            errors: errors,
            widgetErrors: /Error displaying widget|model not found/.test(text),
        };
    })"""


def _settings_dir(tmp_path: Path) -> Path:
    settings = tmp_path / "lab-settings"
    for name, values in LAB_SETTINGS.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    return settings


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory):
    """JupyterLab over a copy of ``notebooks/``, with its runs written under the test's temporary directory."""
    reason = browser_skip_reason()
    if reason:
        pytest.skip(reason)
    tmp_path = tmp_path_factory.mktemp("notebooks_lab")
    root = tmp_path / "notebooks"
    shutil.copytree(NOTEBOOKS, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    env = jupyter_env(tmp_path, MAZE_LAB_OUTPUTS=str(tmp_path / "outputs"))
    env["JUPYTERLAB_SETTINGS_DIR"] = str(_settings_dir(tmp_path))
    server = start_jupyterlab(root, tmp_path, env=env)
    try:
        server.wait_ready(timeout=180)
        yield server
    finally:
        server.stop()


def _element_screenshot(page: Any, element: Any, path: Path) -> None:
    """A screenshot of one output: the window is made tall enough for it first (JupyterLab scrolls its notebook
    inside the page, so an output taller than the window would come out cut, with the menus drawn over it)."""
    element.scroll_into_view_if_needed()
    box = element.bounding_box() or {"height": 0}
    size = page.viewport_size
    needed = min(6000, int(box["height"]) + 400)
    if needed > size["height"]:
        page.set_viewport_size({"width": size["width"], "height": needed})
        element.scroll_into_view_if_needed()
    element.screenshot(path=str(path))
    page.set_viewport_size(size)


def _shutdown_kernels(base: str) -> None:
    """Delete every session of the server (its kernels stop), so that notebooks do not pile up kernels."""
    request = urllib.request.Request(f"{base}/api/sessions?token={LAB_TOKEN}")
    with urllib.request.urlopen(request, timeout=30) as response:
        sessions = json.loads(response.read())
    for session in sessions:
        delete = urllib.request.Request(f"{base}/api/sessions/{session['id']}?token={LAB_TOKEN}", method="DELETE")
        with urllib.request.urlopen(delete, timeout=60):
            pass


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_notebook_runs_in_jupyterlab(lab, name: str) -> None:
    """The notebook runs to its last cell in JupyterLab with no error output and no widget that failed to show; its
    last output and its last picture are written to ``test-artifacts/notebooks/``."""
    base = lab.url.split("/lab?")[0]
    url = f"{base}/lab/tree/{name}?reset&token={LAB_TOKEN}"
    stem = Path(name).stem
    try:
        with chromium_page(width=1400, height=1100) as page:
            page.goto(url)
            page.wait_for_selector(".jp-NotebookPanel .jp-CodeCell", timeout=120_000)
            page.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')", timeout=180_000)
            page.click(".lm-MenuBar-itemLabel:text-is('Run')")
            page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
            started = time.monotonic()
            cells: list[dict] = []

            def finished() -> bool:
                nonlocal cells
                cells = page.evaluate(CELLS_JS)
                if any(c["errors"] for c in cells):
                    return True
                return bool(cells) and all(c["prompt"] not in ("[ ]:", "[*]:", "") for c in cells)

            wait_until(finished, RUN_TIMEOUT, interval=1.0, what=f"every cell of {name} to run")
            elapsed = time.monotonic() - started
            errors = [(i, c["errors"]) for i, c in enumerate(cells) if c["errors"]]
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / f"{stem}_page.png"), full_page=False)
            assert not errors, f"{name}: error output in code cell(s): {errors}"

            # widgets and plotly figures draw after the kernel went idle: wait until none is still loading
            def settled() -> bool:
                return page.evaluate("""() => !document.body.innerText.includes('Loading widget...')""")

            wait_until(settled, 120, interval=0.5, what=f"the widgets of {name} to load")
            cells = page.evaluate(CELLS_JS)
            assert not [i for i, c in enumerate(cells) if c["widgetErrors"]], f"{name}: a widget failed to show"

            outputs = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-child")
            assert outputs.count() > 0, f"{name} showed no output at all"
            _element_screenshot(page, outputs.nth(outputs.count() - 1), SHOTS / f"{stem}_last_output.png")
            pictures = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-child:has("
                                    "img, canvas, .js-plotly-plot, .jupyter-widgets, svg)")
            if pictures.count():
                _element_screenshot(page, pictures.nth(pictures.count() - 1), SHOTS / f"{stem}_last_picture.png")
            print(f"{name}: ran in {elapsed:.0f} s in JupyterLab, {len(cells)} code cells")
    finally:
        _shutdown_kernels(base)
    assert (SHOTS / f"{stem}_last_output.png").is_file()
