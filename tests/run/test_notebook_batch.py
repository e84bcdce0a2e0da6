"""Notebook batches: one papermill execution per parameter combination, in local processes or as Ray tasks, each
into its own run directory with the numbers of a single run, listed together by a shared batch id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("papermill")
pytest.importorskip("ipykernel")

from maze_lab.cli import main
from maze_lab.run.notebook_batch import batch_grid, batch_values, compare_batch, run_notebook_batch  # noqa: E402
from maze_lab.run.papermill_run import run_notebook  # noqa: E402
from maze_lab.run.runs import list_runs  # noqa: E402

SEEDS = (3, 5)
TRAIN_CELL = """\
import torch

torch.set_num_threads(1)
from maze_lab import RunContext

rc = RunContext(env="gym_env", algorithm="ppo", run_dir=run_dir or None, silent=True,
                overrides={"seed": seed, "log_base_dir": log_base_dir, "n_epochs": 1, "algorithm.epoch_length": 2,
                           "algorithm.n_rollout_steps": 16, "algorithm.eval_repeats": 1, "runner.concurrency": 2})
rc.train()
rc.close()
"""


@pytest.fixture(scope="module")
def notebook(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A notebook that trains PPO on CartPole for one short epoch with the seed it is given."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('seed = 0\nrun_dir = ""\nlog_base_dir = ""')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(TRAIN_CELL)]
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    path = tmp_path_factory.mktemp("nb") / "cartpole.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def single_runs(notebook: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """The reference: one plain `run_notebook` per seed."""
    base = tmp_path_factory.mktemp("single")
    return {seed: run_notebook(notebook, {"seed": seed}, log_base_dir=base)[0] for seed in SEEDS}


def _numbers(run_dir: Path | str) -> dict:
    """What a run's numbers are: its summary's metrics and its statistics without timings."""
    from maze_lab.core.log_stats.writers import StatsStore

    summary = json.loads((Path(run_dir) / "maze_lab_run.json").read_text())
    df = StatsStore.load(Path(run_dir)).to_dataframe()
    df = df[~df.event.str.startswith("time_")].reset_index(drop=True)
    metrics = {k: summary[k] for k in ("status", "epoch", "env_steps", "last_eval_reward", "best_eval_reward",
                                       "final_train_reward")}
    return {"metrics": metrics, "stats": df.to_dict("records")}


def _check_batch(table, single_runs: dict[int, Path]) -> None:
    """Two executions, each with its own run directory and seed, the numbers of the single runs, one batch id."""
    assert list(table.seed) == list(SEEDS) and list(table.status) == ["done", "done"]
    assert list(table.batch_index) == [0, 1] and table.error.isna().all()
    assert len(set(table.run_dir)) == 2
    batch_id = table.attrs["batch_id"]
    assert batch_id.startswith("cartpole-") and table.attrs["batch_name"] == "cartpole"
    for seed, run_dir, executed in zip(table.seed, table.run_dir, table.executed_notebook, strict=True):
        summary = json.loads((Path(run_dir) / "maze_lab_run.json").read_text())
        assert summary["batch_id"] == batch_id and summary["batch_size"] == 2 and summary["batch_keys"] == ["seed"]
        assert summary["parameters"]["seed"] == seed and summary["seed"] == seed
        assert Path(executed) == Path(run_dir) / "cartpole.ipynb" and Path(executed).is_file()
        assert _numbers(run_dir) == _numbers(single_runs[seed])
        assert table.set_index("seed").loc[seed, "last_eval_reward"] == summary["last_eval_reward"]


def test_values_are_split_and_typed_like_sweeps_and_run_parameters() -> None:
    values = batch_values([("seed", "1,2"), ("lr", "0.001"), ("hidden", "[64,64],[32,32]"),
                           ("overrides", "{algorithm.lr: 0.1, n_epochs: 2}"), ("name", "'a,b',c")])
    assert values == {"seed": [1, 2], "lr": [0.001], "hidden": [[64, 64], [32, 32]],
                      "overrides": [{"algorithm.lr": 0.1, "n_epochs": 2}], "name": ["a,b", "c"]}
    swept, combos = batch_grid({"seed": [1, 2], "algorithm": ("ppo", "a2c"), "n_epochs": 3, "hidden": [[64, 64]]})
    assert swept == ["seed", "algorithm"]
    assert combos == [{"seed": s, "algorithm": a, "n_epochs": 3, "hidden": [64, 64]}
                      for s in (1, 2) for a in ("ppo", "a2c")]


def test_the_cli_batch_in_two_local_processes_marks_a_failing_combination_and_finishes_the_other(
        notebook: Path, single_runs: dict[int, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = main(["run", str(notebook), "-p", "seed", f"{SEEDS[0]},oops", "--jobs", "2", "--log-base-dir",
                 str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 1
    assert out.startswith(f"maze-lab run: 2 executions of {notebook} over seed (2 values), 2 at a time")
    runs = {}
    for marker in tmp_path.glob("notebook/*/maze_lab_run.json"):
        summary = json.loads(marker.read_text())
        runs[summary["parameters"]["seed"]] = (marker.parent, summary)
    assert sorted(runs, key=str) == [SEEDS[0], "oops"]
    good_dir, good = runs[SEEDS[0]]
    bad_dir, bad = runs["oops"]
    assert good["status"] == "done" and _numbers(good_dir) == _numbers(single_runs[SEEDS[0]])
    assert bad["status"] == "failed" and bad["error"].startswith("ConfigurationError: override 'seed'")
    assert good["batch_id"] == bad["batch_id"] and {good["batch_index"], bad["batch_index"]} == {0, 1}
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in ([str(SEEDS[0])],
                                                                                              ["oops"])}
    assert rows[str(SEEDS[0])][1] == "done" and rows["oops"][1] == "failed"
    assert str(good_dir) in rows[str(SEEDS[0])] and str(bad_dir) in rows["oops"]
    assert "execution 1 (seed='oops') failed: ConfigurationError: override 'seed'" in err
    assert "1 of 2 executions did not finish" in err
    # the batch is found again from its run directories, as the CLI listed it
    table = compare_batch(good["batch_id"], tmp_path)
    assert list(table.seed) == [SEEDS[0], "oops"] and list(table.status) == ["done", "failed"]
    assert list(table.run_dir) == [str(good_dir), str(bad_dir)]
    assert table.last_eval_reward[0] == good["last_eval_reward"]
    assert table.error[1] == bad["error"] and table.attrs["batch_name"] == "cartpole"
    # `maze-lab runs` lists the batch as one group, and --group shows only it
    listed = list_runs(tmp_path)
    assert set(listed.group) == {f"batch:{good['batch_id']}"}
    assert main(["runs", "--base", str(tmp_path), "--group", good["batch_id"]]) == 0
    out = capsys.readouterr().out
    assert out.split("\n")[0].split()[:4] == ["created", "experiment", "group", "status"]
    assert out.count(f"batch:{good['batch_id']}") == 2


def test_a_batch_as_ray_tasks_gives_the_single_runs_numbers(notebook: Path, single_runs: dict[int, Path],
                                                            tmp_path: Path, local_ray: object) -> None:
    table = run_notebook_batch(notebook, {"seed": list(SEEDS)}, n_jobs=2, backend="ray", log_base_dir=tmp_path)
    _check_batch(table, single_runs)
