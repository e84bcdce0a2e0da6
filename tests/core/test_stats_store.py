"""The StatsStore as a run's record: whole epochs for readers, per-epoch appends off the training thread, bounded
reads of new and old run directories, and a disk that fills up mid-run."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from file_utils import small_tmpfs
from training_utils import MidEpochReader, cartpole_factory, flat_actor_critic

from maze_lab.core.log_stats import stats_files
from maze_lab.core.log_stats.aggregation import StatKey
from maze_lab.core.log_stats.base_events import BaseEnvEvents, DiscreteActionEvents, ObservationEvents
from maze_lab.core.log_stats.stats_files import STATS_FILE, StatsFileError, StatsWriteError
from maze_lab.core.log_stats.writers import StatsStore, epoch_commit
from maze_lab.run.run_dir import RunDirectory
from maze_lab.train.trainers.a2c import A2C, A2CAlgorithmConfig
from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
from maze_lab.train.vector_env import SequentialVectorEnv

REWARD = StatKey(BaseEnvEvents.reward, "mean", None)
ACTION = StatKey(DiscreteActionEvents.action, None, (0, "action"))
OBSERVATION = StatKey(ObservationEvents.observation_original, None, (0, "observation"))


def _epoch_stats(epoch: int) -> dict:
    rng = np.random.default_rng(epoch)
    return {REWARD: 10.0 * epoch, ACTION: list(rng.integers(0, 2, 64)),
            OBSERVATION: list(rng.normal(size=(16, 4)).astype(np.float32))}


def _write_epoch(store: StatsStore, epoch: int) -> None:
    with epoch_commit([store], epoch):
        store.write("train", epoch, _epoch_stats(epoch))
        store.write("eval", epoch, {REWARD: 20.0 * epoch})


def _complete_epochs(store: StatsStore) -> list[int]:
    """The epochs of the store; asserts that each has its train and eval rows and its samples."""
    df = store.to_dataframe()
    epochs = sorted(set(df.epoch))
    for epoch in epochs:
        assert set(df[df.epoch == epoch].prefix) == {"train", "eval"}, f"epoch {epoch} is incomplete"
        assert len(store.samples(epoch=epoch)) == 2, f"epoch {epoch} lacks its samples"
    return epochs


def _stray_temporary_files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if ".tmp" in p.name]


# ---- whole epochs for readers ----------------------------------------------------------------------------------
def test_writes_inside_an_epoch_are_published_together() -> None:
    store = StatsStore()
    store.begin_epoch(1)
    store.write("train", 1, _epoch_stats(1))
    assert store.version == 0 and store.to_dataframe().empty and store.samples() == []
    store.write("eval", 1, {REWARD: 20.0})
    assert store.version == 0 and len(store) == 0
    store.end_epoch(1)
    assert store.version == 1
    assert _complete_epochs(store) == [1]


def test_an_abandoned_epoch_is_dropped() -> None:
    store = StatsStore()
    _write_epoch(store, 1)
    with pytest.raises(RuntimeError, match="evaluation broke"), epoch_commit([store], 2):
        store.write("train", 2, _epoch_stats(2))
        raise RuntimeError("evaluation broke")
    assert store.version == 1 and _complete_epochs(store) == [1]


def test_writes_of_other_threads_are_not_held_back_by_an_open_epoch() -> None:
    store = StatsStore()
    store.begin_epoch(1)
    store.write("train", 1, {REWARD: 1.0})
    other = threading.Thread(target=store.write, args=("eval", 7, {REWARD: 2.0}))
    other.start()
    other.join()
    assert store.to_dataframe().epoch.tolist() == [7] and store.version == 1
    store.end_epoch(1)
    assert sorted(store.to_dataframe().epoch) == [1, 7] and store.version == 2


def test_end_epoch_without_begin_names_the_mistake() -> None:
    with pytest.raises(RuntimeError, match=r"end_epoch\(3\) without begin_epoch"):
        StatsStore().end_epoch(3)


def test_version_changes_once_per_completed_trainer_epoch() -> None:
    torch.manual_seed(0)
    store = StatsStore()
    spy = MidEpochReader(store, {"train", "eval"}, "ActorCriticEvents")
    writers = [store, spy]
    config = A2CAlgorithmConfig(n_epochs=3, epoch_length=1, n_rollout_steps=8, seed=0, patience=0)
    train_env = SequentialVectorEnv([cartpole_factory] * 2, logging_prefix="train", writers=writers)
    eval_env = SequentialVectorEnv([cartpole_factory], logging_prefix="eval", writers=writers)
    trainer = A2C(config, flat_actor_critic(cartpole_factory()), env=train_env,
                  evaluator=RolloutEvaluator(eval_env, n_episodes=1))
    trainer.train()
    assert store.version == 3 and sorted(set(store.to_dataframe().epoch)) == [1, 2, 3]
    # mid-epoch, readers see exactly the epochs completed before it, and the version counts them
    assert spy.seen and all(version == len(epochs) for version, epochs in spy.seen)
    assert {version for version, _ in spy.seen} == {0, 1, 2}


class _LockLettingOthersIn:
    """A lock after whose first release another thread writes an epoch (as a concurrent writer may)."""

    def __init__(self, store: StatsStore):
        self._lock = threading.Lock()
        self.store = store
        self.armed = False

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
        if self.armed:
            self.armed = False
            other = threading.Thread(target=_write_epoch, args=(self.store, 2))
            other.start()
            other.join()


def test_save_takes_one_consistent_snapshot(tmp_path: Path) -> None:
    store = StatsStore()
    _write_epoch(store, 1)
    lock = _LockLettingOthersIn(store)
    store._lock = lock
    lock.armed = True
    store.save(tmp_path)
    saved = StatsStore.load(tmp_path)
    rows_epochs = set(saved.to_dataframe().epoch)
    sample_epochs = {s[0] for s in saved.samples()}
    assert rows_epochs == sample_epochs, f"rows of epochs {rows_epochs}, samples of epochs {sample_epochs}"
    assert _stray_temporary_files(tmp_path) == []


# ---- per-epoch appends off the training thread ----------------------------------------------------------------
def test_each_epoch_is_appended_and_earlier_bytes_stay(tmp_path: Path) -> None:
    store = StatsStore(directory=tmp_path)
    path = tmp_path / STATS_FILE
    previous = b""
    for epoch in range(1, 6):
        _write_epoch(store, epoch)
        store.flush()
        data = path.read_bytes()
        assert data.startswith(previous) and len(data) > len(previous), f"epoch {epoch} rewrote the file"
        previous = data
        assert _complete_epochs(StatsStore.load(tmp_path)) == list(range(1, epoch + 1))
    assert sorted(p.name for p in tmp_path.iterdir()) == [STATS_FILE]


def test_a_loaded_run_goes_on_appending_to_its_file(tmp_path: Path) -> None:
    store = StatsStore(directory=tmp_path)
    for epoch in (1, 2):
        _write_epoch(store, epoch)
    store.close()
    before = (tmp_path / STATS_FILE).read_bytes()
    resumed = StatsStore.load(tmp_path)
    resumed.persist_to(tmp_path)
    _write_epoch(resumed, 3)
    resumed.close()
    assert (tmp_path / STATS_FILE).read_bytes().startswith(before)  # continued, not rewritten
    assert resumed.version == 3 and _complete_epochs(StatsStore.load(tmp_path)) == [1, 2, 3]


def test_going_on_after_a_torn_epoch_cuts_it_off(tmp_path: Path) -> None:
    store = StatsStore(directory=tmp_path)
    for epoch in (1, 2):
        _write_epoch(store, epoch)
    store.close()
    path = tmp_path / STATS_FILE
    path.write_bytes(path.read_bytes()[:-40])  # a writer killed in the middle of epoch 2
    with pytest.warns(UserWarning, match="incomplete"):
        resumed = StatsStore.load(tmp_path)
    resumed.persist_to(tmp_path)
    _write_epoch(resumed, 2)
    resumed.close()
    assert _complete_epochs(StatsStore.load(tmp_path)) == [1, 2]  # and no warning: the torn bytes are gone


def test_epochs_are_written_by_another_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    writer_threads: list[int] = []
    append = stats_files.EpochAppender._append

    def slow_append(self: stats_files.EpochAppender, data: bytes) -> None:
        writer_threads.append(threading.get_ident())
        release.wait()
        append(self, data)

    monkeypatch.setattr(stats_files.EpochAppender, "_append", slow_append)
    store = StatsStore(directory=tmp_path)
    for epoch in (1, 2, 3):
        _write_epoch(store, epoch)  # returns while the disk write of epoch 1 is still held up
    assert store.version == 3 and _complete_epochs(store) == [1, 2, 3]
    release.set()
    store.flush()
    assert writer_threads and threading.get_ident() not in writer_threads
    assert _complete_epochs(StatsStore.load(tmp_path)) == [1, 2, 3]


def test_a_saved_run_reads_back_exactly(tmp_path: Path) -> None:
    store = StatsStore(directory=tmp_path)
    for epoch in range(1, 4):
        _write_epoch(store, epoch)
    store.write("eval", 4, {REWARD: float("nan"), StatKey(BaseEnvEvents.kpi, "mean", ("usage",)): 1e300,
                            ACTION: [0.1, 2**40, -1.5, float("inf")]})  # outside an epoch: published at once
    store.close()
    loaded = StatsStore.load(tmp_path)
    assert loaded.version == 4
    assert loaded.to_dataframe().equals(store.to_dataframe())
    assert len(loaded.samples()) == len(store.samples())
    for a, b in zip(loaded.samples(), store.samples(), strict=True):
        assert a[:5] == b[:5] and a[5].dtype == np.float64 and np.array_equal(a[5], b[5])


def test_samples_are_stored_in_the_smallest_exact_type() -> None:
    assert stats_files.compact(np.array([0.0, 1.0, 1.0]))[1] == "int8"
    assert stats_files.compact(np.array([0.0, 300.0]))[1] == "int16"
    assert stats_files.compact(np.array([0.0, 2.0**20]))[1] == "int32"
    assert stats_files.compact(np.array([0.5, np.nan], dtype=np.float32).astype(np.float64))[1] == "float32"
    assert stats_files.compact(np.array([0.1]))[1] == "float64"
    assert stats_files.compact(np.array([1e300]))[1] == "float64"


# ---- failures --------------------------------------------------------------------------------------------------
def _fail_after(monkeypatch: pytest.MonkeyPatch, n_epochs: int) -> None:
    """The disk fills up in the middle of writing the epoch after ``n_epochs`` (part of it reaches the file)."""
    calls = {"n": 0}
    real_write_all = stats_files.EpochAppender._write_all

    def write_all(self: stats_files.EpochAppender, data: bytes) -> None:
        calls["n"] += 1
        if calls["n"] > n_epochs + 1:  # the stream header, then one call per epoch
            os.write(self._fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write_all(self, data)

    monkeypatch.setattr(stats_files.EpochAppender, "_write_all", write_all)


def test_a_failed_write_leaves_the_earlier_epochs_readable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fail_after(monkeypatch, 2)
    store = StatsStore(directory=tmp_path)
    _write_epoch(store, 1)
    _write_epoch(store, 2)
    store.flush()
    _write_epoch(store, 3)
    with pytest.raises(StatsWriteError, match="No space left on device") as info:
        store.flush()
    assert str(tmp_path / STATS_FILE) in str(info.value) and "the 2 epochs written before are readable" in str(
        info.value)
    with pytest.raises(StatsWriteError):  # the next epoch's commit tells the training thread
        _write_epoch(store, 4)
    assert store.write_error is info.value
    assert _complete_epochs(store) == [1, 2, 3, 4]  # the live view keeps everything
    assert _complete_epochs(StatsStore.load(tmp_path)) == [1, 2]  # the file ends with the last whole epoch
    assert _stray_temporary_files(tmp_path) == []


def test_a_truncated_last_epoch_is_left_out_with_a_warning(tmp_path: Path) -> None:
    store = StatsStore(directory=tmp_path)
    for epoch in (1, 2):
        _write_epoch(store, epoch)
    store.close()
    path = tmp_path / STATS_FILE
    path.write_bytes(path.read_bytes()[:-40])  # a writer killed in the middle of epoch 2
    with pytest.warns(UserWarning, match=f"{STATS_FILE}: statistics after epoch record 1 are incomplete"):
        loaded = StatsStore.load(tmp_path)
    assert _complete_epochs(loaded) == [1] and loaded.version == 1


def test_run_marked_failed_when_statistics_cannot_be_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from maze_lab.run.run_context import RunContext
    from maze_lab.run.runs import load_run

    _fail_after(monkeypatch, 2)
    rc = RunContext(env="gym_env", algorithm="a2c", silent=True, run_dir=tmp_path / "run",
                    overrides={"env.name": "CartPole-v1", "runner.concurrency": 1, "runner.eval_concurrency": 1,
                               "algorithm.n_epochs": 6, "algorithm.epoch_length": 1,
                               "algorithm.n_rollout_steps": 8, "algorithm.eval_repeats": 1})
    try:
        with pytest.raises(StatsWriteError, match="No space left on device"):
            rc.train()
    finally:
        rc.close()
    run = load_run(tmp_path / "run")
    assert run.summary["status"] == "failed"
    assert "StatsWriteError" in run.summary["reason"] and "No space left on device" in run.summary["reason"]
    assert _complete_run_epochs(run.stats) == [1, 2]
    assert _stray_temporary_files(tmp_path) == []


def _complete_run_epochs(store: StatsStore) -> list[int]:
    df = store.to_dataframe()
    epochs = sorted(set(df.epoch))
    for epoch in epochs:
        rows = df[df.epoch == epoch]
        assert {"train", "eval"} <= set(rows.prefix) and "ActorCriticEvents" in set(rows.topic), epoch
    return epochs


def test_summary_is_rewritten_in_place_when_the_disk_is_full(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    run = RunDirectory(tmp_path)
    run.write_summary(status="running", experiment="x", epoch=3)
    real_write_text = Path.write_text

    def full(self: Path, *args: object, **kwargs: object) -> int:
        if self.name.endswith(".tmp"):
            real_write_text(self, "{\"half")  # part of it reaches the disk
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    long_error = "Traceback (most recent call last):\n" + "  frame\n" * 2000 + "OSError: [Errno 28] No space"
    run.write_summary(status="failed", reason="OSError: [Errno 28] No space left on device", error=long_error)
    summary = json.loads(run.summary_file.read_text())
    assert summary["status"] == "failed" and "No space left on device" in summary["reason"]
    assert summary["error"].endswith("OSError: [Errno 28] No space") and summary["epoch"] == 3
    assert _stray_temporary_files(tmp_path) == []


# ---- bounded reads, old runs ------------------------------------------------------------------------------------
def test_a_file_over_the_limit_is_refused_naming_it(tmp_path: Path) -> None:
    store = StatsStore(directory=tmp_path)
    _write_epoch(store, 1)
    store.close()
    size = (tmp_path / STATS_FILE).stat().st_size
    with pytest.raises(StatsFileError, match=rf"{STATS_FILE} is {size:,} bytes, more than the limit of 100 bytes"):
        StatsStore.load(tmp_path, max_bytes=100)


def test_files_that_are_not_statistics_are_refused(tmp_path: Path) -> None:
    import pyarrow as pa

    (tmp_path / STATS_FILE).write_bytes(b"\x00" * 64 + b"not arrow")
    with pytest.raises(StatsFileError, match="is not a maze-lab statistics file"):
        StatsStore.load(tmp_path)
    other = pa.schema([("x", pa.int64())])
    (tmp_path / STATS_FILE).write_bytes(other.serialize().to_pybytes())
    with pytest.raises(StatsFileError, match=r"columns \['x'\]"):
        StatsStore.load(tmp_path)


def test_an_unknown_sample_type_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats_files, "compact", lambda values: (b"\x00" * 8, "object"))
    store = StatsStore()
    _write_epoch(store, 1)
    store.save(tmp_path)
    monkeypatch.undo()
    with pytest.raises(StatsFileError, match="have type 'object'"):
        StatsStore.load(tmp_path)


def test_a_directory_without_statistics_says_so(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=f"holds no statistics: no {STATS_FILE}"):
        StatsStore.load(tmp_path)


def test_load_run_and_the_dashboard_read_a_finished_run(tmp_path: Path) -> None:
    from maze_lab.run.run_context import RunContext
    from maze_lab.run.runs import load_run

    rc = RunContext(env="gym_env", algorithm="a2c", silent=True, run_dir=tmp_path / "run",
                    overrides={"env.name": "CartPole-v1", "runner.concurrency": 1, "runner.eval_concurrency": 1,
                               "algorithm.n_epochs": 2, "algorithm.epoch_length": 1,
                               "algorithm.n_rollout_steps": 64, "algorithm.eval_repeats": 1})
    rc.train()
    live = rc.stats
    rc.close()
    assert (tmp_path / "run" / STATS_FILE).is_file() and not (tmp_path / "run" / "stats.parquet").exists()
    run = load_run(tmp_path / "run")
    assert run.stats.to_dataframe().equals(live) and run.stats.version == 2
    pytest.importorskip("plotly")
    from maze_lab.widgets.dashboard import TrainingDashboard

    dash = TrainingDashboard(tmp_path / "run")
    means = [t for t in dash.rewards.data if t.name == "train mean"]
    expected = run.stats.series("BaseEnvEvents", "reward", "mean", prefix="train")
    assert list(means[0].customdata) == [1, 2] and list(means[0].y) == expected.tolist()


# ---- a real disk that fills up ---------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path: Path):
    """A 1 MiB tmpfs mounted at a fresh directory (skipped where it cannot be mounted)."""
    with small_tmpfs(tmp_path, "1m") as mount_point:
        yield mount_point


def test_disk_full_on_a_small_tmpfs(small_disk: Path) -> None:
    from maze_lab.run.run_context import RunContext
    from maze_lab.run.runs import load_run

    run_dir = small_disk / "run"
    rc = RunContext(env="gym_env", algorithm="a2c", silent=True, run_dir=run_dir,
                    overrides={"env.name": "CartPole-v1", "runner.concurrency": 2, "runner.eval_concurrency": 1,
                               "algorithm.n_epochs": 5000, "algorithm.epoch_length": 1,
                               "algorithm.n_rollout_steps": 16, "algorithm.eval_repeats": 1,
                               "algorithm.patience": 0})
    try:
        with pytest.raises(OSError) as info:
            rc.train()
    finally:
        with contextlib.suppress(OSError):  # closing the event logs may meet the full disk too: not the point here
            rc.close()
    assert "No space left on device" in str(info.value), info.value
    run = load_run(run_dir)
    assert run.summary["status"] == "failed", run.summary
    assert "No space left on device" in run.summary["reason"], run.summary["reason"]
    epochs = _complete_run_epochs(run.stats)
    assert epochs and epochs == list(range(1, len(epochs) + 1))
    assert _stray_temporary_files(run_dir) == []


def test_statistics_file_on_a_full_tmpfs(small_disk: Path) -> None:
    store = StatsStore(directory=small_disk)
    rng = np.random.default_rng(0)
    with pytest.raises(StatsWriteError, match="No space left on device"):
        for epoch in range(1, 1000):  # 1 MiB holds about 20 of these epochs
            with epoch_commit([store], epoch):
                store.write("train", epoch, {REWARD: float(epoch), OBSERVATION: list(rng.normal(size=12_000))})
                store.write("eval", epoch, {REWARD: float(epoch), ACTION: [0, 1]})
            if epoch % 5 == 0:
                store.flush()
        store.flush()
    store.close()
    written = store._appender.written
    loaded = StatsStore.load(small_disk)
    assert written > 0 and _complete_epochs(loaded) == list(range(1, written + 1))
    assert _stray_temporary_files(small_disk) == []


# ---- following a run that is still writing -------------------------------------------------------------------
def test_a_followed_run_directory_gains_the_epochs_written_after_it_was_opened(tmp_path: Path) -> None:
    writer = StatsStore(directory=tmp_path)
    reader = StatsStore.follow(tmp_path)  # nothing written yet: an empty store, not an error
    assert len(reader) == 0 and reader.version == 0 and reader.refresh() == 0
    _write_epoch(writer, 1)
    writer.flush()
    assert reader.refresh() == 1 and reader.version == 1
    for epoch in (2, 3):
        _write_epoch(writer, epoch)
    writer.flush()
    assert reader.refresh() == 2 and reader.refresh() == 0
    assert _complete_epochs(reader) == [1, 2, 3] and reader.version == 3
    assert reader.series("BaseEnvEvents", "reward", "mean", prefix="train").tolist() == [10.0, 20.0, 30.0]


def test_refresh_waits_for_an_epoch_still_being_written(tmp_path: Path) -> None:
    writer = StatsStore(directory=tmp_path)
    _write_epoch(writer, 1)
    writer.flush()
    reader = StatsStore.follow(tmp_path)
    data = stats_files.encode_epoch([(2, "train", "BaseEnvEvents", "reward", "mean", 2.0)], [])
    with (tmp_path / STATS_FILE).open("ab") as fh:
        fh.write(data[: len(data) // 2])  # half an epoch: a writer in the middle of its append
    assert reader.refresh() == 0 and len(reader) == 2
    with (tmp_path / STATS_FILE).open("ab") as fh:
        fh.write(data[len(data) // 2:])
    assert reader.refresh() == 1 and reader.to_dataframe().value.tolist() == [10.0, 20.0, 2.0]


def test_refresh_of_a_replaced_file_says_so(tmp_path: Path) -> None:
    writer = StatsStore(directory=tmp_path)
    for epoch in (1, 2):
        _write_epoch(writer, epoch)
    writer.flush()
    reader = StatsStore.follow(tmp_path)
    (tmp_path / STATS_FILE).write_bytes(stats_files.stream_header())
    with pytest.raises(StatsFileError, match="replaced or cut"):
        reader.refresh()


def test_wide_samples_are_thinned_whole_and_aligned_across_keys() -> None:
    """Observations of more values than the store keeps per epoch are thinned by whole samples, the same samples for
    every list of the same length (the keys of one policy key), in fewer than ``max_samples`` values: the
    distribution widget can still tell their dimensions apart (evenly thinned flat values it could not: a 50x2
    inventory was pooled into one histogram)."""
    rng = np.random.default_rng(0)
    wide = [rng.normal(size=(50, 2)) + np.arange(100).reshape(50, 2) * 10 for _ in range(1000)]
    narrow = [np.array([i, -i], dtype=np.float64) for i in range(1000)]
    short = [np.array([float(i)]) for i in range(30)]
    event = ObservationEvents.observation_original
    store = StatsStore(max_samples=20_000)
    store.write("train", 1, {StatKey(event, None, (0, "inventory")): wide,
                             StatKey(event, None, (0, "ordered_piece")): narrow,
                             StatKey(event, None, (1, "cutting_mask")): short})
    found = {name: arr for _, _, _, _, name, arr in store.samples(epoch=1)}
    inventory, ordered = found["0/inventory"].reshape(-1, 100), found["0/ordered_piece"].reshape(-1, 2)
    assert found["0/inventory"].size < 20_000 and len(inventory) == 199
    # whole samples, and the same ones for both keys of policy key 0
    kept = [int(i) for i in ordered[:, 0]]
    assert kept == sorted(set(kept)) and kept[0] == 0 and kept[-1] == 999
    assert np.allclose(inventory, np.stack([wide[i].ravel() for i in kept]))
    assert np.allclose(ordered[:, 1], -ordered[:, 0])
    # what fits is kept whole
    assert np.allclose(found["1/cutting_mask"], np.arange(30))
