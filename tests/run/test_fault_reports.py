"""Faults that lost data or hid their cause: a full disk during training and during `maze-lab rollout`, a statistics
file replaced under a follower, a run deleted while runs are listed, a Ray worker killed under `runner=ray` PPO, a
resume from a run of other spaces, bad `n_epochs` / `batch_size` values and an unreachable `RAY_ADDRESS`. Each is
reported in one true line, and what was saved before stays intact."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from file_utils import small_tmpfs
from run_utils import TINY, maze_lab_command, run_maze_lab, train_tiny_run

from maze_lab.core.log_stats.aggregation import StatKey
from maze_lab.core.log_stats.base_events import BaseEnvEvents
from maze_lab.core.log_stats.stats_files import STATS_FILE, read_stats_file
from maze_lab.core.log_stats.writers import StatsStore, epoch_commit
from maze_lab.core.trajectory import load_episode
from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.run.run_context import RunContext
from maze_lab.run.runs import list_runs
from maze_lab.train.trainers.common.checkpoints import read_checkpoint

TINY_ARGS = [f"{k}={v}" for k, v in TINY.items()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished one-epoch CartPole run."""
    return train_tiny_run(tmp_path_factory.mktemp("trained"))


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs mounted at a fresh directory (skipped where it cannot be mounted)."""
    with small_tmpfs(tmp_path, "8m") as mount_point:
        yield mount_point


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _fill_to(disk: Path, free: int) -> None:
    """Take the disk's free space down to about ``free`` bytes with a file of zeros."""
    with (disk / "filler").open("wb") as fh:
        fh.write(b"\0" * max(0, _free(disk) - free))


def _stray_temporaries(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.name.endswith(".tmp")]


def _one_error_line(stderr: str, command: str) -> str:
    """The one line a command printed on stderr (Ray's own log lines aside); fails on a traceback or more lines."""
    ray_log = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(INFO|WARNING)\s")
    lines = [line for line in stderr.splitlines() if line.strip() and not ray_log.match(line)]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith(f"maze-lab {command}: error: "), stderr[-3000:]
    return lines[0]


def _only_run_dir(base: Path) -> Path:
    found = [p.parent for p in base.glob("**/maze_lab_run.json")]
    assert len(found) == 1, found
    return found[0]


