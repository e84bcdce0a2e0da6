"""Saving a run's statistics: per-epoch appends (``stats.arrows``) against rewriting everything every epoch.

The epochs are those of a real CartPole PPO run (the ``cartpole_ppo`` experiment: scalars plus action,
observation and reward samples of training and evaluation), replayed as epochs 1..N. Measured per epoch N:

- new: the training thread's share (publishing the epoch) and the whole write (until the epoch is on disk);
- reference, measured here: the earlier approach, rewriting ``stats.parquet`` and ``samples.npz`` with every
  epoch so far (reimplemented below, as it was, with the reader of that layout: maze-lab no longer reads it).

Then the time to open the 1000-epoch run for a dashboard (``StatsStore.load`` plus the reads a dashboard does).

Run: python tests/benchmarks/stats_store.py [--epochs 1000] [--window 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from maze_lab.core.log_stats.writers import LogStatsWriter, StatsStore, epoch_commit


class _Recorder(LogStatsWriter):
    """Keeps every write of a run: (prefix, epoch, stats)."""

    def __init__(self) -> None:
        self.writes: list[tuple[str | None, int, dict]] = []

    def write(self, prefix: str | None, step: int, stats: Any) -> None:
        self.writes.append((prefix, step, dict(stats)))


def capture_cartpole_epoch(n_epochs: int) -> list[tuple[str | None, dict]]:
    """The writes of the last epoch of a CartPole PPO run of ``n_epochs`` epochs."""
    from maze_lab.run.run_context import RunContext

    with tempfile.TemporaryDirectory() as tmp:
        rc = RunContext(experiment="cartpole_ppo", silent=True, run_dir=Path(tmp) / "run",
                        overrides={"algorithm.n_epochs": n_epochs, "algorithm.n_optimization_epochs": 4})
        run = rc._single()
        recorder = _Recorder()
        trainer = run.trainer
        for writers in (trainer.writers, run.train_env.writers, run.eval_env.writers):
            if recorder not in writers:
                writers.append(recorder)
        rc.train()
        rc.close()
    last = max(step for _, step, _ in recorder.writes)
    return [(prefix, stats) for prefix, step, stats in recorder.writes if step == last]


def write_epoch(store: StatsStore, epoch: int, writes: list[tuple[str | None, dict]]) -> None:
    """One epoch through the trainers' path: every write of the epoch, published together."""
    with epoch_commit([store], epoch):
        for prefix, stats in writes:
            store.write(prefix, epoch, stats)


def rewrite_everything(store: StatsStore, directory: Path) -> None:
    """The reference: the whole table as parquet and all samples as a compressed npz, each via a temporary file."""
    path = directory / "stats.parquet"
    tmp = path.with_suffix(".parquet.tmp")
    store.to_dataframe().to_parquet(tmp, index=False)
    tmp.replace(path)
    samples = store.samples()
    if samples:
        arrays = {f"s{i}": s[5] for i, s in enumerate(samples)}
        meta = np.array([[str(x) for x in s[:5]] for s in samples], dtype=str)
        tmp_npz = directory / "samples.tmp.npz"
        np.savez_compressed(tmp_npz, meta=meta, **arrays)
        tmp_npz.replace(directory / "samples.npz")


def open_for_dashboard(directory: Path) -> StatsStore:
    """What a dashboard does when it opens a finished run: load, the scalar table, the epochs and the last
    epoch's samples."""
    store = StatsStore.load(directory)
    return _dashboard_reads(store)


def open_reference(directory: Path) -> StatsStore:
    """The same for the reference layout, read as maze-lab's reader of that layout read it (maze-lab itself no
    longer reads it): every row of ``stats.parquet`` and every sample array of ``samples.npz`` into a store, then
    the dashboard's reads."""
    import pyarrow.parquet as pq

    columns = ["epoch", "prefix", "topic", "event", "name", "value"]
    table = pq.read_table(directory / "stats.parquet")
    cols = [table.column(c).to_pylist() for c in columns]
    rows = [(int(e), p, t, ev, n, float("nan") if v is None else float(v))
            for e, p, t, ev, n, v in zip(*cols, strict=True)]
    samples = []
    with np.load(directory / "samples.npz", allow_pickle=False) as data:
        for i, m in enumerate(data["meta"]):
            values = np.asarray(data[f"s{i}"], dtype=np.float64).ravel()
            samples.append((int(m[0]), str(m[1]), str(m[2]), str(m[3]), str(m[4]), values))
    store = StatsStore()
    store._rows, store._samples = rows, samples  # noqa: SLF001 - the benchmark fills a store as that reader did
    return _dashboard_reads(store)


def _dashboard_reads(store: StatsStore) -> StatsStore:
    store.to_dataframe()
    epochs = sorted({s[0] for s in store.samples()})
    store.samples(epoch=epochs[-1])
    return store


def _mb(*paths: Path) -> float:
    return sum(p.stat().st_size for p in paths if p.exists()) / 1e6


def main() -> None:
    """Measure and print the tables and the bench line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=1000, help="epochs written (the last N measured)")
    parser.add_argument("--window", type=int, default=9, help="epochs N-window+1..N whose median is reported")
    parser.add_argument("--capture-epochs", type=int, default=6, help="epochs of the CartPole run replayed")
    args = parser.parse_args()
    marks = [n for n in (10, 100, 1000, args.epochs) if n <= args.epochs]
    marks = sorted(set(marks))

    writes = capture_cartpole_epoch(args.capture_epochs)
    n_scalars = sum(1 for _, stats in writes for v in stats.values() if np.isscalar(v))
    n_values = sum(len(np.ravel(np.concatenate([np.ravel(x) for x in v]))) for _, stats in writes
                   for v in stats.values() if not np.isscalar(v) and len(v))
    print(f"one epoch of the CartPole run: {len(writes)} writes, {n_scalars} scalars, {n_values:,} sample values")

    with tempfile.TemporaryDirectory() as tmp:
        new_dir, old_dir = Path(tmp) / "new", Path(tmp) / "old"
        new_dir.mkdir()
        old_dir.mkdir()
        # ---- new: per-epoch appends -------------------------------------------------------------------------
        store = StatsStore(directory=new_dir)
        publish, total = {}, {}
        for epoch in range(1, args.epochs + 1):
            t0 = time.perf_counter()
            write_epoch(store, epoch, writes)
            t1 = time.perf_counter()
            store.flush()
            t2 = time.perf_counter()
            publish[epoch], total[epoch] = t1 - t0, t2 - t0
        store.close()

        def median(times: dict[int, float], n: int) -> float:
            return statistics.median(times[e] for e in range(max(1, n - args.window + 1), n + 1))

        # ---- reference: rewrite everything, measured at the same N ---------------------------------------------
        memory = StatsStore()
        old = {}
        done = 0
        for n in marks:
            for epoch in range(done + 1, n):
                write_epoch(memory, epoch, writes)
            done = n
            # the epoch's own writes (as in the new layout's figures), then the rewrite
            t0 = time.perf_counter()
            write_epoch(memory, n, writes)
            write_s = time.perf_counter() - t0
            runs = []
            for _ in range(3 if n <= 100 else 1):
                t0 = time.perf_counter()
                rewrite_everything(memory, old_dir)
                runs.append(time.perf_counter() - t0)
            old[n] = write_s + min(runs)

        # ---- opening the run -------------------------------------------------------------------------------
        open_new, open_old = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            loaded = open_for_dashboard(new_dir)
            open_new.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            open_reference(old_dir)
            open_old.append(time.perf_counter() - t0)
        assert loaded.to_dataframe().equals(store.to_dataframe()), "the saved run does not read back as written"
        dashboard_s = None
        try:
            from maze_lab.widgets.dashboard import TrainingDashboard

            t0 = time.perf_counter()
            TrainingDashboard(StatsStore.load(new_dir))
            dashboard_s = time.perf_counter() - t0
        except ImportError:
            pass
        size_new = _mb(new_dir / "stats.arrows")
        size_old = _mb(old_dir / "stats.parquet", old_dir / "samples.npz")

    print()
    print(f"time to save epoch N (median of epochs N-{args.window - 1}..N for the new layout; ms)")
    print()
    print("| N | new: training thread | new: until on disk | reference: rewrite everything | reference / new |")
    print("|---|---|---|---|---|")
    for n in marks:
        new_total = median(total, n)
        print(f"| {n:,} | {median(publish, n) * 1e3:.3f} | {new_total * 1e3:.2f} | {old[n] * 1e3:,.0f} | "
              f"{old[n] / new_total:,.0f}× |")
    first, last = marks[0], marks[-1]
    ratio_new = median(total, last) / median(total, first)
    ratio_old = old[last] / old[first]
    print(f"| epoch {last:,} / epoch {first:,} | {median(publish, last) / median(publish, first):.2f} | "
          f"{ratio_new:.2f} | {ratio_old:.0f} | |")
    print()
    print(f"opening the {args.epochs:,}-epoch run for a dashboard (best of 3)")
    print()
    print("| layout | size on disk | open (load + table + epochs + last epoch's samples) |")
    print("|---|---|---|")
    print(f"| stats.arrows (new) | {size_new:.1f} MB | {min(open_new):.3f} s |")
    print(f"| stats.parquet + samples.npz (reference) | {size_old:.1f} MB | {min(open_old):.3f} s |")
    if dashboard_s is not None:
        print(f"\nTrainingDashboard on the loaded {args.epochs:,}-epoch store (load + figures): {dashboard_s:.3f} s")
    print()
    print(f"bench: stats_store write_{last}_vs_{first}={ratio_new:.2f} open_{last}_epochs_s={min(open_new):.3f} "
          f"reference_write_{last}_vs_{first}={ratio_old:.0f} reference_save_{last}_s={old[last]:.2f} "
          f"cpus={os.cpu_count()}")


if __name__ == "__main__":
    main()
