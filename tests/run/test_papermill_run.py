"""Notebook runs: notebooks/train.ipynb executed by papermill into run directories, reproducibly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("papermill")
pytest.importorskip("ipykernel")

from conf_options import listed_options

from maze_lab.core.utils.factory import ConfigurationError  # noqa: E402
from maze_lab.run.papermill_run import NotebookRunError, notebook_parameters, run_notebook  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "train.ipynb"
PARAMS = {"n_epochs": 2, "epoch_length": 2, "seed": 42,
          "overrides": {"algorithm.n_rollout_steps": 16, "runner.concurrency": 2, "algorithm.eval_repeats": 1}}


def _stats_without_timings(run_dir: Path):
    from maze_lab.core.log_stats.writers import StatsStore

    df = StatsStore.load(run_dir).to_dataframe()
    return df[~df.event.str.startswith("time_")].reset_index(drop=True)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, Path]]:
    base = tmp_path_factory.mktemp("papermill")
    return [run_notebook(NOTEBOOK, PARAMS, log_base_dir=base) for _ in range(2)]


def test_notebook_declares_its_parameters() -> None:
    params = notebook_parameters(NOTEBOOK)
    assert list(params)[:8] == ["env", "algorithm", "experiment", "overrides", "n_epochs", "seed", "run_dir",
                                "log_base_dir"]


def test_same_parameters_give_identical_statistics(two_runs: list[tuple[Path, Path]]) -> None:
    (dir_a, _), (dir_b, _) = two_runs
    assert dir_a != dir_b
    a, b = _stats_without_timings(dir_a), _stats_without_timings(dir_b)
    assert len(a) > 0 and set(a.epoch) == {1, 2}
    assert set(a.prefix) == {"train", "eval"}
    assert a.equals(b)


def test_executed_notebook_is_saved_into_the_run_directory(two_runs: list[tuple[Path, Path]]) -> None:
    import nbformat

    run_dir, executed = two_runs[0]
    assert executed == run_dir / "train.ipynb" and executed.is_file()
    assert run_dir.parent.name == "notebook"
    for name in ("config.yaml", "stats.arrows", "maze_lab_run.json", "checkpoints/state_dict_last.pt",
                 "model_graphs/policy_0.svg"):
        assert (run_dir / name).exists(), name
    nb = nbformat.read(executed, as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and f'run_dir = "{run_dir}"' in injected[0].source
    text = json.dumps([c.get("outputs", []) for c in nb.cells])
    assert f"run directory: {run_dir}" in text
    assert "<svg" in text  # the model graphs
    summary = json.loads((run_dir / "maze_lab_run.json").read_text())
    assert summary["status"] == "done" and summary["epoch"] == 2 and summary["seed"] == 42
    assert summary["executed_notebook"] == str(executed)
    assert summary["parameters"]["n_epochs"] == 2


def test_a_failing_parameter_gives_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(NotebookRunError) as info:
        run_notebook(NOTEBOOK, {**PARAMS, "algorithm": "rainbow"}, log_base_dir=tmp_path)
    err = info.value
    assert err.ename == "ConfigurationError"
    assert (f"unknown option 'rainbow' for config group 'algorithm'; valid options: {listed_options('algorithm')}"
            in str(err))
    assert "failed in cell In [" in str(err)
    assert "Traceback" in err.traceback and "rc = RunContext(" in err.traceback  # the failing cell's traceback
    assert err.traceback in str(err)
    assert err.executed_notebook.is_file() and err.executed_notebook.parent == err.run_dir
    summary = json.loads((err.run_dir / "maze_lab_run.json").read_text())
    assert summary["status"] == "failed" and "rainbow" in summary["error"]


def test_unknown_parameter_names_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="unknown parameter.*n_epoch.*valid parameters: env, algorithm"):
        run_notebook(NOTEBOOK, {"n_epoch": 1}, log_base_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        run_notebook(tmp_path / "missing.ipynb", {}, log_base_dir=tmp_path)
    assert not any(tmp_path.iterdir())  # refused before any run directory was made


# ---- the notebook's first cells in a real kernel: parameters, composition, and nothing heavy before a config error --
def run_compose_cells(params: dict, probe: str, cwd: Path, env: dict[str, str] | None = None) -> list[str]:
    """Execute train.ipynb up to its compose cell (with ``params`` injected as papermill does) and a ``probe`` cell
    in a real kernel started in ``cwd``; returns the text each code cell printed or raised."""
    import os

    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cells.append(cell)
        if "parameters" in cell.metadata.get("tags", []):
            cells.append(nbformat.v4.new_code_cell("\n".join(f"{k} = {v!r}" for k, v in params.items())))
        if "rc = RunContext(" in cell.source:
            break
    cells.append(nbformat.v4.new_code_cell(probe))
    nb.cells = cells
    kernel_env = {**{k: v for k, v in os.environ.items() if k != "MAZE_LAB_OUTPUTS"}, **(env or {})}
    NotebookClient(nb, timeout=300, allow_errors=True, resources={"metadata": {"path": str(cwd)}}).execute(
        env=kernel_env)
    texts = []
    for cell in nb.cells:
        parts = [o.get("text", "") for o in cell.outputs if o.output_type == "stream"]
        parts += [f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"]
        texts.append("".join(parts))
    return texts


PROBE = ("import json, sys\nprint(json.dumps({'heavy': sorted(m for m in ('torch', 'matplotlib') if m in sys.modules),"
         " 'config': OmegaConf.to_container(rc.config) if 'rc' in globals() else None}))")


def test_an_experiment_keeps_its_own_length_of_training(tmp_path: Path) -> None:
    out = run_compose_cells({"experiment": "cutting2d_masked_ppo"}, PROBE, tmp_path)
    cfg = json.loads(out[-1])["config"]
    assert cfg["algorithm"]["epoch_length"] == 1 and cfg["algorithm"]["n_epochs"] == 20  # the experiment's own
    assert cfg["n_epochs"] is None
    assert "training for 20 epochs of 1 update" in out[-2]
    out = run_compose_cells({"experiment": "cutting2d_masked_ppo", "n_epochs": 2, "epoch_length": 3}, PROBE, tmp_path)
    cfg = json.loads(out[-1])["config"]
    assert cfg["algorithm"]["epoch_length"] == 3 and cfg["n_epochs"] == 2  # numbers given win
    out = run_compose_cells({}, PROBE, tmp_path)
    cfg = json.loads(out[-1])["config"]
    assert cfg["algorithm"]["epoch_length"] == 10 and cfg["n_epochs"] == 3  # the tutorial's short defaults


def test_a_config_error_in_the_notebook_comes_before_torch(tmp_path: Path) -> None:
    out = run_compose_cells({"algorithm": "rainbow"}, PROBE, tmp_path)
    assert "ConfigurationError: unknown option 'rainbow' for config group 'algorithm'" in out[-2]
    assert json.loads(out[-1]) == {"heavy": [], "config": None}


def test_a_kernel_in_notebooks_writes_runs_where_the_cli_does(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "notebooks").mkdir(parents=True)
    out = run_compose_cells({}, PROBE, project / "notebooks")
    assert json.loads(out[-1])["config"]["log_base_dir"] == str(project / "outputs")
    out = run_compose_cells({}, PROBE, project / "notebooks", env={"MAZE_LAB_OUTPUTS": str(tmp_path / "shared")})
    assert json.loads(out[-1])["config"]["log_base_dir"] == str(tmp_path / "shared")
