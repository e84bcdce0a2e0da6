"""The statistics files of a run: ``stats.arrows``, an append-only Arrow IPC stream with one record batch per
completed epoch, written by a background thread, and its bounded reader.

Each record batch holds one epoch (one commit of the StatsStore): scalar rows carry ``value``; sample rows
(actions, observations) carry ``samples``, the raw little-endian bytes of an array whose type is ``dtype``
(the smallest of int8/int16/int32/float32/float64 that holds the values exactly). A reader stops at the last
complete batch, so an epoch is either wholly in the file or not at all.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import warnings
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from maze_lab.core.utils.atomic import write_atomic
from maze_lab.core.utils.safe_files import UnsafeFileError, open_regular, read_at_most

STATS_FILE = "stats.arrows"
"""The statistics of a run, one Arrow IPC record batch per epoch (``pyarrow.ipc.open_stream`` reads it)."""

FORMAT_NAME = b"maze-lab-stats"
FORMAT_VERSION = b"1"

MAX_STATS_BYTES = 2 * 1024**3
"""Default limit on the size of a statistics file a reader accepts (and on what it may unpack)."""

SAMPLE_DTYPES = {"int8": "<i1", "int16": "<i2", "int32": "<i4", "float32": "<f4", "float64": "<f8"}
"""The sample types a file may name, and their little-endian numpy types; anything else is refused."""

Row = tuple[int, str, str, str, str, float]
Sample = tuple[int, str, str, str, str, np.ndarray]


class StatsFileContents(NamedTuple):
    """What :func:`read_stats_file` found: the rows and samples of its complete epochs."""

    rows: list[Row]
    samples: list[Sample]
    epochs: int
    """The number of complete epochs (record batches)."""
    end: int
    """The byte offset where the last complete epoch ends (where an appender goes on)."""


class StatsFileError(ValueError):
    """A statistics file cannot be read: too large, not maze-lab's, or corrupt."""


class StatsWriteError(OSError):
    """Statistics could not be written (disk full, no permission); the epochs written before stay readable."""


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema([("epoch", pa.int64()), ("prefix", pa.string()), ("topic", pa.string()),
                      ("event", pa.string()), ("name", pa.string()), ("value", pa.float64()),
                      ("samples", pa.binary()), ("dtype", pa.string())],
                     metadata={b"format": FORMAT_NAME, b"format_version": FORMAT_VERSION})


def compact(values: np.ndarray) -> tuple[bytes, str]:
    """The bytes and type name of the smallest type that holds ``values`` (float64) exactly."""
    values = np.asarray(values, dtype=np.float64)
    if values.size and np.isfinite(values).all() and np.array_equal(values, np.trunc(values)):
        lo, hi = values.min(), values.max()
        for name in ("int8", "int16", "int32"):
            info = np.iinfo(name)
            if info.min <= lo and hi <= info.max:
                return values.astype(SAMPLE_DTYPES[name]).tobytes(), name
    with np.errstate(over="ignore", invalid="ignore"):
        as32 = values.astype("<f4")
    if np.array_equal(as32.astype(np.float64), values, equal_nan=True):
        return as32.tobytes(), "float32"
    return values.astype("<f8").tobytes(), "float64"


def encode_epoch(rows: Sequence[Row], samples: Sequence[Sample]) -> bytes:
    """One epoch as an encapsulated Arrow IPC record batch message."""
    import pyarrow as pa

    packed = [compact(s[5]) for s in samples]
    idents = [r[:5] for r in rows] + [s[:5] for s in samples]
    columns = [pa.array([i[0] for i in idents], pa.int64())]
    columns += [pa.array([i[k] for i in idents], pa.string()) for k in range(1, 5)]
    columns.append(pa.array([r[5] for r in rows] + [None] * len(samples), pa.float64()))
    columns.append(pa.array([None] * len(rows) + [p[0] for p in packed], pa.binary()))
    columns.append(pa.array([None] * len(rows) + [p[1] for p in packed], pa.string()))
    return pa.record_batch(columns, schema=_schema()).serialize().to_pybytes()


def stream_header() -> bytes:
    """The schema message every ``stats.arrows`` file starts with."""
    return _schema().serialize().to_pybytes()


