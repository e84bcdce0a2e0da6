"""Sweeps as Ray tasks: the grid points of a sweep run as Ray tasks with the numbers of local worker processes;
failed points are listed and the others go on; a task whose worker dies is reported, not retried."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from maze_lab.run.ray_tasks import RayTaskFailed, run_as_ray_tasks  # noqa: E402
from maze_lab.run.run_context import RunContext  # noqa: E402

GRID = {"seed": [3, 5], "env.name": ["CartPole-v1", "NoSuchEnv-v0"]}
TINY = {"n_epochs": 1, "algorithm.epoch_length": 2, "algorithm.n_rollout_steps": 16, "runner.concurrency": 2,
        "algorithm.eval_repeats": 1}
METRICS = ["seed", "env.name", "status", "epoch", "env_steps", "best_eval_reward", "last_eval_reward",
           "final_train_reward"]


def _sweep(base: Path, launcher: str) -> tuple[RunContext, object]:
    rc = RunContext(overrides={**TINY, **GRID, "log_base_dir": str(base)}, multirun=True, n_jobs=2,
                    launcher=launcher, silent=True)
    return rc, rc.train()


def _stats(run_dir: Path) -> list[dict]:
    from maze_lab.core.log_stats.writers import StatsStore

    df = StatsStore.load(Path(run_dir)).to_dataframe()
    return df[~df.event.str.startswith("time_")].reset_index(drop=True).to_dict("records")


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory: pytest.TempPathFactory) -> object:
    """The reference: the sweep in two local worker processes."""
    return _sweep(tmp_path_factory.mktemp("local"), "local")[1]


def test_a_sweep_as_ray_tasks_gives_the_numbers_of_local_jobs(tmp_path: Path, local_sweep: object,
                                                              local_ray: object) -> None:
    local = local_sweep
    rc, remote = _sweep(tmp_path / "ray", "ray")
    assert list(remote.status) == ["done", "failed", "done", "failed"]  # seed x env.name, in grid order
    assert remote[METRICS].equals(local[METRICS])
    assert remote.last_eval_reward.notna().sum() == 2
    for ray_dir, local_dir, status in zip(remote.run_dir, local.run_dir, remote.status, strict=True):
        assert Path(ray_dir).parent == tmp_path / "ray" / "default"
        if status == "done":
            assert _stats(ray_dir) == _stats(local_dir)
    # the failed points are listed with their errors, and their run directories say why
    assert [path for path, _ in rc.failures] == [Path(p) for p in remote.run_dir[remote.status == "failed"]]
    for path, err in rc.failures:
        assert "NoSuchEnv-v0" in str(err)
        summary = json.loads((path / "maze_lab_run.json").read_text())
        assert summary["status"] == "failed" and "NoSuchEnv-v0" in summary["error"]
    # each sweep's runs (failed ones included) share one group in the runs table, in grid order
    from maze_lab.run.runs import list_runs

    for base, table in ((tmp_path / "ray", remote), (Path(local.run_dir[0]).parent.parent, local)):
        listed = list_runs(base)
        assert len(set(listed.group)) == 1 and listed.group[0].startswith("sweep:sweep-")
        indices = [json.loads((Path(d) / "maze_lab_run.json").read_text())["sweep_index"] for d in table.run_dir]
        assert indices == [0, 1, 2, 3]
    assert list_runs(tmp_path / "ray").group[0] != list_runs(Path(local.run_dir[0]).parent.parent).group[0]
    # a sweep is compared as a grid from its group alone: the comparison widget over the base directory
    from maze_lab.widgets.comparison import RunComparison

    group = list_runs(tmp_path / "ray").group[0]
    (tmp_path / "ray" / "default" / "unrelated").mkdir()  # a run of no group beside the sweep's
    (tmp_path / "ray" / "default" / "unrelated" / "maze_lab_run.json").write_text('{"status": "done"}')
    cmp = RunComparison.from_base_dir(tmp_path / "ray", group=group)
    try:
        assert sorted(cmp.table().run_dir) == sorted(remote.run_dir)
        assert set(cmp.differing_params()) == {"seed", "env.name"}
    finally:
        cmp.close()


def test_a_running_ray_is_joined_by_its_address(local_ray: object) -> None:
    import subprocess
    import sys

    address = ray.get_runtime_context().gcs_address  # this module's Ray, joined as a cluster would be
    code = (f"from maze_lab.run.ray_tasks import run_as_ray_tasks\n"
            f"print(run_as_ray_tasks(pow, [(2, 5), (3, 2)], n_jobs=2, address={address!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[32, 9]"
    assert "Started a local Ray" not in proc.stderr


def test_a_task_whose_worker_dies_is_reported_and_the_others_finish(local_ray: object) -> None:
    import operator

    results = run_as_ray_tasks(operator.call, [(pow, 2, 5), (os._exit, 3), (pow, 3, 2)], n_jobs=2)
    assert isinstance(results[1], RayTaskFailed) and "Ray task 1 ended without a result" in str(results[1])
    assert results[0] == 32 and results[2] == 9


def test_objects_and_a_cluster_address_without_ray_are_refused(tmp_path: Path) -> None:
    from maze_lab.core.utils.factory import ConfigurationError

    with pytest.raises(ConfigurationError, match="launcher 'dask' is not one of local, ray"):
        RunContext(overrides={"seed": [1, 2]}, multirun=True, launcher="dask")
    with pytest.raises(ConfigurationError, match="names a Ray cluster; pass launcher='ray'"):
        RunContext(overrides={"seed": [1, 2]}, multirun=True, ray_address="auto")
    rc = RunContext(env=lambda: None, overrides={"seed": [1, 2], "log_base_dir": str(tmp_path)}, multirun=True,
                    launcher="ray")
    with pytest.raises(ConfigurationError, match="cannot be sent to worker processes or Ray tasks"):
        rc.train()


def test_an_address_where_no_ray_answers_is_refused_at_once(tmp_path: Path) -> None:
    import socket
    from unittest import mock

    from maze_lab.core.utils.factory import ConfigurationError

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rc = RunContext(overrides={**TINY, "seed": [1, 2], "log_base_dir": str(tmp_path)}, multirun=True,
                    launcher="ray", ray_address=f"127.0.0.1:{port}")
    with mock.patch.object(ray, "is_initialized", return_value=False):  # as in a process without Ray
        with pytest.raises(ConfigurationError, match=rf"no Ray cluster answers at 127.0.0.1:{port} .*ray start "
                                                     rf"--head"):
            rc.train()
    assert not any(tmp_path.iterdir())  # no run directory was made
