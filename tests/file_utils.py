"""Shared by the tests of trajectory files: rewrite a zip file with some members replaced or added."""

from __future__ import annotations

import zipfile
from pathlib import Path


def rewrite_zip(src: Path, dst: Path, replace: dict[str, bytes], level: int = 6) -> Path:
    """A copy of ``src`` with the members in ``replace`` replaced (or added)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as zout:
        for name in zin.namelist():
            zout.writestr(name, replace.get(name, zin.read(name)))
        for name, data in replace.items():
            if name not in zin.namelist():
                zout.writestr(name, data)
    return dst
