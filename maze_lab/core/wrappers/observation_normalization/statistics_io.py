"""Saving and loading normalization statistics as JSON or .npz, never as pickle (loading runs no code)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from maze_lab.core.utils.safe_files import read_bounded
from maze_lab.core.wrappers.observation_normalization.normalization_strategies.base import StructuredStatisticsType

MAX_STATISTICS_BYTES = 256 * 1024**2
"""Largest normalization statistics file that is read (a few values per observation entry)."""

_FORMAT = "maze-lab/normalization-statistics"
SUPPORTED_SUFFIXES = (".json", ".npz")


def check_statistics_path(path: str | os.PathLike) -> Path:
    """The path as a Path; a suffix other than .json or .npz is an error (pickle files are refused)."""
    path = Path(path)
    if path.suffix.lower() not in SUPPORTED_SUFFIXES:
        hint = " (pickle is not supported: loading a pickle can run code from the file)" \
            if path.suffix.lower() in (".pkl", ".pickle", ".p") else ""
        raise ValueError(f"normalization statistics file '{path}': use a .json or .npz file name{hint}")
    return path


def save_normalization_statistics(statistics: StructuredStatisticsType, path: str | os.PathLike) -> Path:
    """Write ``{observation: {statistic: array}}`` to a .json or .npz file."""
    path = check_statistics_path(path)
    if path.parent != Path():
        path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".npz":
        arrays = {}
        for obs, stats in statistics.items():
            for name, value in stats.items():
                arrays[f"{obs}/{name}"] = np.asarray(value, dtype=np.float32)
        with open(path, "wb") as f:
            np.savez(f, **arrays)
    else:
        data: dict[str, Any] = {"format": _FORMAT, "version": 1, "statistics": {
            obs: {name: np.asarray(value, dtype=np.float32).tolist() for name, value in stats.items()}
            for obs, stats in statistics.items()
        }}
        path.write_text(json.dumps(data, indent=1))
    return path


def load_normalization_statistics(path: str | os.PathLike) -> StructuredStatisticsType:
    """Read statistics written by :func:`save_normalization_statistics` (float32 arrays)."""
    path = check_statistics_path(path)
    # a regular file only (a FIFO or a device from a copied run directory cannot block or flood the reader), read
    # within a bound counted in bytes
    raw = read_bounded(path, MAX_STATISTICS_BYTES, what="normalization statistics file")
    result: StructuredStatisticsType = {}
    if path.suffix.lower() == ".npz":
        with np.load(io.BytesIO(raw), allow_pickle=False) as data:
            for key in data.files:
                obs, _, name = key.rpartition("/")
                result.setdefault(obs, {})[name] = np.asarray(data[key], dtype=np.float32)
        return result
    data = json.loads(raw.decode("utf-8"))
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise ValueError(f"'{path}' is not a maze-lab normalization statistics file (expected format '{_FORMAT}')")
    for obs, stats in data["statistics"].items():
        result[obs] = {name: np.asarray(value, dtype=np.float32) for name, value in stats.items()}
    return result
