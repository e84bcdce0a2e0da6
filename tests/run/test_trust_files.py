"""Run and trajectory directories from someone else: what maze-lab reads from or writes into one is a regular file
(or directory) inside it. A FIFO, a device or a symlink that leaves the directory is refused with one line naming
the path; a listing never blocks on one bad entry (the run is ``damaged``, with the reason); reads are bounded by
the bytes actually read, not by ``st_size`` (0 for a device or a FIFO). A hang is a failure: readers that could
block run in a thread or a subprocess with a timeout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from run_utils import maze_lab_command, train_tiny_run

from maze_lab.core.trajectory import NotATrajectoryFileError, list_episodes, load_episode, read_episode_header
from maze_lab.core.utils.safe_files import UnsafeFileError, check_write_dir, read_bounded
from maze_lab.run.run_dir import MARKER, DamagedRunError
from maze_lab.run.runs import compare_runs, find_run_dirs, list_runs, load_run

TIMEOUT = 60.0


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished CartPole run with best and last checkpoints and one recorded episode."""
    run = train_tiny_run(tmp_path_factory.mktemp("trained"))
    load_run(run).rollout(1, which="last", seed=0, record_frames=False)
    assert list((run / "trajectories").glob("*.trajectory.zip"))
    return run


def copy_run(trained: Path, tmp_path: Path, name: str = "theirs") -> Path:
    """A copy of the trained run, as a colleague's run lies in a shared base directory."""
    run = tmp_path / "runs" / "exp" / name
    shutil.copytree(trained, run, symlinks=True)
    return run


