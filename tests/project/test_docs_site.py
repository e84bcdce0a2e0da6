"""The documentation site (``docs/``, Sphinx + myst-nb): it builds with warnings as errors, has the concept pages, the
notebooks as the user guide in order and an API entry for every public name, and its pages open in headless
Chromium (screenshots in ``test-artifacts/docs_*.png``).

The notebooks are not executed by the build: it shows the copies the notebook tests executed
(``test-artifacts/executed/``), which is why these tests run after them (``conftest.py`` moves tests marked ``docs`` to
the end of the suite)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from browser_utils import ARTIFACTS, browser_skip_reason, chromium_page, screenshot

pytest.importorskip("sphinx", reason="Sphinx is not installed (bash scripts/setup.sh --dev installs it)")
pytest.importorskip("myst_nb", reason="myst-nb is not installed (bash scripts/setup.sh --dev installs it)")
pytest.importorskip("furo", reason="the furo theme is not installed (bash scripts/setup.sh --dev installs it)")

pytestmark = pytest.mark.docs

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
EXECUTED = REPO / "test-artifacts" / "executed"
BUILD_TIMEOUT = 600
"""Seconds the whole site may take to build (about 40 s on a busy 2-core machine; no notebook is executed)."""

CONCEPTS = ["env-hierarchy", "events-and-kpis", "run-directories", "security-model", "maze-names", "ray-cluster"]
NOT_EXECUTED = "Not executed in this build"
EXECUTED_NOTE = "The outputs on this page are those of the test suite"


def _sphinx(source: Path, out: Path, *options: str, timeout: float = BUILD_TIMEOUT) -> subprocess.CompletedProcess:
    """``python -m sphinx -W --keep-going -b html SOURCE OUT`` in a subprocess (its output captured)."""
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", *options, str(source),
                           str(out)], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _notebooks() -> list[str]:
    return sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole site, built once into a temporary directory with warnings as errors; its HTML directory."""
    out = tmp_path_factory.mktemp("docs") / "html"
    result = _sphinx(DOCS, out)
    assert result.returncode == 0, f"the documentation build failed:\n{result.stderr[-6000:]}\n{result.stdout[-2000:]}"
    return out


@pytest.mark.slow
def test_site_has_its_pages(site: Path) -> None:
    """The index, the six concept pages, the pages of docs/, the API page and one page per numbered notebook."""
    for page in ["index", "api", "guide", "architecture", "benchmarks", "limitations", "setup",
                 *(f"concepts/{c}" for c in CONCEPTS), *(f"_generated/notebooks/{n}" for n in _notebooks())]:
        assert (site / f"{page}.html").is_file(), f"{page}.html is missing from the site"
    assert len(_notebooks()) == 17


@pytest.mark.slow
def test_user_guide_lists_the_notebooks_in_order(site: Path) -> None:
    """The index's table of contents links every numbered notebook, 01 to 17, in that order, before the concepts."""
    index = (site / "index.html").read_text()
    linked = re.findall(r'href="_generated/notebooks/(\d\d_\w+)\.html"', index)
    order = list(dict.fromkeys(linked))
    assert order == _notebooks()
    assert index.find("_generated/notebooks/01_") < index.find("concepts/env-hierarchy.html")


@pytest.mark.slow
def test_every_public_name_has_an_api_entry(site: Path) -> None:
    """Every name of ``maze_lab.__all__`` has its anchor (``id="maze_lab.NAME"``) and its docstring on the API page."""
    import maze_lab

    api = (site / "api.html").read_text()
    ids = set(re.findall(r'id="([^"]+)"', api))
    missing = [name for name in maze_lab.__all__ if f"maze_lab.{name}" not in ids]
    assert not missing, f"public names without an entry on the API page: {missing}"
    # the entry carries the docstring: RunContext's first line is on the page
    first_line = maze_lab.RunContext.__doc__.strip().splitlines()[0]
    assert first_line.split()[0] in api


