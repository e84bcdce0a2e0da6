"""Files of directories that came from someone else (run, study and trajectory directories): read and written only
as regular files inside the directory.

A run directory can be copied from a colleague, downloaded with a paper or left on a shared disk, so none of its
entries is trusted to be what its name says. What maze-lab reads from such a directory must be a regular file
whose real path stays inside the directory (a symlink to another file of the directory is fine); a symlink that
leaves the directory, a device, a FIFO or a socket is refused with :class:`UnsafeFileError`, a one-line message
naming the path. Files are opened non-blocking (a FIFO never blocks its reader) and checked through the opened
descriptor (``fstat`` and, on Linux, ``/proc/self/fd``), so the file checked is the file read. Reads are bounded
by the bytes actually read, never by ``st_size`` (which is 0 for a device or a FIFO).

The functions here import nothing of maze-lab; callers turn :class:`UnsafeFileError` into their own error types
(the run layer into ``DamagedRunError``, the statistics reader into ``StatsFileError``, ...).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

__all__ = ["FileTooLargeError", "UnsafeFileError", "check_inside", "check_write_dir", "file_kind", "open_regular",
           "read_at_most", "read_bounded", "read_bounded_text", "real_path_of"]


class UnsafeFileError(OSError):
    """A file or directory maze-lab was asked to read or write is not a regular file (or directory) inside its
    directory: a symlink leaving it, a device, a FIFO or a socket. ``str(err)`` is one line naming the path;
    ``err.path`` is the path as given."""

    def __init__(self, message: str, path: str | os.PathLike[str] | None = None):
        super().__init__(message)
        self.path = None if path is None else Path(path)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else super().__str__()


class FileTooLargeError(UnsafeFileError):
    """A file holds more bytes than the reader's limit (counted while reading, not taken from ``st_size``)."""


_O_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


_KINDS = ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO (named pipe)"),
          (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"),
          (stat.S_ISLNK, "symlink"))


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, in words: ``regular file``, ``directory``, ``FIFO (named pipe)``, ``character device``,
    ``block device``, ``socket``, ``symlink`` or ``special file``."""
    return next((name for test, name in _KINDS if test(mode)), "special file")


def _inside(real: str, base_real: str) -> bool:
    return real == base_real or real.startswith(base_real.rstrip(os.sep) + os.sep)


def real_path_of(fd: int, path: str | os.PathLike[str]) -> str:
    """The real path of the file open as ``fd`` (from ``/proc/self/fd`` where there is one, so that it is the file
    that was opened; else the real path of ``path``)."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)
    return target if target.startswith(os.sep) else os.path.realpath(path)


def check_inside(path: str | os.PathLike[str], base: str | os.PathLike[str], *, what: str = "file",
                 real: str | None = None) -> Path:
    """``path`` where its real path (symlinks resolved) is ``base`` or inside it; else :class:`UnsafeFileError`.

    :param real: the real path already known (e.g. of an opened descriptor); default: resolved from ``path``.
    """
    real = os.path.realpath(path) if real is None else real
    base_real = os.path.realpath(base)
    if not _inside(real, base_real):
        raise UnsafeFileError(f"{path} leads to {real}, outside {base}: maze-lab reads and writes a {what} only "
                              f"where it lies inside its directory, so it was refused", path)
    return Path(path)


def _refuse_kind(path: str | os.PathLike[str], mode: int, what: str) -> UnsafeFileError:
    return UnsafeFileError(f"{path} is a {file_kind(mode)}, not a regular file: maze-lab reads a {what} only from a "
                           f"regular file, so it was not read", path)


def open_regular(path: str | os.PathLike[str], base: str | os.PathLike[str] | None = None, *,
                 what: str = "file") -> BinaryIO:
    """Open ``path`` for reading (binary, unbuffered) after checking that it is a regular file inside ``base``.

    It is opened non-blocking (a FIFO cannot block) and checked through the descriptor: ``fstat`` says it is a
    regular file, and its real path lies inside ``base`` (None: no location check). A missing file raises
    FileNotFoundError as usual; anything refused raises :class:`UnsafeFileError`.

    :param what: what the file is, for the message (``run summary``, ``checkpoint``, ...).
    """
    try:
        before = os.stat(path)  # no open at all of a FIFO, device or socket: opening some has side effects
    except FileNotFoundError:
        raise
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnsafeFileError(f"{path} is a symlink loop: maze-lab reads a {what} only from a regular file, so "
                                  f"it was not read", path) from None
        raise
    if not stat.S_ISREG(before.st_mode):
        if stat.S_ISDIR(before.st_mode):
            raise IsADirectoryError(errno.EISDIR, f"{path} is a directory, not a {what}", str(path))
        raise _refuse_kind(path, before.st_mode, what)
    if base is not None:
        check_inside(path, base, what=what)  # a file outside is not even opened
    fd = os.open(path, _O_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # replaced between stat and open
            raise _refuse_kind(path, info.st_mode, what)
        if base is not None:
            check_inside(path, base, what=what, real=real_path_of(fd, path))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def read_at_most(fh: BinaryIO, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``fh`` (fewer only at its end), read in chunks of at most 1 MiB."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = fh.read(min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_bounded(path: str | os.PathLike[str], max_bytes: int, base: str | os.PathLike[str] | None = None, *,
                 what: str = "file", offset: int = 0) -> bytes:
    """The bytes of ``path`` from ``offset`` on (see :func:`open_regular` for the checks); more than ``max_bytes``
    of them raise :class:`FileTooLargeError`: a file larger than that is not read at all, and one that grows while
    it is read is stopped after ``max_bytes + 1`` bytes (the bytes read count, not ``st_size``)."""
    with open_regular(path, base, what=what) as fh:
        size = os.fstat(fh.fileno()).st_size - offset
        if size > max_bytes:
            raise FileTooLargeError(f"{path} is {size:,} bytes, more than the {max_bytes:,} bytes a {what} may "
                                    f"have; it was not read", path)
        if offset:
            fh.seek(offset)
        data = read_at_most(fh, max_bytes + 1)
    if len(data) > max_bytes:
        raise FileTooLargeError(f"{path} grew past the {max_bytes:,} bytes a {what} may have while it was read; it "
                                f"was not read", path)
    return data


def read_bounded_text(path: str | os.PathLike[str], max_bytes: int, base: str | os.PathLike[str] | None = None, *,
                      what: str = "file") -> str:
    """The UTF-8 text of ``path`` (see :func:`read_bounded`); text that is not UTF-8 raises UnicodeDecodeError."""
    return read_bounded(path, max_bytes, base, what=what).decode("utf-8")


def check_write_dir(directory: str | os.PathLike[str], base: str | os.PathLike[str] | None = None, *,
                    create: bool = True, what: str = "directory") -> Path:
    """``directory`` as a place to write into: a directory (made, with its parents, where ``create`` and it is
    missing) whose real path lies inside ``base`` (None: no location check). A symlink that leaves ``base``, or an
    entry that is not a directory, raises :class:`UnsafeFileError` and nothing is made."""
    directory = Path(directory)
    if base is not None:
        check_inside(directory, base, what=what)  # before anything is made: a symlink may lead outside
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        if not create:
            raise
        directory.mkdir(parents=True, exist_ok=True)
        info = os.stat(directory)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnsafeFileError(f"{directory} is a symlink loop, not a {what}: nothing was written", directory) \
                from None
        raise
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeFileError(f"{directory} is a {file_kind(info.st_mode)}, not a {what}: nothing was written",
                              directory)
    if base is not None:
        check_inside(directory, base, what=what)  # as it is now that it exists
    return directory
