"""Statistics writers: console table, TensorBoard event files, and the StatsStore (in memory, saved per epoch)."""

from __future__ import annotations

import contextlib
import math
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from maze_lab.core.log_stats.aggregation import LogStats, StatKey
from maze_lab.core.utils.yielding import give_way

if TYPE_CHECKING:
    from maze_lab.core.log_stats.stats_files import EpochAppender


class LogStatsWriter(ABC):
    """Receives the epoch statistics of a run."""

    @abstractmethod
    def write(self, prefix: str | None, step: int, stats: LogStats) -> None:
        """Write the statistics of one epoch (``step``) logged under ``prefix`` (e.g. train / eval)."""

    def _rows_to_keep(self, stats: LogStats) -> dict[int, np.ndarray]:
        """For sample lists of N equally shaped samples (the observations and actions of N steps): which samples to
        keep where they hold more than ``max_samples`` values. Lists of the same length keep the same samples (the
        keys of one policy key stay aligned, as the distribution widget reads them), as many as the widest list
        fits in fewer than ``max_samples`` values (an array of exactly ``max_samples`` values is an evenly thinned
        one, as older versions of this store wrote them)."""
        widest: dict[int, int] = {}
        for value in stats.values():
            if not is_distribution(value) or not len(value):
                continue
            first = np.shape(value[0])
            size = int(np.prod(first)) if first else 1
            if len(value) * size > self.max_samples:
                widest[len(value)] = max(widest.get(len(value), 0), size)
        return {n: np.linspace(0, n - 1, max(1, (self.max_samples - 1) // size)).astype(np.int64)
                for n, size in widest.items()}

    def begin_epoch(self, step: int) -> None:
        """The writes of epoch ``step`` follow (a writer that publishes whole epochs holds them back)."""

    def end_epoch(self, step: int, completed: bool = True) -> None:
        """Epoch ``step`` is complete (``completed``) or abandoned; a writer holding it back publishes or drops it."""

    def close(self) -> None:
        """Flush and release resources."""


def is_distribution(value: Any) -> bool:
    """Whether a statistic holds a list of samples (histogram) instead of a number."""
    return isinstance(value, list | tuple | np.ndarray) and not np.isscalar(value)


def _flat_samples(value: Sequence[Any]) -> np.ndarray:
    if len(value) == 0:
        return np.zeros(0, dtype=np.float64)
    try:  # one conversion where all samples have one shape (the usual case): several times faster than per sample
        return np.array(value, dtype=np.float64).ravel()  # a copy: the caller may reuse its arrays
    except (TypeError, ValueError):
        pass
    try:
        return np.concatenate([np.ravel(np.asarray(v, dtype=np.float64)) for v in value])
    except (TypeError, ValueError):
        return np.zeros(0, dtype=np.float64)


def stat_path(prefix: str | None, key: StatKey) -> str:
    """The console path of a statistic: ``prefix Topic event name/group``."""
    parts = [p for p in (prefix, key.topic, key.event_name, key.label) if p]
    return " ".join(parts)


def format_value(value: Any) -> str:
    """Numbers with three decimals, or four significant digits where three decimals would hide them (a learning
    rate of 2.5e-4 reads ``0.00025``, not ``0.000``; a million reads ``1e+06``); sample lists as
    ``[len:N, μ:x]``."""
    if is_distribution(value):
        samples = _flat_samples(value)
        mu = float(samples.mean()) if samples.size else float("nan")
        return f"[len:{len(value)}, μ:{mu:.1f}]"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if number != 0.0 and math.isfinite(number) and not 0.0995 <= abs(number) < 1e6:
        return f"{number:.4g}"
    return f"{number:.3f}"


class ConsoleWriter(LogStatsWriter):
    """Prints each epoch as a ``step|path|value`` table."""

    STEP_W, PATH_W, VALUE_W = 5, 76, 20

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream
        self.closed = False
        """True once the console went away; nothing more is printed."""

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
        """Print the table; a console that was closed (``maze-lab train ... | head``) ends the printing, never the
        run: the statistics still go to the run directory and TensorBoard."""
        if self.closed:
            return
        try:
            print(self.format_table(prefix, step, stats), file=self.stream or sys.stdout, flush=True)
        except (BrokenPipeError, ValueError):  # a reader that went away; a stream closed under us (ValueError)
            self.closed = True


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
                give_way()  # histograms take a while: a background run in a kernel makes room for a running cell
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


class _Epoch:
    """Writes held back by one thread between ``begin_epoch`` and ``end_epoch``."""

    def __init__(self) -> None:
        self.depth = 0
        self.rows: list[tuple] = []
        self.samples: list[tuple] = []


def epoch_commit(writers: Iterable[LogStatsWriter], step: int) -> AbstractContextManager[None]:
    """Group the writes of epoch ``step`` to ``writers`` made inside the block: each writer publishes them together
    when the block ends, and drops them when it raises (readers never see half an epoch)."""
    return _EpochCommit(writers, step)


class _EpochCommit(AbstractContextManager):
    """The context manager of :func:`epoch_commit` (each writer once, however often it is listed)."""

    def __init__(self, writers: Iterable[LogStatsWriter], step: int):
        self.writers = list({id(w): w for w in writers}.values())
        self.step = step

    def __enter__(self) -> None:
        for w in self.writers:
            w.begin_epoch(self.step)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        first: BaseException | None = None
        for w in self.writers:
            try:
                w.end_epoch(self.step, completed=exc_type is None)
            except Exception as err:  # noqa: BLE001 - every writer gets its epoch; the first error is raised
                first = first or err
        if first is not None and exc_type is None:
            raise first


class StatsStore(LogStatsWriter):
    """Append-only, thread-safe record of every epoch's statistics; the one place the UI reads from.

    Scalars are kept as rows; sample lists (actions, observations) are kept as arrays, capped at
    ``max_samples`` per statistic and epoch (an even subsample), for distribution plots.

    Readers see whole epochs: writes made between :meth:`begin_epoch` and :meth:`end_epoch` (the trainers do this
    through :func:`epoch_commit`) are published together, and :attr:`version` changes once per published epoch;
    a write outside an epoch is published at once. With a ``directory``, every published epoch is appended to
    ``<directory>/stats.arrows`` by a background thread (see :mod:`maze_lab.core.log_stats.stats_files`).

    :param directory: where to persist the statistics as they are published (default: memory only).
    """

    COLUMNS = ("epoch", "prefix", "topic", "event", "name", "value")

    def __init__(self, max_samples: int = 20_000, directory: str | Path | None = None):
        self.max_samples = max_samples
        self._rows: list[tuple] = []
        self._samples: list[tuple] = []
        self._lock = threading.Lock()
        self._version = 0
        self._open: dict[int, _Epoch] = {}
        self._appender: EpochAppender | None = None
        self._source: tuple[Path, int] | None = None  # (stats.arrows, end of its last complete epoch) of load()
        if directory is not None:
            self.persist_to(directory)

    # ---- writing -------------------------------------------------------------------------------------------
    def persist_to(self, directory: str | Path) -> Path:
        """Append every epoch published from now on to ``<directory>/stats.arrows``, off the calling thread; returns
        the file's path. A store loaded from that file goes on after its last complete epoch; otherwise the file is
        started anew, with the epochs published before written first."""
        from maze_lab.core.log_stats.stats_files import STATS_FILE, EpochAppender

        path = Path(directory) / STATS_FILE
        with self._lock:
            if self._appender is not None:
                raise RuntimeError(f"this StatsStore already writes to {self._appender.path}")
            if self._source is not None and self._source[1] > 0 and _same_file(self._source[0], path):
                self._appender = EpochAppender(directory, resume_at=self._source[1])
            else:
                self._appender = EpochAppender(directory)
                if self._rows or self._samples:
                    self._appender.submit(list(self._rows), list(self._samples))
            return self._appender.path

    def write(self, prefix: str | None, step: int, stats: LogStats) -> None:
        """Add the statistics of epoch ``step``: held back until :meth:`end_epoch` where this thread opened an epoch,
        published at once otherwise."""
        rows, samples = [], []
        keep = self._rows_to_keep(stats)
        for key, value in stats.items():
            ident = (int(step), prefix or "", key.topic, key.event_name, key.label)
            if is_distribution(value):
                arr = _flat_samples(value)
                n = len(value)
                if n in keep and arr.size % n == 0:  # whole samples, the same for every list of n samples
                    arr = arr.reshape(n, -1)[keep[n]].ravel()
                elif arr.size > self.max_samples:
                    arr = arr[np.linspace(0, arr.size - 1, self.max_samples).astype(np.int64)]
                samples.append((*ident, arr))
                continue
            try:
                rows.append((*ident, float(value)))
            except (TypeError, ValueError):
                continue
        pending = self._open.get(threading.get_ident())
        if pending is not None:
            pending.rows.extend(rows)
            pending.samples.extend(samples)
            return
        self._publish(rows, samples)

    def begin_epoch(self, step: int) -> None:
        """Hold back this thread's writes until :meth:`end_epoch` (nested calls join the outer epoch)."""
        with self._lock:
            self._open.setdefault(threading.get_ident(), _Epoch()).depth += 1

    def end_epoch(self, step: int, completed: bool = True) -> None:
        """Publish this thread's held-back writes as one epoch (``completed``) or drop them; raises
        :class:`~maze_lab.core.log_stats.stats_files.StatsWriteError` where an earlier epoch could not be saved."""
        ident = threading.get_ident()
        with self._lock:
            pending = self._open.get(ident)
            if pending is None:
                raise RuntimeError(f"end_epoch({step}) without begin_epoch in this thread")
            pending.depth -= 1
            if pending.depth > 0:
                return
            del self._open[ident]
        if completed:
            self._publish(pending.rows, pending.samples)

    def _publish(self, rows: list[tuple], samples: list[tuple]) -> None:
        with self._lock:
            self._rows.extend(rows)
            self._samples.extend(samples)
            self._version += 1
            appender = self._appender
            if appender is not None:
                appender.submit(rows, samples)
        if appender is not None and appender.error is not None:
            raise appender.error

    @property
    def write_error(self) -> OSError | None:
        """Why the statistics could not be saved (None while all is well)."""
        return None if self._appender is None else self._appender.error

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every published epoch is on disk; raises ``StatsWriteError`` where one could not be written
        and ``TimeoutError`` after ``timeout`` seconds. Without a directory there is nothing to wait for."""
        if self._appender is not None:
            self._appender.flush(timeout)

    def close(self) -> None:
        """Wait for the background writes and close the file (errors stay in :attr:`write_error`)."""
        if self._appender is not None:
            with contextlib.suppress(OSError):
                self._appender.close()

    # ---- reading -------------------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        """Changes once per published epoch (or write outside an epoch); lets readers skip redraws."""
        return self._version

    def __len__(self) -> int:
        return len(self._rows)

    def rows_since(self, start: int) -> tuple[list[tuple], int]:
        """The scalar rows ``(epoch, prefix, topic, event, name, value)`` published after the first ``start`` ones,
        and how many rows there are in all: rows are only ever appended, so a reader that polls takes in what is new
        instead of every epoch again."""
        with self._lock:
            return self._rows[start:], len(self._rows)

    def _snapshot(self) -> tuple[list[tuple], list[tuple], int]:
        with self._lock:
            return list(self._rows), list(self._samples), self._version

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

    # ---- files ---------------------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write everything published so far to ``<directory>/stats.arrows`` at once (atomically: a consistent
        snapshot taken under one lock); where the store already persists to ``directory``, wait for it instead."""
        from maze_lab.core.log_stats.stats_files import STATS_FILE, write_stats_file

        directory = Path(directory)
        appender = self._appender
        if appender is not None and appender.path == directory / STATS_FILE:
            appender.flush()
            return appender.path
        rows, samples, _ = self._snapshot()
        return write_stats_file(directory, [(rows, samples)])

    @classmethod
    def load(cls, directory: str | Path, max_bytes: int | None = None) -> StatsStore:
        """Read the statistics of a run directory (``stats.arrows``). Nothing in the file is executed; a file over
        ``max_bytes`` (default ``stats_files.MAX_STATS_BYTES``, 2 GiB) is refused with a message naming it."""
        from maze_lab.core.log_stats import stats_files as sf

        directory = Path(directory)
        limit = sf.MAX_STATS_BYTES if max_bytes is None else int(max_bytes)
        store = cls()
        path = directory / sf.STATS_FILE
        if path.exists():
            contents = sf.read_stats_file(path, limit)
            store._rows, store._samples, store._version = contents.rows, contents.samples, contents.epochs
            store._source = (path, contents.end)
        else:
            raise FileNotFoundError(f"{directory} holds no statistics: no {sf.STATS_FILE} (the run may not have "
                                    f"finished an epoch yet)")
        return store

    @classmethod
    def follow(cls, directory: str | Path, max_bytes: int | None = None) -> StatsStore:
        """The statistics of a run directory that may still be training (in this or another process): what is
        there now (nothing yet where the run has not finished an epoch); :meth:`refresh` adds what comes later."""
        from maze_lab.core.log_stats import stats_files as sf

        directory = Path(directory)
        path = directory / sf.STATS_FILE
        if path.exists():
            return cls.load(directory, max_bytes)
        store = cls()
        store._source = (path, 0)
        return store

    def refresh(self, max_bytes: int | None = None) -> int:
        """For a store read by :meth:`load`: add the epochs the run appended to ``stats.arrows`` since (only the
        new bytes are read; an epoch still being written waits for the next call). Returns the number of new
        epochs; 0 for stores that were not loaded from a ``stats.arrows`` file."""
        from maze_lab.core.log_stats import stats_files as sf

        if self._source is None or not self._source[0].exists():
            return 0
        path, end = self._source
        contents = sf.read_stats_file(path, sf.MAX_STATS_BYTES if max_bytes is None else int(max_bytes), start=end)
        if not contents.epochs:
            return 0
        with self._lock:
            self._rows.extend(contents.rows)
            self._samples.extend(contents.samples)
            self._version += contents.epochs
            self._source = (path, contents.end)
        return contents.epochs


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (b.exists() and a.samefile(b))
    except OSError:
        return False
