"""The notebooks of the manual (``notebooks/``): committed without outputs, and each one executed with papermill in
the real ``maze-lab`` kernel with its default parameters, asserting on what it produced (the numbers it printed,
the widgets it showed, the run directory it wrote)."""

from __future__ import annotations

import json

import pytest
from notebook_utils import (
    NOTEBOOKS,
    cell_with,
    cells,
    execute_with_summary,
    mime_types,
    text_of,
)

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

APPS = {"lab.ipynb"}
"""Notebooks that are apps served by voila (``maze-lab lab``), not papermill runs: no parameters cell."""


def _notebooks() -> list:
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def test_committed_notebooks_have_no_outputs() -> None:
    """Executed copies are not committed: every notebook in the repository has no outputs and no execution counts,
    and every notebook that is a papermill run has a cell tagged ``parameters``."""
    notebooks = _notebooks()
    assert any(p.name == "01_getting_started.ipynb" for p in notebooks)
    problems = []
    for path in notebooks:
        nb = json.loads(path.read_text())
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] != "code":
                continue
            if cell.get("outputs"):
                problems.append(f"{path.name}: code cell {i} has outputs (clear them before committing)")
            if cell.get("execution_count") is not None:
                problems.append(f"{path.name}: code cell {i} has execution count {cell['execution_count']}")
        tagged = [c for c in cells(nb) if "parameters" in c.get("metadata", {}).get("tags", [])]
        if path.name not in APPS and len(tagged) != 1:
            problems.append(f"{path.name}: {len(tagged)} cells tagged 'parameters' (papermill needs exactly one)")
        if nb.get("metadata", {}).get("kernelspec", {}).get("name") != "python3":
            problems.append(f"{path.name}: kernelspec is not the stock 'python3'")
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def getting_started(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """``01_getting_started.ipynb`` executed once with its defaults: (run directory, executed notebook, summary)."""
    return execute_with_summary("01_getting_started.ipynb", tmp_path_factory)


def test_01_getting_started_learns(getting_started: tuple) -> None:
    """PPO learns CartPole within the notebook's default budget on its fixed seed, the wait ends with the run done,
    and ``compute_action`` returns an action of the env's action space."""
    run_dir, nb, summary = getting_started
    # a random policy keeps the pole up for about 20 steps; the default seed reaches about 487 of 500 here
    assert summary["eval_reward"] >= 300, summary
    assert summary["status"] == "done"
    assert summary["epochs"] == 20
    assert summary["action_in_space"] is True
    assert set(summary["action"]) == {"action"} and summary["action"]["action"] in (0, 1)
    # the papermill run trained into the directory run_notebook made for it
    assert summary["run_dir"] == str(run_dir)
    # the pause / resume cell shows the status after each call
    control = text_of(cell_with(nb, "handle.pause()"))
    assert "after pause:  paused" in control and "after resume: running" in control
    assert "run done after 20 epochs" in text_of(cell_with(nb, "await handle.wait_async()"))


def test_01_getting_started_shows_cockpit_and_viewer(getting_started: tuple) -> None:
    """The cockpit and the trajectory viewer are live widgets, the env and the learning curve are pictures, and the
    recorded episode has a frame for every step."""
    _, nb, summary = getting_started
    assert WIDGET_VIEW in mime_types(cell_with(nb, "TrainingDashboard(handle)"))
    assert WIDGET_VIEW in mime_types(cell_with(nb, "TrajectoryViewer("))
    assert "image/png" in mime_types(cell_with(nb, "env.render()"))
    assert "application/vnd.plotly.v1+json" in mime_types(cell_with(nb, "px.line("))
    assert summary["frames"] > 0
    assert summary["frames"] == summary["rollout_steps"]
    assert "Traceback" not in "".join(text_of(c) for c in cells(nb))


def test_01_getting_started_run_directory(getting_started: tuple) -> None:
    """The run directory holds the statistics, the checkpoints, the recorded trajectory and the executed notebook,
    and reads back with load_run: status done, and an evaluation curve that rises."""
    from maze_lab import load_run

    run_dir, nb, summary = getting_started
    assert (run_dir / "stats.arrows").is_file()
    assert (run_dir / "checkpoints" / "state_dict_best.pt").is_file()
    assert (run_dir / "checkpoints" / "state_dict_last.pt").is_file()
    assert len(list((run_dir / "trajectories").glob("*.trajectory.zip"))) == 1
    assert (run_dir / "01_getting_started.ipynb").is_file()
    listing = text_of(cell_with(nb, "rc.run_dir.iterdir()"))
    for name in ("stats.arrows", "checkpoints/", "trajectories/", "config.yaml"):
        assert name in listing

    run = load_run(run_dir)
    assert run.summary["status"] == "done"
    stats = run.stats.to_dataframe()
    evals = stats[(stats.prefix == "eval") & (stats.event == "reward") & (stats.name == "mean")]
    # the evaluation after each epoch (the notebook's own rc.evaluate() adds a row to the last epoch)
    per_epoch = evals.groupby("epoch").value.first()
    assert list(per_epoch.index) == list(range(1, 21))
    assert per_epoch.iloc[-1] > per_epoch.iloc[0] + 100
    assert "status: done" in text_of(cell_with(nb, "load_run(rc.run_dir)"))


def test_every_notebook_is_executed_by_a_test() -> None:
    """Each notebook of ``notebooks/`` is executed in a kernel by some test (papermill through ``execute`` /
    ``run_notebook``, or voila for the Lab app), besides the JupyterLab run of every notebook in
    ``test_notebooks_browser.py``: a new notebook without a test fails here."""
    from notebook_utils import REPO

    tests = [p for p in (REPO / "tests").rglob("test_*.py") if p.name != "test_notebooks_browser.py"]
    sources = "\n".join(p.read_text() for p in tests)
    missing = [p.name for p in _notebooks() if f'"{p.name}"' not in sources and f"'{p.name}'" not in sources
               and f'"{p.stem}"' not in sources and f"/ \"{p.name}\"" not in sources]
    assert not missing, f"notebooks that no test executes: {missing}"
