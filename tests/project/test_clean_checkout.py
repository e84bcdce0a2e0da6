"""The checkout stays clean while people learn with the notebooks: JupyterLab's checkpoints are ignored, and the set-up
(``scripts/setup.sh --dev``) makes nbstripout the git filter of notebooks, so that ``git add`` commits them without
outputs while the files on disk keep theirs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "notebooks").glob("*.ipynb"))


def _git(*args: str, stdin: bytes | None = None) -> bytes:
    return subprocess.run(["git", "-C", str(REPO), *args], input=stdin, capture_output=True, check=True,
                          timeout=120).stdout


@pytest.fixture(scope="module")
def checkout() -> Path:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    if b"nbstripout" not in subprocess.run(["git", "-C", str(REPO), "config", "--get", "filter.nbstripout.clean"],
                                           capture_output=True).stdout:
        pytest.fail("the nbstripout filter is not set up in this checkout: run bash scripts/setup.sh --dev")
    return REPO


def test_jupyter_checkpoints_are_ignored(checkout: Path) -> None:
    for path in ("notebooks/.ipynb_checkpoints/01_getting_started-checkpoint.ipynb", ".ipynb_checkpoints/x.ipynb"):
        assert subprocess.run(["git", "-C", str(checkout), "check-ignore", "-q", path]).returncode == 0, path


def test_notebooks_go_through_the_filter(checkout: Path) -> None:
    attributes = _git("check-attr", "filter", "diff", "--", *NOTEBOOKS).decode()
    assert attributes.count("filter: nbstripout") == len(NOTEBOOKS), attributes
    assert attributes.count("diff: ipynb") == len(NOTEBOOKS), attributes


def test_git_add_strips_outputs_and_keeps_the_cells(checkout: Path) -> None:
    """What git would store for a notebook run in JupyterLab (the clean filter applied to it, as ``git add`` does)
    has no outputs and no execution counts, and keeps the cells, their ids and sources."""
    path = "notebooks/lab.ipynb"
    notebook = json.loads((checkout / path).read_text())
    cell = notebook["cells"][0]
    cell["execution_count"] = 7
    cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["trained 20 epochs\n"]}]
    blob = _git("hash-object", "-w", f"--path={path}", "--stdin", stdin=json.dumps(notebook).encode()).strip()
    stored = json.loads(_git("cat-file", "blob", blob.decode()))
    assert stored["cells"][0]["outputs"] == [] and stored["cells"][0]["execution_count"] is None
    assert stored["cells"][0]["id"] == cell["id"] and stored["cells"][0]["source"] == cell["source"]


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_committed_notebooks_pass_the_filter_unchanged(checkout: Path, path: str) -> None:
    """A fresh set-up leaves ``git status`` clean: the filter turns every committed notebook into itself."""
    committed = _git("show", f"HEAD:{path}")
    assert _git("hash-object", f"--path={path}", "--stdin", stdin=committed).strip() == \
        _git("rev-parse", f"HEAD:{path}").strip()
