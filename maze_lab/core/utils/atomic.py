"""Atomic file writes that leave no temporary file behind, even when the writing process is killed mid-write.

Where the kernel offers it (Linux, most local filesystems), the data is written into an anonymous file
(``O_TMPFILE``) in the target's directory: a process killed while writing leaves nothing, because the file has no
name until it is complete. It then gets a name for the moment of one ``rename``. Elsewhere a named temporary file
beside the target is written and renamed, and removed again on any error the process survives.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

TMP_SUFFIX = ".tmp"
"""Suffix of the short-lived names of files being written (``<name>.<random>.tmp``)."""


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}{TMP_SUFFIX}")


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_atomic(path: str | Path, data: bytes | memoryview, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` at once: readers see the old file or the new one, never a part; a crash at any
    point leaves the old file and at most no stray temporary file (see the module docstring)."""
    path = Path(path)
    directory = path.parent
    o_tmpfile = getattr(os, "O_TMPFILE", None)
    if o_tmpfile is not None:
        try:
            fd = os.open(directory, o_tmpfile | os.O_WRONLY, mode)
        except OSError:
            fd = -1  # the filesystem has no anonymous files: a named temporary file below
        if fd >= 0:
            tmp = _tmp_name(path)
            try:
                # a failed write (a full disk) is the error: writing it all again into a named file would only
                # leave that behind where the process dies meanwhile; the anonymous file goes with its descriptor
                _write_all(fd, data)
            except BaseException:
                os.close(fd)
                raise
            try:
                os.link(f"/proc/self/fd/{fd}", tmp)  # named only from here to the rename just below
            except OSError:  # no /proc: a named temporary file below
                os.close(fd)
                fd = -1
            if fd >= 0:
                os.close(fd)
                try:
                    os.replace(tmp, path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        tmp.unlink()
                    raise
                return
    tmp = _tmp_name(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def remove_stray_temporaries(directory: str | Path) -> list[Path]:
    """Remove temporary files of interrupted writes (``*.tmp``) directly in ``directory``; returns what was removed.
    Only regular files are touched."""
    removed = []
    directory = Path(directory)
    if not directory.is_dir():
        return removed
    for entry in os.scandir(directory):
        if entry.name.endswith(TMP_SUFFIX) and entry.is_file(follow_symlinks=False):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed
