"""Statistics writers: console table, TensorBoard event files, and the in-memory StatsStore."""

from __future__ import annotations

import math
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from maze_lab.core.log_stats.aggregation import LogStats, StatKey


class LogStatsWriter(ABC):
    """Receives the epoch statistics of a run."""

    @abstractmethod
    def write(self, prefix: str | None, step: int, stats: LogStats) -> None:
        """Write the statistics of one epoch (``step``) logged under ``prefix`` (e.g. train / eval)."""

    def close(self) -> None:
        """Flush and release resources."""


def is_distribution(value: Any) -> bool:
    """Whether a statistic holds a list of samples (histogram) instead of a number."""
    return isinstance(value, list | tuple | np.ndarray) and not np.isscalar(value)


def _flat_samples(value: Sequence[Any]) -> np.ndarray:
    if len(value) == 0:
        return np.zeros(0, dtype=np.float64)
    try:
        return np.concatenate([np.ravel(np.asarray(v, dtype=np.float64)) for v in value])
    except (TypeError, ValueError):
        return np.zeros(0, dtype=np.float64)


def stat_path(prefix: str | None, key: StatKey) -> str:
    """The console path of a statistic: ``prefix Topic event name/group``."""
    parts = [p for p in (prefix, key.topic, key.event_name, key.label) if p]
    return " ".join(parts)


def format_value(value: Any) -> str:
    """Numbers with three decimals; sample lists as ``[len:N, μ:x]``."""
    if is_distribution(value):
        samples = _flat_samples(value)
        mu = float(samples.mean()) if samples.size else float("nan")
        return f"[len:{len(value)}, μ:{mu:.1f}]"
    try:
        return f"{float(value):.3f}"
    except (TypeError, ValueError):
        return str(value)


class ConsoleWriter(LogStatsWriter):
    """Prints each epoch as a ``step|path|value`` table."""

    STEP_W, PATH_W, VALUE_W = 5, 76, 20

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream

    def format_table(self, prefix: str | None, step: int, stats: LogStats) -> str:
        """The table text for one epoch."""
        lines = [
            f"{'step':>{self.STEP_W}}|{'path':<{self.PATH_W}}|{'value':>{self.VALUE_W}}",
            f"{'=' * self.STEP_W}|{'=' * self.PATH_W}|{'=' * self.VALUE_W}",
        ]
        for key, value in stats.items():
            path = stat_path(prefix, key)
            if len(path) > self.PATH_W:
                path = path[: self.PATH_W - 2] + ".."
            lines.append(f"{step:>{self.STEP_W}}|{path:<{self.PATH_W}}|{format_value(value):>{self.VALUE_W}}")
        return "\n".join(lines)

    def write(self, prefix: str | None, step: int, stats: LogStats) -> None:
        """Print the table."""
        print(self.format_table(prefix, step, stats), file=self.stream or sys.stdout, flush=True)


def tensorboard_tag(prefix: str | None, key: StatKey) -> str:
    """TensorBoard tag ``<prefix>_<Topic>/<event>/<name>`` (sections per topic, as in Maze)."""
    section = f"{prefix}_{key.topic}" if prefix else key.topic
    label = key.label
    return f"{section}/{key.event_name}" + (f"/{label}" if label else "")


class TensorBoardWriter(LogStatsWriter):
    """Writes scalars and histograms to TensorBoard event files in ``log_dir``."""

    def __init__(self, log_dir: str | Path):
        from torch.utils.tensorboard import SummaryWriter  # heavy import, only when used

        self.log_dir = str(log_dir)
        self._writer = SummaryWriter(log_dir=self.log_dir)

    def write(self, prefix: str | None, step: int, stats: LogStats) -> None:
        """Add each statistic; sample lists go in as histograms."""
        for key, value in stats.items():
            tag = tensorboard_tag(prefix, key)
            if is_distribution(value):
                samples = _flat_samples(value)
                if samples.size:
                    self._writer.add_histogram(tag, samples, global_step=step)
                continue
            try:
                scalar = float(value)
            except (TypeError, ValueError):
                continue
            if math.isfinite(scalar):
                self._writer.add_scalar(tag, scalar, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        """Close the event file."""
        self._writer.close()


class StatsStore(LogStatsWriter):
    """Append-only, thread-safe record of every epoch's statistics; the one place the UI reads from.

    Scalars are kept as rows; sample lists (actions, observations) are kept as arrays, capped at
    ``max_samples`` per statistic and epoch (an even subsample), for distribution plots.
    """

    COLUMNS = ("epoch", "prefix", "topic", "event", "name", "value")

    def __init__(self, max_samples: int = 20_000):
        self.max_samples = max_samples
        self._rows: list[tuple] = []
        self._samples: list[tuple] = []
        self._lock = threading.Lock()
        self._version = 0

    def write(self, prefix: str | None, step: int, stats: LogStats) -> None:
        """Append one epoch."""
        rows, samples = [], []
        for key, value in stats.items():
            ident = (int(step), prefix or "", key.topic, key.event_name, key.label)
            if is_distribution(value):
                arr = _flat_samples(value)
                if arr.size > self.max_samples:
                    arr = arr[np.linspace(0, arr.size - 1, self.max_samples).astype(np.int64)]
                samples.append((*ident, arr))
                continue
            try:
                rows.append((*ident, float(value)))
            except (TypeError, ValueError):
                continue
        with self._lock:
            self._rows.extend(rows)
            self._samples.extend(samples)
            self._version += 1

    @property
    def version(self) -> int:
        """Increments on every write; lets readers skip redraws when nothing changed."""
        return self._version

    def __len__(self) -> int:
        return len(self._rows)

    def to_dataframe(self):
        """Long-format DataFrame: one row per (epoch, prefix, topic, event, name)."""
        import pandas as pd

        with self._lock:
            rows = list(self._rows)
        return pd.DataFrame(rows, columns=list(self.COLUMNS))

    def wide(self, prefix: str | None = None):
        """One row per epoch, one column per ``prefix/topic/event/name`` statistic."""
        df = self.to_dataframe()
        if prefix is not None:
            df = df[df.prefix == prefix]
        if df.empty:
            import pandas as pd

            return pd.DataFrame()
        df = df.assign(column=df.prefix + "/" + df.topic + "/" + df.event + "/" + df.name)
        return df.pivot_table(index="epoch", columns="column", values="value", aggfunc="last")

    def series(self, topic: str, event: str, name: str, prefix: str | None = None):
        """The per-epoch values of one statistic as a pandas Series indexed by epoch."""
        df = self.to_dataframe()
        sel = (df.topic == topic) & (df.event == event) & (df.name == name)
        if prefix is not None:
            sel &= df.prefix == prefix
        if not sel.any():
            have = sorted(set(zip(df.topic, df.event, df.name, strict=True)))
            raise KeyError(f"no statistic {topic}/{event}/{name}; available: {have[:50]}")
        return df[sel].set_index("epoch")["value"]

    def samples(self, topic: str | None = None, event: str | None = None, epoch: int | None = None) -> list[tuple]:
        """Distribution samples as ``(epoch, prefix, topic, event, name, array)`` tuples."""
        with self._lock:
            out = list(self._samples)
        return [
            s
            for s in out
            if (topic is None or s[2] == topic) and (event is None or s[3] == event)
            and (epoch is None or s[0] == epoch)
        ]

    def save(self, directory: str | Path) -> Path:
        """Write ``stats.parquet`` (scalars) and ``samples.npz`` (distributions) into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "stats.parquet"
        tmp = path.with_suffix(".parquet.tmp")
        self.to_dataframe().to_parquet(tmp, index=False)
        tmp.replace(path)  # atomic: a crash never leaves a half-written stats file
        with self._lock:
            samples = list(self._samples)
        if samples:
            arrays = {f"s{i}": s[5] for i, s in enumerate(samples)}
            meta = np.array([[str(x) for x in s[:5]] for s in samples], dtype=str)
            tmp_npz = directory / "samples.tmp.npz"
            np.savez_compressed(tmp_npz, meta=meta, **arrays)
            tmp_npz.replace(directory / "samples.npz")
        return path

    @classmethod
    def load(cls, directory: str | Path) -> StatsStore:
        """Read a store saved by :meth:`save` (no code is executed from the files)."""
        import pandas as pd

        directory = Path(directory)
        store = cls()
        df = pd.read_parquet(directory / "stats.parquet")
        store._rows = [tuple(r) for r in df.itertuples(index=False, name=None)]
        npz = directory / "samples.npz"
        if npz.exists():
            with np.load(npz, allow_pickle=False) as data:
                meta = data["meta"]
                for i, m in enumerate(meta):
                    store._samples.append((int(m[0]), m[1], m[2], m[3], m[4], data[f"s{i}"]))
        store._version = 1
        return store
