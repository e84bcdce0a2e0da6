"""Shared by the tests of files: rewrite a zip file with some members replaced or added; a small real disk."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def rewrite_zip(src: Path, dst: Path, replace: dict[str, bytes], level: int = 6) -> Path:
    """A copy of ``src`` with the members in ``replace`` replaced (or added)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as zout:
        for name in zin.namelist():
            zout.writestr(name, replace.get(name, zin.read(name)))
        for name, data in replace.items():
            if name not in zin.namelist():
                zout.writestr(name, data)
    return dst


@contextlib.contextmanager
def small_tmpfs(parent: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (e.g. ``"1m"``) mounted at a fresh directory below ``parent`` while the block runs, a
    disk that really fills up (the test is skipped where one cannot be mounted)."""
    if not sys.platform.startswith("linux") or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs Linux")
    mount_point = parent / "small_disk"
    mount_point.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip() or proc.returncode}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], check=True)
