"""RunComparison on real tiny CartPole runs: a grid over ``algorithm.lr``, damaged, deleted, failed and running
run directories, and a run that appears under the base directory after the widget was built."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest
from run_utils import TINY

from maze_lab.core.log_stats.writers import StatsStore
from maze_lab.run.run_context import RunContext
from maze_lab.run.run_dir import RunDirectory
from maze_lab.run.runs import differing_params, find_run_dirs, flatten_config
from maze_lab.widgets.comparison import METRIC_COLUMNS, RunComparison, _short_keys

EVAL, TRAIN = "eval/BaseEnvEvents/reward/mean", "train/BaseEnvEvents/reward/mean"
LRS = (1e-3, 3e-4)


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunContext, object]:
    """Two finished two-epoch CartPole runs of a grid over the learning rate, under one base directory."""
    base = tmp_path_factory.mktemp("runs")
    rc = RunContext(overrides={**TINY, "n_epochs": 2, "log_base_dir": str(base), "experiment_name": "lr_grid",
                               "algorithm.lr": list(LRS)}, multirun=True, silent=True)
    table = rc.train()
    rc.close()
    return base, rc, table


def _series(run_dir: str | Path, stat: str) -> tuple[np.ndarray, np.ndarray]:
    prefix, topic, event, name = stat.split("/")
    s = StatsStore.load(run_dir).series(topic, event, name, prefix=prefix)
    return s.index.to_numpy(), s.to_numpy()


def _params(table: object) -> list[str]:
    return [c for c in table.columns if c not in (*METRIC_COLUMNS, "error", "run_dir")]


def test_data_helpers() -> None:
    """Dotted keys, differing keys (run-specific ones and unreadable configs left out), runs by experiment."""
    a = {"algorithm": {"lr": 1e-3, "gamma": 0.98}, "model": {"hidden": [64, 64]}, "log_base_dir": "/a", "x": {}}
    b = {"algorithm": {"lr": 3e-4, "gamma": 0.98}, "model": {"hidden": [64, 64]}, "log_base_dir": "/b", "x": {}}
    assert flatten_config(a) == {"algorithm.lr": 1e-3, "algorithm.gamma": 0.98, "model.hidden": [64, 64],
                                 "log_base_dir": "/a", "x": {}}
    assert differing_params([a, b, {}]) == ["algorithm.lr"]
    assert differing_params([a, {**b, "model": {"hidden": [32]}}]) == ["algorithm.lr", "model.hidden"]
    assert differing_params([a, {k: v for k, v in a.items() if k != "x"}]) == ["x"]  # missing counts as differing
    assert differing_params([a]) == []
    assert _short_keys(["algorithm.lr", "env._target_", "model.policy._target_", "env.name"]) == {
        "algorithm.lr": "lr", "env._target_": "env._target_", "model.policy._target_": "policy._target_",
        "env.name": "name"}


def test_two_runs_with_different_learning_rates(grid: tuple) -> None:
    """The table holds exactly the differing key, curves equal each run's StatsStore series, the legend names
    each run by its learning rate, and the figures hold the same points."""
    _, _, grid_table = grid
    dirs = [Path(p) for p in grid_table.run_dir]
    cmp = RunComparison(dirs)
    try:
        assert cmp.message.value == ""
        assert cmp.differing_params() == ["algorithm.lr"]
        table = cmp.table()
        assert _params(table) == ["algorithm.lr"]
        assert list(table.status) == ["done", "done"]
        assert sorted(table["algorithm.lr"]) == sorted(LRS)
        for row, run_dir in zip(table.to_dict("records"), dirs, strict=True):
            summary = RunDirectory(run_dir).read_summary()
            assert row["run_dir"] == str(run_dir)
            assert row["algorithm.lr"] == RunDirectory(run_dir).read_config()["algorithm"]["lr"]
            epochs, values = _series(run_dir, EVAL)
            assert row["epochs"] == 2 == summary["epoch"]
            assert row["env_steps"] == summary["env_steps"]
            assert row["final_eval_reward"] == values[-1]
            assert row["best_eval_reward"] == values.max() == summary["best_eval_reward"]
            assert row["final_train_reward"] == pytest.approx(summary["final_train_reward"])
        for stat in (EVAL, TRAIN, "train/ActorCriticEvents/policy_loss/0"):
            curves = cmp.curves(stat)
            assert list(curves) == cmp.runs
            for (epochs, values), run_dir in zip(curves.values(), dirs, strict=True):
                want_epochs, want_values = _series(run_dir, stat)
                np.testing.assert_array_equal(epochs, want_epochs)
                np.testing.assert_array_equal(values, want_values)
        assert cmp.selected == [EVAL, TRAIN]  # the defaults
        assert EVAL in cmp.stat_select.options and "train/ActorCriticEvents/policy_loss/0" in cmp.statistics()
        assert [f.layout.title.text for f in cmp.curve_box.children] == [EVAL, TRAIN]
        fig = cmp.curve_box.children[0]
        legend = {t.name for t in fig.data}
        assert legend == {"lr=0.001", "lr=0.0003"}
        # the cockpit's look: white, the bare template, axis titles, the toolbar down the side
        assert (fig.layout.template.layout.to_plotly_json() == {} and fig.layout.plot_bgcolor == "#fff"
                and fig.layout.modebar.orientation == "v" and fig.layout.xaxis.title.text == "epoch"
                and fig.layout.yaxis.title.text == "reward"), fig.layout
        colours = [t.line.color for t in fig.data]
        assert len(set(colours)) == 2
        for trace, (epochs, values) in zip(fig.data, cmp.curves(EVAL).values(), strict=True):
            np.testing.assert_array_equal(trace.x, epochs)
            np.testing.assert_array_equal(trace.y, values)
        # picking another statistic adds its figure; the traces of the others stay the same objects
        first = fig.data[0]
        cmp.stat_select.value = (EVAL, "train/ActorCriticEvents/policy_loss/0")
        assert [f.layout.title.text for f in cmp.curve_box.children] == [EVAL, "train/ActorCriticEvents/policy_loss/0"]
        assert cmp.curve_box.children[0].data[0] is first
        assert "algorithm.lr" in cmp.table_html.value and "final_eval_reward" in cmp.table_html.value
        # sorting the table by the learning rate, descending
        cmp.sort_by.value, cmp.descending.value = "algorithm.lr", True
        html = cmp.table_html.value
        assert html.index("0.001") < html.index("0.0003")
        assert cmp.update() is False  # nothing changed: nothing redrawn
    finally:
        cmp.close()
    assert cmp.update() is False  # closed: inert, no error


def test_grid_context_and_grid_table(grid: tuple) -> None:
    """A multirun RunContext and the table its train() returned give the same runs; the parallel-coordinates view
    has the grid key and the final metric."""
    _, rc, grid_table = grid
    for source in (rc, grid_table):
        cmp = RunComparison(source)
        try:
            assert cmp.grid_keys == ["algorithm.lr"]
            assert [Path(p) for p in cmp.table().run_dir] == [Path(p) for p in grid_table.run_dir]
            dims = cmp.parcoords.data[0].dimensions
            assert [d.label for d in dims] == ["algorithm.lr", "final_eval_reward"]
            assert sorted(dims[0]["values"]) == sorted(LRS)
            table = cmp.table()
            assert list(dims[1]["values"]) == list(table.final_eval_reward)
            cmp.parcoords_metric.value = "best_eval_reward"
            assert cmp.parcoords.data[0].dimensions[-1].label == "best_eval_reward"
            assert cmp.message.value == ""
        finally:
            cmp.close()


def test_damaged_deleted_failed_and_running_runs(grid: tuple, tmp_path: Path) -> None:
    """Runs that cannot be read, are gone, failed or still run are listed with their status; the widget builds
    and goes on updating."""
    _, _, grid_table = grid
    good = [Path(p) for p in grid_table.run_dir]
    damaged = tmp_path / "lr_grid" / "damaged"
    damaged.mkdir(parents=True)
    (damaged / "maze_lab_run.json").write_text("")
    failed = tmp_path / "lr_grid" / "failed"
    shutil.copytree(good[0], failed)
    RunDirectory(failed).write_summary(status="failed", reason="RuntimeError: boom",
                                       error="Traceback (most recent call last):\n  ...\nRuntimeError: boom")
    running = tmp_path / "lr_grid" / "running"  # as another process's run between two epochs
    shutil.copytree(good[1], running)
    RunDirectory(running).write_summary(status="running")
    going = tmp_path / "lr_grid" / "going"
    shutil.copytree(good[1], going)
    never = tmp_path / "lr_grid" / "never_was"
    base = tmp_path  # given as if it were a run: it is listed as not one, with the hint to compare what it holds
    cmp = RunComparison([*good, damaged, failed, running, going, never, base])
    try:
        assert cmp.message.value == ""
        table = cmp.table().set_index("run_dir")
        status = table.status.to_dict()
        assert status[str(damaged)] == "damaged" and "is empty" in table.error[str(damaged)]
        assert status[str(never)] == "deleted"
        assert status[str(failed)] == "failed" and table.error[str(failed)] == "RuntimeError: boom"
        assert status[str(running)] == "running"
        assert status[str(going)] == "done"
        assert status[str(base)] == "not a run" and "RunComparison.from_base_dir" in table.error[str(base)]
        assert _params(cmp.table()) == ["algorithm.lr"]  # the unreadable runs add no differences
        assert cmp.live  # a run is still going: the widget keeps updating once shown
        for word in ("damaged", "deleted", "failed", "running"):
            assert f">{word}<" in cmp.table_html.value
        assert "damaged" in cmp.header.value and "deleted" in cmp.header.value
        assert len(cmp.curves(EVAL)) == 5  # the copies have statistics, the broken ones none
        shutil.rmtree(going)  # deleted while the widget is open
        RunDirectory(running).write_summary(status="done")
        assert cmp.update() is True
        table = cmp.table().set_index("run_dir")
        assert table.status[str(going)] == "deleted" and table.status[str(running)] == "done"
        assert cmp.message.value == ""
        assert len(cmp.curves(EVAL)) == 5  # what was read of the deleted run stays shown
    finally:
        cmp.close()


def test_new_run_under_the_base_dir_is_picked_up(grid: tuple, tmp_path: Path) -> None:
    """from_base_dir(experiment=...) lists that experiment's runs; a run started later (in the background) appears
    on update() with its status, and its curves follow its statistics to the end."""
    base, _, grid_table = grid
    for run_dir in grid_table.run_dir:
        shutil.copytree(run_dir, tmp_path / "lr_grid" / Path(run_dir).name)
    (tmp_path / "elsewhere" / "x").mkdir(parents=True)  # another experiment: not listed
    shutil.copy(Path(grid_table.run_dir[0]) / "maze_lab_run.json", tmp_path / "elsewhere" / "x")
    RunDirectory(tmp_path / "elsewhere" / "x").write_summary(experiment="elsewhere")
    assert len(find_run_dirs(tmp_path)) == 3 and len(find_run_dirs(tmp_path, "lr_grid")) == 2
    cmp = RunComparison.from_base_dir(tmp_path, experiment="lr_grid")
    try:
        assert len(cmp.runs) == 2 and cmp.live
        assert cmp.update() is False
        before = list(cmp.curve_box.children[0].data)
        rc = RunContext(overrides={**TINY, "n_epochs": 2, "log_base_dir": str(tmp_path), "experiment_name": "lr_grid"},
                        silent=True)
        handle = rc.train_async()
        live = RunComparison([handle, *grid_table.run_dir])  # the handle itself: status and store of this kernel
        try:
            assert cmp.update() is True
            assert len(cmp.runs) == 3
            row = cmp.table().set_index("run_dir").loc[str(rc.run_dir)]
            assert row.status in ("created", "starting", "running", "done")
            assert live.table().status[0] in ("starting", "running", "done")
            assert handle.wait(timeout=240) == "done"
            live.update()
            assert live.table().status[0] == "done" and live.table().epochs[0] == 2
            np.testing.assert_array_equal(live.curves(EVAL)[live.runs[0]][1], _series(rc.run_dir, EVAL)[1])
            assert live.message.value == ""
        finally:
            handle.stop()
            rc.close()
            live.close()
        cmp.update()
        table = cmp.table().set_index("run_dir")
        assert table.status[str(rc.run_dir)] == "done" and table.epochs[str(rc.run_dir)] == 2
        epochs, values = _series(rc.run_dir, EVAL)
        new = cmp.curves(EVAL)[cmp.table().run[2]]
        np.testing.assert_array_equal(new[0], epochs)
        np.testing.assert_array_equal(new[1], values)
        assert _params(cmp.table()) == ["algorithm.lr"]  # the new run has the default learning rate
        fig = cmp.curve_box.children[0]
        assert len(fig.data) == 3 and "lr=0.00025" in {t.name for t in fig.data}
        assert all(a is b for a, b in zip(fig.data[:2], before, strict=True))  # updated in place, not re-added
        assert cmp.message.value == ""
    finally:
        cmp.close()


def test_polling_ends_for_finished_runs_and_close_cancels_it(grid: tuple, tmp_path: Path) -> None:
    """Finished runs: the poll updates once and ends by itself; a watched base directory keeps polling until
    close() cancels it."""
    _, _, grid_table = grid
    finished = RunComparison(list(grid_table.run_dir), refresh_seconds=0.01)
    watched = RunComparison.from_base_dir(tmp_path, refresh_seconds=0.01)
    assert not finished.live and watched.live and watched.runs == []

    async def scenario() -> None:
        finished.start()
        watched.start()
        await asyncio.wait_for(finished._task, timeout=60)  # ends by itself: nothing can change any more
        shutil.copytree(grid_table.run_dir[0], tmp_path / "lr_grid" / "copy")
        while not watched.runs:  # picked up by the poll; the timeout bounds the wait
            await asyncio.sleep(0.01)
        task = watched._task
        watched.close()
        await asyncio.sleep(0)
        assert task.cancelled()

    try:
        asyncio.run(asyncio.wait_for(scenario(), timeout=60))
        assert watched.runs == ["lr_grid/copy"]
    finally:
        finished.close()


def test_runs_that_nothing_else_tells_apart_are_labelled_by_seed_and_start_time(tmp_path: Path) -> None:
    runs = []
    for seed in (1, 2, 2):
        rc = RunContext(overrides={**TINY, "seed": seed, "log_base_dir": str(tmp_path)}, silent=True)
        rc.train()
        rc.close()
        runs.append(rc.run_dir)
    summaries = [RunDirectory(r).read_summary() for r in runs]
    cmp = RunComparison(runs[:2])
    try:
        # the seed differs: it is what tells the curves apart
        labels = [e.label for e in cmp._entries.values()]
        assert labels == ["seed=1", "seed=2"], labels
    finally:
        cmp.close()
    cmp = RunComparison(runs[1:])
    try:  # the same settings, the same seed: seed and start time (and the run's name where even that is equal)
        labels = [e.label for e in cmp._entries.values()]
        for label, summary in zip(labels, summaries[1:], strict=True):
            assert label.startswith(f"seed 2, {summary['started'].split('T')[1][:8]}"), labels
        assert len(set(labels)) == 2, labels
    finally:
        cmp.close()