# ---- a full disk -----------------------------------------------------------------------------------------------
def test_a_full_disk_in_training_never_leaves_a_checkpoint_ahead_of_its_statistics(small_disk: Path) -> None:
    # how much a one-epoch run writes, and how much of it the statistics are (sizes of this machine's files)
    args = ["train", "--silent", *TINY_ARGS, "algorithm.n_rollout_steps=2500"]
    before = _free(small_disk)
    first = run_maze_lab(*args, f"log_base_dir={small_disk / 'measure'}", cwd=small_disk)
    assert first.returncode == 0, first.stderr
    used = before - _free(small_disk)
    stats = (_only_run_dir(small_disk / "measure") / STATS_FILE).stat().st_blocks * 512
    shutil.rmtree(small_disk / "measure")
    # everything but half of the statistics fits: the statistics, written last, meet the full disk (they reached
    # the disk about a second after the checkpoint that claimed their epoch)
    _fill_to(small_disk, used - stats // 2)
    outputs = small_disk / "outputs"
    proc = run_maze_lab(*args, f"log_base_dir={outputs}", cwd=small_disk)
    run_dir = _only_run_dir(outputs)
    assert json.loads((run_dir / "maze_lab_run.json").read_text())["status"] == "failed"
    epochs = read_stats_file(run_dir / STATS_FILE).epochs if (run_dir / STATS_FILE).exists() else 0
    last = run_dir / "checkpoints" / "state_dict_last.pt"
    checkpoint_epoch = read_checkpoint(last)["epoch"] if last.exists() else 0
    assert checkpoint_epoch <= epochs, f"the checkpoint claims epoch {checkpoint_epoch}, the statistics hold {epochs}"
    assert _stray_temporaries(run_dir) == []
    assert proc.returncode == 1, proc.stderr
    line = _one_error_line(proc.stderr, "train")
    assert "No space left on device" in line and "marked failed" in line


def test_a_full_disk_in_rollout_is_one_line_and_keeps_the_episodes_written(trained: Path,
                                                                          small_disk: Path) -> None:
    run = small_disk / "run"
    shutil.copytree(trained, run)
    measured = run_maze_lab("rollout", str(run), "--episodes", "1", "--seed", "0", cwd=small_disk)
    assert measured.returncode == 0, measured.stderr
    episode = sum(p.stat().st_blocks * 512 for p in (run / "trajectories").iterdir())
    shutil.rmtree(run / "trajectories")
    _fill_to(small_disk, episode * 3 // 2)  # room for the first episode (the same one again), not for ten
    proc = run_maze_lab("rollout", str(run), "--episodes", "10", "--seed", "0", cwd=small_disk)
    episodes = sorted((run / "trajectories").glob("*.trajectory.zip"))
    assert 1 <= len(episodes) < 10
    for path in episodes:  # every episode written before the disk filled is whole
        assert len(load_episode(path).steps) > 0
    assert _stray_temporaries(run) == []
    assert proc.returncode == 1, proc.stderr
    line = _one_error_line(proc.stderr, "rollout")
    assert "No space left on device" in line and str(run / "trajectories") in line


# ---- a statistics file replaced under a follower -----------------------------------------------------------------
REWARD = StatKey(BaseEnvEvents.reward, "mean", None)


def _stats_file(directory: Path, values: list[float]) -> Path:
    """A ``stats.arrows`` of one epoch per value (the train reward mean), written as a run writes it."""
    store = StatsStore(directory=directory)
    for epoch, value in enumerate(values, start=1):
        with epoch_commit([store], epoch):
            store.write("train", epoch, {REWARD: value})
    store.close()
    return directory / STATS_FILE


def test_a_stats_file_replaced_under_a_follower_is_read_anew(trained: Path, tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    from maze_lab.widgets.comparison import RunComparison
    from maze_lab.widgets.sources import RunSource

    run = shutil.copytree(trained, tmp_path / "run")
    shutil.copyfile(_stats_file(tmp_path / "a", [10.0, 20.0, 30.0]), run / STATS_FILE)
    other = _stats_file(tmp_path / "b", [1.0, 2.0, 3.0])  # another run's: just as long, other values
    longer = _stats_file(tmp_path / "c", [5.0, 6.0, 7.0, 8.0])

    source = RunSource(run)
    cmp = RunComparison([run])
    try:
        def seen() -> list[float]:
            return source.store.series("BaseEnvEvents", "reward", "mean", prefix="train").tolist()

        def compared() -> list[float]:
            return list(next(iter(cmp.curves("train/BaseEnvEvents/reward/mean").values()))[1])

        source.refresh()
        cmp.update()
        assert seen() == compared() == [10.0, 20.0, 30.0]
        version = source.version
        shutil.copyfile(other, run / STATS_FILE)  # written into the same file (same inode, same size)
        assert source.refresh() is True and source.version > version
        assert seen() == [1.0, 2.0, 3.0] and "replaced" in source.notice
        cmp.update()
        assert compared() == [1.0, 2.0, 3.0]
        shutil.copyfile(longer, tmp_path / "renamed")
        os.replace(tmp_path / "renamed", run / STATS_FILE)  # renamed over it (a new inode)
        assert source.refresh() is True and seen() == [5.0, 6.0, 7.0, 8.0]
        cmp.update()
        assert compared() == [5.0, 6.0, 7.0, 8.0]
        # a run appending to the file it follows is no replacement: only the new epoch is read
        writer = StatsStore.load(run)
        writer.persist_to(run)
        with epoch_commit([writer], 5):
            writer.write("train", 5, {REWARD: 9.0})
        writer.close()
        notice, version = source.notice, source.version
        assert source.refresh() is True and source.version == version + 1 and source.notice == notice
        assert seen() == [5.0, 6.0, 7.0, 8.0, 9.0]
    finally:
        cmp.close()


# ---- a run deleted while runs are listed ------------------------------------------------------------------------
def test_a_run_deleted_while_runs_are_listed_is_left_out(trained: Path, tmp_path: Path) -> None:
    base = tmp_path / "outputs"
    for i in range(12):
        shutil.copytree(trained, base / f"exp{i % 3}" / f"run{i}")
    stop = threading.Event()
    churned = [0]

    def churn() -> None:  # another process deleting and making runs under the same base directory
        i = 0
        while not stop.is_set():
            run = base / f"exp{i % 3}" / f"run{i % 12}"
            shutil.rmtree(run, ignore_errors=True)
            # a run appears whole, as a run writes its summary (a temporary file renamed into place): a copy made in
            # place would show a half-copied, empty summary, which is rightly listed as damaged
            staged = tmp_path / "staging" / f"run{i}"
            shutil.copytree(trained, staged)
            staged.rename(run)
            churned[0] += 1
            i += 1

    app = None
    if importlib.util.find_spec("ipywidgets") is not None:
        from maze_lab.widgets.lab_app import LabApp

        app = LabApp(base)
    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        listings = 0
        while listings < 12 and time.monotonic() < deadline:
            table = list_runs(base)  # raised FileNotFoundError for a directory deleted while it was walked
            listings += 1
            damaged = table[table.status == "damaged"]
            assert damaged.empty, damaged.reason.tolist()  # a vanished run is left out, not shown as damaged
            assert set(table.status) <= {"done"}
            if app is not None:
                app.tick()  # the Lab app's runs list showed "runs list: FileNotFoundError"
                assert not app.errors, app.errors
    finally:
        stop.set()
        thread.join(60)
        if app is not None:
            app.close()
    assert listings >= 3 and churned[0] >= listings  # the listings ran while runs were deleted


# ---- a Ray worker killed under runner=ray PPO ---------------------------------------------------------------------
def _descendants(pid: int) -> set[int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # ended meanwhile
    found, grew = {pid}, True
    while grew:
        new = {child for child, parent in parents.items() if parent in found and child not in found}
        found |= new
        grew = bool(new)
    return found - {pid}


def _gone(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) == "Z"
    except OSError:
        return True


def _wait_for(what: str, condition: Callable[[], Any], timeout: float, proc: subprocess.Popen | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"maze-lab train ended before {what}: {out[-2000:]}\n{err[-3000:]}")
        time.sleep(0.1)
    pytest.fail(f"no {what} within {timeout} s")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the Ray worker processes in /proc")
def test_a_killed_ray_worker_is_named_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    outputs = tmp_path / "outputs"
    proc = subprocess.Popen([*maze_lab_command(), "train", "--silent", "runner=ray", "n_epochs=0",
                             "algorithm.patience=0", "algorithm.epoch_length=2", "algorithm.n_rollout_steps=16",
                             "algorithm.eval_repeats=1", "runner.n_workers=2", "runner.envs_per_worker=1",
                             f"log_base_dir={outputs}"], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def trained_an_epoch() -> Path | None:
            for summary in outputs.glob("**/maze_lab_run.json"):
                try:
                    if (json.loads(summary.read_text()).get("epoch") or 0) >= 1:
                        return summary.parent
                except ValueError:
                    pass  # being written
            return None

        run_dir = _wait_for("a finished epoch", trained_an_epoch, 240, proc)
        # paused between two updates, the next thing that meets the workers is the requested checkpoint (it reads
        # the workers' normalization statistics): where that took a dead worker for "no normalization", the user
        # got "RuntimeError: this RayEnvGroup is closed" at the next rollout instead
        assert run_maze_lab("pause", str(run_dir), cwd=tmp_path).returncode == 0

        def workers() -> list[int]:
            found = []
            for pid in _descendants(proc.pid):
                try:
                    if b"_RolloutWorker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        found.append(pid)
                except OSError:
                    continue
            return sorted(found)

        victim = _wait_for("two Ray rollout workers", lambda: (found := workers()) and len(found) == 2 and found,
                           60)[0]
        os.kill(victim, signal.SIGKILL)
        _wait_for("the killed worker to end", lambda: _gone(victim), 30)
        run_maze_lab("checkpoint", str(run_dir), cwd=tmp_path)
        run_maze_lab("resume", str(run_dir), cwd=tmp_path)  # refused where the run has failed already
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, err[-3000:]
    line = _one_error_line(err, "train")
    assert "RayWorkerError" in line and f"(pid {victim}) died" in line and "RayEnvGroup is closed" not in err
    assert json.loads((run_dir / "maze_lab_run.json").read_text())["status"] == "failed"


# ---- resuming a run of other spaces --------------------------------------------------------------------------------
def test_resume_from_a_run_of_other_spaces_names_run_key_parameter_and_shapes(trained: Path,
                                                                               tmp_path: Path) -> None:
    proc = run_maze_lab("train", "--silent", *TINY_ARGS, "env.name=Acrobot-v1", f"input_dir={trained}",
                        f"log_base_dir={tmp_path / 'outputs'}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = _one_error_line(proc.stderr, "train")
    assert f"input_dir={trained}: its checkpoint state_dict_last.pt does not fit this run's model" in line
    assert ("policy key 0 (policy_0) parameter perception_net.perception_dict.latent.net.0.weight has shape [64, 4] "
            "in the checkpoint and [64, 6] in this run's model") in line
    assert "size mismatch" not in line and "copying a param" not in line  # not torch's dump of every tensor


# ---- values that cannot work -------------------------------------------------------------------------------------
def test_a_non_integer_n_epochs_is_one_line(tmp_path: Path) -> None:
    proc = run_maze_lab("train", "n_epochs=abc", cwd=tmp_path)
    assert proc.returncode == 2
    line = _one_error_line(proc.stderr, "train")
    assert "n_epochs must be an int >= 0 (0 or null: until early stopping), got str 'abc'" in line
    with pytest.raises(ConfigurationError, match=r"^n_epochs must be an int >= 0 .*got str 'abc'"):
        RunContext(overrides={"n_epochs": "abc"}, silent=True)
    assert not (tmp_path / "outputs").exists()  # refused before a run directory was made


def test_a_batch_size_larger_than_the_rollout_is_refused(tmp_path: Path) -> None:
    proc = run_maze_lab("train", "algorithm.batch_size=100000", cwd=tmp_path)
    assert proc.returncode == 2
    line = _one_error_line(proc.stderr, "train")
    assert ("algorithm.batch_size=100000 is larger than a rollout of algorithm.n_rollout_steps=100 x 2 envs "
            "(runner.concurrency) = 200 samples") in line and "at most 200" in line
    with pytest.raises(ConfigurationError, match=r"n_rollout_steps=16 x 4 envs \(runner.n_workers x "
                                                 r"runner.envs_per_worker\) = 64 samples"):
        RunContext(runner="ray", overrides={"algorithm.batch_size": 65, "algorithm.n_rollout_steps": 16,
                                            "runner.n_workers": 2, "runner.envs_per_worker": 2}, silent=True)
    RunContext(overrides={"algorithm.batch_size": 64, "algorithm.n_rollout_steps": 32}, silent=True)  # fits
    RunContext(overrides=TINY, silent=True)  # the default batch size of a tiny rollout: one minibatch, as before


def test_an_unreachable_ray_address_from_the_environment_is_named(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}"}
    proc = subprocess.run([*maze_lab_command(), "train", "runner=ray", "n_epochs=1", "algorithm.epoch_length=1",
                           f"log_base_dir={tmp_path / 'outputs'}"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    line = _one_error_line(proc.stderr, "train")
    assert f"RAY_ADDRESS='127.0.0.1:{port}' (an environment variable of this process; runner.address was not " \
           f"given): no Ray cluster answers at 127.0.0.1:{port}" in line
    assert "runner.address='" not in line and "unset RAY_ADDRESS" in line