@pytest.mark.slow
def test_notebook_pages_say_where_their_outputs_come_from(site: Path) -> None:
    """Each notebook page shows either the tests' executed copy (with a note saying so) or the committed notebook
    under a "not executed" admonition; a notebook without an executed copy is never shown with outputs."""
    for name in _notebooks():
        page = (site / f"_generated/notebooks/{name}.html").read_text()
        executed, not_executed = EXECUTED_NOTE in page, NOT_EXECUTED in page
        assert executed != not_executed, f"{name}: says neither or both where its outputs come from"
        if not (EXECUTED / f"{name}.ipynb").is_file():
            assert not_executed, f"{name}: no executed copy, yet the page does not say it was not executed"
            assert 'class="cell_output' not in page, f"{name}: outputs on a page of a notebook that was not executed"
        # papermill's injected parameters cell (temporary paths of the test run) is not shown
        assert "# Parameters</span>" not in page, f"{name}: papermill's injected parameters are on the page"


def _first_executed() -> str | None:
    """A notebook whose executed copy is at hand (the one with plots first), for the notebook page to open."""
    names = [n for n in _notebooks() if (EXECUTED / f"{n}.ipynb").is_file()]
    return "01_getting_started" if "01_getting_started" in names else (names[0] if names else None)


@pytest.mark.slow
@pytest.mark.browser
def test_pages_open_in_chromium(site: Path) -> None:
    """The index, a notebook page and the API page open in headless Chromium without errors, with their navigation,
    pictures and (on an executed notebook's page) plotly figures drawn; screenshots in test-artifacts/docs_*.png."""
    reason = browser_skip_reason()
    if reason:
        pytest.skip(reason)
    notebook = _first_executed() or _notebooks()[0]
    with chromium_page(width=1400, height=1000) as page:
        page.goto((site / "index.html").as_uri())
        assert page.title().startswith("maze-lab")
        sidebar = page.locator(".sidebar-tree")
        assert sidebar.get_by_text("Getting started", exact=False).count() >= 1
        assert page.locator("img[alt='The Lab app with a run training']").evaluate("img => img.naturalWidth") > 0
        screenshot(page, "docs_index", full_page=False)

        page.goto((site / f"_generated/notebooks/{notebook}.html").as_uri())
        page.wait_for_load_state("load")
        if (EXECUTED / f"{notebook}.ipynb").is_file():
            outputs = page.locator(".cell_output")
            assert outputs.count() > 0
            images = page.locator(".cell_output img")
            assert all(images.nth(i).evaluate("img => img.naturalWidth") > 0 for i in range(images.count()))
            plots = page.locator(".js-plotly-plot")
            if plots.count():
                plots.first.locator(".main-svg").first.wait_for(timeout=30_000)  # drawn by plotly.js
                plots.first.scroll_into_view_if_needed()
        screenshot(page, "docs_notebook", full_page=False)

        page.goto((site / "api.html").as_uri())
        entry = page.locator('[id="maze_lab.RunContext"]')
        entry.scroll_into_view_if_needed()
        assert entry.is_visible()
        screenshot(page, "docs_api", full_page=False)
        errors = [e for e in page.console_errors if "favicon" not in e]
    assert not errors, f"console errors on the documentation pages: {errors}"
    for name in ("docs_index", "docs_notebook", "docs_api"):
        assert (ARTIFACTS / f"{name}.png").stat().st_size > 10_000


def _tiny_site(root: Path, body: str) -> Path:
    """A copy of the site's configuration with one page (``body``): built without the generated pages, in seconds."""
    root.mkdir(parents=True)
    shutil.copy(DOCS / "conf.py", root / "conf.py")
    (root / "index.md").write_text("# Tiny\n\n" + body + "\n\n(a-section)=\n## A section\n\nText.\n")
    return root


def test_a_broken_cross_reference_fails_the_build(tmp_path: Path) -> None:
    """With the site's configuration and ``-W``, a reference to a label that does not exist (and a link to a page
    that does not exist) fails the build and names it, where the same page with a good reference builds."""
    good = _tiny_site(tmp_path / "good", "See {ref}`a-section` and [the section](#a-section).")
    result = _sphinx(good, tmp_path / "good-html", "-D", "maze_lab_generate=0", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]

    bad = _tiny_site(tmp_path / "bad", "See {ref}`no-such-label` and [a page](no-such-page.md).")
    result = _sphinx(bad, tmp_path / "bad-html", "-D", "maze_lab_generate=0", timeout=300)
    assert result.returncode != 0
    assert "undefined label: 'no-such-label'" in result.stderr, result.stderr[-3000:]
    assert "no-such-page" in result.stderr, result.stderr[-3000:]
    assert not (tmp_path / "bad" / "api.rst").exists()  # nothing generated with maze_lab_generate=0