class EpochAppender:
    """Appends epochs to ``stats.arrows`` in a background thread, in the order they were submitted.

    The first write creates (truncates) the file, unless ``resume_at`` is given: then the file holds complete
    epochs up to that byte offset (see :attr:`StatsFileContents.end`), anything after it is cut off and new epochs
    follow. A failed write cuts the file back to the end of the last complete epoch and is kept as :attr:`error`,
    and later epochs are not written.
    """

    def __init__(self, directory: str | Path, resume_at: int | None = None):
        self.path = Path(directory) / STATS_FILE
        self._cond = threading.Condition()
        self._queue: deque[tuple[list[Row], list[Sample]]] = deque()
        self._busy = False
        self._fd: int | None = None
        self._created = resume_at is not None
        self._offset = 0 if resume_at is None else int(resume_at)
        self.written = 0
        self.error: StatsWriteError | None = None

    def submit(self, rows: list[Row], samples: list[Sample]) -> None:
        """Queue one epoch; returns at once (a thread is started where none is draining the queue)."""
        with self._cond:
            if self.error is not None:
                return
            self._queue.append((rows, samples))
            if not self._busy:
                self._busy = True
                threading.Thread(target=self._drain, name=f"maze-lab stats {self.path.parent.name}",
                                 daemon=True).start()

    def _drain(self) -> None:
        while True:
            with self._cond:
                if not self._queue or self.error is not None:
                    self._queue.clear()
                    self._busy = False
                    self._cond.notify_all()
                    return
                rows, samples = self._queue.popleft()
            try:
                self._append(encode_epoch(rows, samples))
            except BaseException as err:  # noqa: BLE001 - kept and raised in the training thread
                self._fail(err)
            with self._cond:
                self.written += self.error is None
                self._cond.notify_all()

    def _append(self, data: bytes) -> None:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | (0 if self._created else os.O_TRUNC)
            self._fd = os.open(self.path, flags, 0o644)
            size = os.lseek(self._fd, 0, os.SEEK_END)
            if self._created and size < self._offset:
                raise OSError(errno.EIO, f"{self.path} has {size} bytes, fewer than the {self._offset} it held when "
                                         f"it was read: it was changed by someone else")
            os.ftruncate(self._fd, self._offset)  # a partly written epoch of an earlier writer goes
            os.lseek(self._fd, self._offset, os.SEEK_SET)
            if not self._created:
                self._created = True
                self._write_all(stream_header())
        self._write_all(data)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self._offset += len(data)

    def _fail(self, err: BaseException) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, self._offset)  # readers see whole epochs only; frees what was partly written
                os.lseek(self._fd, self._offset, os.SEEK_SET)
            except OSError:
                pass
        code = err.errno if isinstance(err, OSError) and err.errno else errno.EIO
        reason = err.strerror if isinstance(err, OSError) and err.strerror else f"{type(err).__name__}: {err}"
        message = (f"could not append statistics to {self.path}: {reason}; the {self.written} epochs "
                   f"written before are readable, later ones are kept in memory only")
        with self._cond:
            self.error = StatsWriteError(code, message)
            self.error.__cause__ = err

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every submitted epoch is on disk (or failed); raises :class:`StatsWriteError` on failure."""
        with self._cond:
            if not self._cond.wait_for(lambda: not self._busy, timeout):
                raise TimeoutError(f"statistics not written to {self.path} within {timeout} s "
                                   f"({len(self._queue)} epochs queued)")
            if self.error is not None:
                raise self.error

    def close(self) -> None:
        """Wait for the queue, then close the file (a later submit appends to it again)."""
        try:
            self.flush()
        finally:
            with self._cond:
                fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)


# ---- reading ---------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _open_checked(path: Path, max_bytes: int, base: str | Path | None = None) -> Iterator[tuple[BinaryIO, int]]:
    """``path`` open for reading and its size, where it is a regular file inside ``base`` (default: the directory
    holding it) of at most ``max_bytes``; a FIFO, a device, a symlink leading out of the directory or a larger file
    raises :class:`StatsFileError` naming it (opening never blocks)."""
    try:
        fh = open_regular(path, path.parent if base is None else base, what="statistics file")
    except UnsafeFileError as err:
        raise StatsFileError(str(err)) from None
    with fh:
        size = os.fstat(fh.fileno()).st_size  # of a regular file: what it holds now
        if size > max_bytes:
            raise StatsFileError(f"{path} is {size:,} bytes, more than the limit of {max_bytes:,} bytes for a "
                                 f"statistics file; it was not read (pass max_bytes=... to read it if you trust it)")
        yield fh, size


def _read_bounded(path: Path, max_bytes: int) -> bytes:
    with _open_checked(path, max_bytes) as (fh, _):
        data = read_at_most(fh, max_bytes + 1)  # the bytes read count, not st_size
    if len(data) > max_bytes:
        raise StatsFileError(f"{path} grew past the limit of {max_bytes:,} bytes while it was read; not read")
    return data


def _read_tail(path: Path, start: int, max_bytes: int) -> bytes:
    with _open_checked(path, max_bytes) as (fh, size):
        if size < start:
            raise StatsFileError(f"{path} is shorter ({size:,} bytes) than the {start:,} bytes read before: it was "
                                 f"replaced or cut; load the run again")
        fh.seek(start)
        data = read_at_most(fh, max_bytes - start + 1)
    if start + len(data) > max_bytes:
        raise StatsFileError(f"{path} grew past the limit of {max_bytes:,} bytes while it was read; not read")
    return data


def read_stats_file(path: str | Path, max_bytes: int = MAX_STATS_BYTES, start: int = 0) -> StatsFileContents:
    """Rows, samples, number of epochs (record batches) and end of the last complete one of a ``stats.arrows`` file.

    A truncated last epoch (a writer killed mid-write, or one still being written) is left out, with a warning
    where ``start`` is 0; anything that is not a maze-lab statistics stream is refused with :class:`StatsFileError`.

    :param start: read only the epochs after this byte offset (the ``end`` of an earlier read of the same file):
        how a reader follows a run that is still writing. ``epochs`` then counts the new epochs only.
    """
    import pyarrow as pa

    path = Path(path)
    if start:
        header = stream_header()
        tail = _read_tail(path, start, max_bytes)
        if not tail:
            return StatsFileContents([], [], 0, start)
        data, offset = header + tail, start - len(header)
    else:
        data, offset = _read_bounded(path, max_bytes), 0
    if not data:
        return StatsFileContents([], [], 0, 0)
    source = pa.BufferReader(pa.py_buffer(data))
    try:
        reader = pa.ipc.open_stream(source)
    except (pa.ArrowException, OSError, ValueError) as err:
        raise StatsFileError(f"{path} is not a maze-lab statistics file ({err})") from None
    metadata = reader.schema.metadata or {}
    if metadata.get(b"format") != FORMAT_NAME or not reader.schema.equals(_schema(), check_metadata=False):
        raise StatsFileError(f"{path} is not a maze-lab statistics file (format {metadata.get(b'format')!r}, "
                             f"columns {reader.schema.names}; expected {FORMAT_NAME!r} with "
                             f"{_schema().names})")
    if metadata.get(b"format_version") != FORMAT_VERSION:
        raise StatsFileError(f"{path} has statistics format version {metadata.get(b'format_version')!r}; this "
                             f"maze-lab reads version {FORMAT_VERSION!r}")
    batches = []
    end = source.tell()
    while True:
        try:
            batch = reader.read_next_batch()
            batch.validate(full=True)  # offsets and lengths inside the buffers: nothing is read out of bounds
        except StopIteration:
            break
        except (pa.ArrowException, OSError, ValueError) as err:
            if not start:
                warnings.warn(f"{path}: statistics after epoch record {len(batches)} are incomplete and were left "
                              f"out ({err})", stacklevel=2)
            break
        batches.append(batch)
        end = source.tell()
    end += offset
    if not batches:
        return StatsFileContents([], [], 0, end)
    table = pa.Table.from_batches(batches, schema=reader.schema)
    cols = {name: table.column(name).to_pylist() for name in table.column_names}
    rows: list[Row] = []
    samples: list[Sample] = []
    for epoch, prefix, topic, event, name, value, raw, dtype in zip(
            cols["epoch"], cols["prefix"], cols["topic"], cols["event"], cols["name"], cols["value"],
            cols["samples"], cols["dtype"], strict=True):
        if raw is None:
            rows.append((epoch, prefix, topic, event, name, value))
            continue
        numpy_type = SAMPLE_DTYPES.get(dtype)
        if numpy_type is None or len(raw) % np.dtype(numpy_type).itemsize:
            raise StatsFileError(f"{path}: samples of {topic}/{event}/{name} at epoch {epoch} have type {dtype!r} "
                                 f"and {len(raw)} bytes; valid types: {sorted(SAMPLE_DTYPES)}")
        samples.append((epoch, prefix, topic, event, name, np.frombuffer(raw, numpy_type).astype(np.float64)))
    return StatsFileContents(rows, samples, len(batches), end)


def file_identity(path: str | Path, end: int, window: int = 64 * 1024) -> tuple[int, int, int, str] | None:
    """What says whether ``path`` is still the statistics file a reader read up to byte ``end``: (device, inode,
    file type, digest of the up to ``window`` bytes before ``end``); None where there is no file. Another run's file
    copied over it (a new inode) or written into it (other bytes before ``end``, or fewer than ``end`` bytes) gives
    another identity; epochs appended after ``end`` do not. Opening never blocks (a FIFO is no statistics file), and
    a symlink is not followed (its target names it)."""
    import hashlib
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError:  # a symlink (ELOOP) or no permission: what the link or entry is, not what it leads to
        try:
            info = os.lstat(path)
            target = os.readlink(path) if stat.S_ISLNK(info.st_mode) else ""
        except OSError:
            return None
        return info.st_dev, info.st_ino, stat.S_IFMT(info.st_mode), target
    try:
        info = os.fstat(fd)
        kind = stat.S_IFMT(info.st_mode)
        if not stat.S_ISREG(info.st_mode):
            return info.st_dev, info.st_ino, kind, ""
        start = max(0, int(end) - window)
        data = os.pread(fd, int(end) - start, start) if end > 0 else b""
        digest = hashlib.blake2b(data, digest_size=16).hexdigest() if len(data) == end - start else "short"
        return info.st_dev, info.st_ino, kind, digest
    finally:
        os.close(fd)


def write_stats_file(directory: str | Path, epochs: Sequence[tuple[Sequence[Row], Sequence[Sample]]]) -> Path:
    """Write ``stats.arrows`` with the given epochs at once, atomically (a temporary file, then a rename)."""
    path = Path(directory) / STATS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    data = bytearray(stream_header())
    for rows, samples in epochs:
        data += encode_epoch(rows, samples)
    write_atomic(path, data)  # the previous stats.arrows (if any) is unchanged until the new one is complete
    return path