def _remove(path: Path) -> Path:
    """Remove ``path`` (a file, a directory or a symlink), if any."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    return path


def fifo_at(path: Path) -> Path:
    """Replace ``path`` (a file or directory, if any) with a FIFO."""
    os.mkfifo(_remove(path))
    return path


def link_at(path: Path, target: str | Path) -> Path:
    """Replace ``path`` (a file or directory, if any) with a symlink to ``target``."""
    _remove(path).symlink_to(target)
    return path


def _release(fifos: list[Path]) -> None:
    """Let a reader blocked in opening one of ``fifos`` go on (it then reads an empty file)."""
    for fifo in fifos:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


def finishes(call: Callable[[], Any], fifos: list[Path] = (), timeout: float = TIMEOUT) -> Any:
    """``call()`` in a thread: its value, or its exception re-raised; a call still running after ``timeout`` seconds
    fails the test (after releasing the ``fifos`` it may be blocked on)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as err:  # noqa: BLE001 - re-raised in the test's thread
            box["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        _release(list(fifos))
        thread.join(10)
        pytest.fail(f"the call did not finish within {timeout:.0f} s: it blocks")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def run_cli(*args: str, cwd: Path, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """``maze-lab ARGS`` in a subprocess; one that runs past ``timeout`` seconds fails the test (it blocks)."""
    try:
        return subprocess.run([*maze_lab_command(), *args], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"maze-lab {' '.join(args)} did not finish within {timeout:.0f} s: it blocks")


def damaged_rows(df: Any) -> dict[str, str]:
    return {row.run_dir: row.reason for row in df.itertuples() if row.status == "damaged"}


# ---- the shared helper ---------------------------------------------------------------------------------------------
def test_the_helper_refuses_fifos_devices_and_symlinks_leaving_the_base(tmp_path: Path) -> None:
    base = tmp_path / "run"
    base.mkdir()
    (base / "inside.txt").write_text("ok")
    link_at(base / "alias.txt", base / "inside.txt")
    (tmp_path / "secret.txt").write_text("hunter2")
    assert finishes(lambda: read_bounded(base / "alias.txt", 10, base)) == b"ok"  # a symlink inside is fine
    fifo = fifo_at(base / "fifo")
    with pytest.raises(UnsafeFileError, match=rf"^{fifo} is a FIFO \(named pipe\), not a regular file"):
        finishes(lambda: read_bounded(fifo, 10, base), [fifo])
    with pytest.raises(UnsafeFileError, match="is a character device, not a regular file"):
        finishes(lambda: read_bounded(link_at(base / "zero", "/dev/zero"), 10, base))
    with pytest.raises(UnsafeFileError, match=rf"leads to {tmp_path / 'secret.txt'}, outside {base}"):
        read_bounded(link_at(base / "leak", tmp_path / "secret.txt"), 10, base)
    with pytest.raises(UnsafeFileError, match="is 2 bytes, more than the 1 bytes a file may have"):
        read_bounded(base / "inside.txt", 1, base)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    with pytest.raises(UnsafeFileError, match=rf"leads to {outside / 'sub'}, outside {base}"):
        check_write_dir(link_at(base / "out", outside) / "sub", base)
    assert not (outside / "sub").exists()
    assert check_write_dir(base / "new" / "dir", base).is_dir()


# ---- listings ------------------------------------------------------------------------------------------------------
def test_maze_lab_runs_shows_a_fifo_summary_as_damaged_instead_of_blocking(trained: Path, tmp_path: Path) -> None:
    good = copy_run(trained, tmp_path, "good")
    bad = copy_run(trained, tmp_path, "bad")
    fifo = fifo_at(bad / MARKER)
    try:
        proc = run_cli("runs", "--base", str(tmp_path / "runs"), cwd=tmp_path)
    finally:
        _release([fifo])
    assert proc.returncode == 0, proc.stderr
    assert "damaged" in proc.stdout and str(good) in proc.stdout
    assert f"{bad}: {fifo} is a FIFO (named pipe), not a regular file" in proc.stdout

    df = finishes(lambda: list_runs(tmp_path / "runs"), [fifo])
    assert set(df.run_dir) == {str(good), str(bad)}
    assert df.set_index("run_dir").status[str(good)] == "done"
    assert "FIFO" in damaged_rows(df)[str(bad)] and str(fifo) in damaged_rows(df)[str(bad)]
    experiment = json.loads((good / MARKER).read_text())["experiment"]
    assert finishes(lambda: find_run_dirs(tmp_path / "runs", experiment=experiment), [fifo]) == [good]
    rows = finishes(lambda: compare_runs([good, bad], ["seed"]), [fifo])
    assert list(rows.status) == ["done", "damaged"]


@pytest.mark.parametrize("name", ["config.yaml", "stats.arrows"])
def test_a_fifo_among_a_runs_files_makes_it_damaged_instead_of_blocking(trained: Path, tmp_path: Path,
                                                                        name: str) -> None:
    run = copy_run(trained, tmp_path)
    fifo = fifo_at(run / name)
    df = finishes(lambda: list_runs(tmp_path / "runs"), [fifo])
    reason = damaged_rows(df).get(str(run), "")
    assert f"{fifo} is a FIFO (named pipe), not a regular file" in reason
    if name == "config.yaml":
        with pytest.raises(DamagedRunError, match=f"{fifo} is a FIFO"):
            finishes(lambda: load_run(run).config, [fifo])
    if name == "stats.arrows":
        with pytest.raises(DamagedRunError, match=f"{fifo} is a FIFO"):
            finishes(lambda: load_run(run).stats, [fifo])


def test_statistics_that_are_dev_zero_are_refused_without_reading_them(trained: Path, tmp_path: Path) -> None:
    run = copy_run(trained, tmp_path)
    stats = link_at(run / "stats.arrows", "/dev/zero")
    script = textwrap.dedent(f"""
        from maze_lab.core.log_stats.writers import StatsStore
        from maze_lab.run.runs import list_runs, load_run
        print("listed:", list_runs({str(tmp_path / 'runs')!r}).reason[0])
        try:
            load_run({str(run)!r}).stats
        except Exception as err:
            print("loaded:", type(err).__name__, err)
        try:
            StatsStore.follow({str(run)!r})
        except Exception as err:
            print("followed:", type(err).__name__, err)
        # the peak of this process's own memory (VmHWM starts anew at exec; ru_maxrss would carry the peak of
        # the forked pytest process that started it, over 1 GiB late in a full run)
        with open("/proc/self/status") as fh:
            print("maxrss_kib:", next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")))
    """)
    try:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail("reading statistics that are /dev/zero did not finish")
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
    refused = f"{stats} is a character device, not a regular file"
    assert refused in lines["listed"]
    assert lines["loaded"].startswith("DamagedRunError") and refused in lines["loaded"]
    assert refused in lines["followed"]
    assert int(lines["maxrss_kib"]) < 1024**2  # far less than the 2 GiB a read up to the limit would take


def test_config_yaml_leading_outside_the_run_is_not_read(trained: Path, tmp_path: Path) -> None:
    run = copy_run(trained, tmp_path)
    secret = tmp_path / "secret.yaml"
    secret.write_text("password: hunter2\n")
    link_at(run / "config.yaml", secret)
    with pytest.raises(DamagedRunError) as info:
        finishes(lambda: load_run(run).config)
    message = str(info.value)
    assert f"{run / 'config.yaml'} leads to {secret}, outside {run}" in message and "hunter2" not in message
    assert "\n" not in message
    df = finishes(lambda: list_runs(tmp_path / "runs"))
    assert "outside" in damaged_rows(df)[str(run)] and "hunter2" not in df.to_string()
    # a symlink to a file of the run itself is fine
    (run / "config.yaml").unlink()
    shutil.copy(trained / "config.yaml", run / "config_copy.yaml")
    link_at(run / "config.yaml", "config_copy.yaml")
    assert finishes(lambda: load_run(run).config)["env"] == load_run(trained).config["env"]


# ---- writing episodes -----------------------------------------------------------------------------------------------
def test_maze_lab_rollout_does_not_write_through_a_symlinked_trajectories_dir(trained: Path, tmp_path: Path) -> None:
    run = copy_run(trained, tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    link = link_at(run / "trajectories", outside)
    proc = run_cli("rollout", str(run), "--episodes", "1", "--which", "last", cwd=tmp_path, timeout=180)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("maze-lab rollout: error: "), proc.stderr
    assert f"{link} leads to {outside}, outside {run}" in lines[0]
    assert list(outside.iterdir()) == []
    with pytest.raises(DamagedRunError, match="outside"):
        load_run(run).rollout(1, which="last")
    from maze_lab.train.ray_rollouts import rollout_loaded_run

    with pytest.raises(DamagedRunError, match="outside"):  # the parallel rollout from Python, without the CLI
        rollout_loaded_run(load_run(run), n_episodes=2, n_workers=2, which="last")
    assert list(outside.iterdir()) == []


# ---- checkpoints ----------------------------------------------------------------------------------------------------
CHECKPOINTS = {
    "text": (lambda p: p.write_text("hello world\nthis is not a checkpoint\n"),
             "is not a checkpoint: a checkpoint is a zip archive written by torch.save, this file begins with"),
    "empty": (lambda p: p.write_bytes(b""), "is empty (0 bytes): it is not a checkpoint"),
    "/dev/zero": (lambda p: p.symlink_to("/dev/zero"), "is a character device, not a regular file"),
    "fifo": (lambda p: os.mkfifo(p), "is a FIFO (named pipe), not a regular file"),
}


@pytest.mark.parametrize("kind", list(CHECKPOINTS))
def test_a_checkpoint_that_is_no_checkpoint_gets_one_true_line(trained: Path, tmp_path: Path, kind: str) -> None:
    from maze_lab.train.trainers.common.checkpoints import CheckpointError

    run = copy_run(trained, tmp_path)
    path = run / "checkpoints" / "state_dict_best.pt"
    path.unlink()
    make, expected = CHECKPOINTS[kind]
    make(path)
    fifos = [path] if kind == "fifo" else []
    with pytest.raises(CheckpointError) as info:
        finishes(lambda: load_run(run).policy("best"), fifos)
    message = str(info.value)
    assert message.startswith(f"{path} ") and expected in message, message
    assert "code-bearing" not in message and "\n" not in message
    proc = run_cli("rollout", str(run), "--no-record", cwd=tmp_path, timeout=180)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_a_checkpoint_leading_outside_the_run_is_not_read(trained: Path, tmp_path: Path) -> None:
    from maze_lab.train.trainers.common.checkpoints import CheckpointError

    run = copy_run(trained, tmp_path)
    elsewhere = tmp_path / "elsewhere.pt"
    shutil.copy(trained / "checkpoints" / "state_dict_best.pt", elsewhere)
    link = link_at(run / "checkpoints" / "state_dict_best.pt", elsewhere)
    with pytest.raises(CheckpointError, match=f"{link} leads to {elsewhere}, outside {run}"):
        finishes(lambda: load_run(run).policy("best"))


# ---- reading episodes -----------------------------------------------------------------------------------------------
def test_episode_files_that_are_fifos_devices_or_lead_outside_are_refused(trained: Path, tmp_path: Path) -> None:
    run = copy_run(trained, tmp_path)
    directory = run / "trajectories"
    (episode,) = list_episodes(directory)
    elsewhere = tmp_path / "elsewhere.trajectory.zip"
    shutil.copy(episode, elsewhere)
    fifo = fifo_at(directory / "fifo.trajectory.zip")
    zero = link_at(directory / "zero.trajectory.zip", "/dev/zero")
    leak = link_at(directory / "leak.trajectory.zip", elsewhere)
    with pytest.raises(NotATrajectoryFileError, match=f"{fifo} is a FIFO"):
        finishes(lambda: load_episode(fifo), [fifo])
    with pytest.raises(NotATrajectoryFileError, match=f"{zero} is a character device"):
        finishes(lambda: read_episode_header(zero))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = finishes(lambda: list_episodes(directory), [fifo])
    assert found == [episode]
    left_out = " ".join(str(w.message) for w in caught)
    assert f"{leak} leads to {elsewhere}, outside {directory}" in left_out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert finishes(lambda: load_run(run).trajectories(), [fifo]) == [episode]
    assert load_episode(episode).n_steps > 0  # the real episode still loads


# ---- the widgets' readers -------------------------------------------------------------------------------------------
def test_event_logs_that_are_fifos_or_lead_outside_the_run_are_not_read(trained: Path, tmp_path: Path) -> None:
    from maze_lab.widgets.event_logs import EventLogError, EventLogExplorer, read_event_log

    run = copy_run(trained, tmp_path)
    logs = run / "event_logs" / "train_0"
    fifo = fifo_at(logs / "Waiting.forever.tsv")
    with pytest.raises(EventLogError, match=f"{fifo} is a FIFO"):
        finishes(lambda: read_event_log(fifo), [fifo])
    fifo.unlink()
    tsv = next(logs.glob("*.tsv"))
    elsewhere = tmp_path / "elsewhere.tsv"
    shutil.copy(tsv, elsewhere)
    link_at(tsv, elsewhere)
    (episode,) = list_episodes(run / "trajectories")
    shutil.copy(episode, tmp_path / "elsewhere.trajectory.zip")
    leak = link_at(run / "trajectories" / "leak.trajectory.zip", tmp_path / "elsewhere.trajectory.zip")
    explorer = finishes(lambda: EventLogExplorer(run))
    with pytest.raises(EventLogError, match=f"{tsv} leads to {elsewhere}, outside {logs.parent}"):
        explorer.dataframe(tsv.stem, "train_0")
    assert "outside" in explorer.skipped[str(leak)]


@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_normalization_statistics_that_are_fifos_or_devices_are_refused(tmp_path: Path, suffix: str) -> None:
    """The statistics a run's normalization wrapper loads (``statistics_dump``, in the run directory) cannot block
    or flood their reader."""
    from maze_lab.core.wrappers.observation_normalization.statistics_io import load_normalization_statistics

    fifo = fifo_at(tmp_path / f"statistics{suffix}")
    with pytest.raises(UnsafeFileError, match="FIFO"):
        finishes(lambda: load_normalization_statistics(fifo), [fifo])
    device = link_at(tmp_path / f"zero{suffix}", "/dev/zero")
    with pytest.raises(UnsafeFileError, match="character device"):
        finishes(lambda: load_normalization_statistics(device))
