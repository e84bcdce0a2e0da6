"""Run directories: ``<log_base_dir>/<experiment>/<timestamp>/`` with config, statistics, checkpoints, summary."""

from __future__ import annotations

import json
import os
import platform
import time
from datetime import datetime
from pathlib import Path
from typing import Any

MARKER = "maze_lab_run.json"
"""The run summary; its presence marks a directory as a maze-lab run."""

OUTPUTS_ENV = "MAZE_LAB_OUTPUTS"
"""Environment variable naming the directory every run goes to (absolute, or relative to the working directory)."""

PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg", "notebooks")
"""A directory holding one of these is a project root: runs go to its ``outputs/``."""


def project_root(start: str | Path | None = None) -> Path | None:
    """The nearest directory at or above ``start`` (default: the working directory) holding a project marker.

    Markers are ``.git``, ``pyproject.toml``, ``setup.py``, ``setup.cfg`` and a ``notebooks/`` folder, so that a
    kernel started in ``<project>/notebooks`` and a shell in ``<project>`` find the same root.
    """
    here = Path(start if start is not None else Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if any((directory / marker).exists() for marker in PROJECT_MARKERS):
            return directory
    return None


def default_outputs_dir(start: str | Path | None = None) -> Path:
    """Where runs go unless ``log_base_dir`` says otherwise: ``$MAZE_LAB_OUTPUTS`` where set, else
    ``<project root>/outputs`` (see :func:`project_root`), else ``./outputs``; always an absolute path."""
    here = Path(start if start is not None else Path.cwd()).resolve()
    configured = os.environ.get(OUTPUTS_ENV, "").strip()
    if configured:
        path = Path(configured).expanduser()
        return path if path.is_absolute() else (here / path).resolve()
    root = project_root(here)
    return (root if root is not None else here) / "outputs"


class NotARunDirectoryError(ValueError):
    """A directory is not a maze-lab run directory."""


def new_run_dir(log_base_dir: str | Path, experiment: str) -> Path:
    """Create a fresh, unique timestamped run directory."""
    base = Path(log_base_dir) / experiment
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    path = base / stamp
    n = 1
    while True:
        try:
            path.mkdir(parents=True, exist_ok=False)
            return path
        except FileExistsError:
            n += 1
            path = base / f"{stamp}_{n}"


def versions() -> dict[str, str]:
    """Versions of Python and the main libraries, for the run summary."""
    import gymnasium
    import numpy
    import torch

    import maze_lab

    return {"python": platform.python_version(), "maze_lab": maze_lab.__version__, "torch": torch.__version__,
            "gymnasium": gymnasium.__version__, "numpy": numpy.__version__}


class RunDirectory:
    """The files of one run and its summary (``maze_lab_run.json``)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    # well-known locations
    @property
    def config_file(self) -> Path:
        """The composed configuration (YAML)."""
        return self.path / "config.yaml"

    @property
    def checkpoint_dir(self) -> Path:
        """``state_dict_last.pt`` and ``state_dict_best.pt``."""
        return self.path / "checkpoints"

    @property
    def last_checkpoint(self) -> Path:
        """The checkpoint written after every epoch and on stop."""
        return self.checkpoint_dir / "state_dict_last.pt"

    @property
    def best_checkpoint(self) -> Path:
        """The weights of the best evaluation."""
        return self.checkpoint_dir / "state_dict_best.pt"

    @property
    def tensorboard_dir(self) -> Path:
        """TensorBoard event files."""
        return self.path / "tensorboard"

    @property
    def event_log_dir(self) -> Path:
        """Raw event logs (TSV, one file per event type and env)."""
        return self.path / "event_logs"

    @property
    def trajectory_dir(self) -> Path:
        """Recorded episodes (``*.trajectory.zip``) of rollouts of the run."""
        return self.path / "trajectories"

    @property
    def graph_dir(self) -> Path:
        """Model graph SVGs."""
        return self.path / "model_graphs"

    @property
    def summary_file(self) -> Path:
        """The run summary."""
        return self.path / MARKER

    def read_summary(self) -> dict[str, Any]:
        """The summary (status, seed, versions, metrics)."""
        return json.loads(self.summary_file.read_text())

    def write_summary(self, **updates: Any) -> dict[str, Any]:
        """Merge ``updates`` into the summary and write it atomically."""
        summary = self.read_summary() if self.summary_file.exists() else {}
        summary.update(updates)
        summary["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        tmp = self.summary_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(summary, indent=2, default=_json_default))
        os.replace(tmp, self.summary_file)
        return summary

    @classmethod
    def open(cls, path: str | Path) -> RunDirectory:
        """Open an existing run directory; anything else is refused with a clear message."""
        p = Path(path)
        if not p.is_dir():
            raise NotARunDirectoryError(f"{p} is not a directory; give the path of a maze-lab run directory "
                                        f"(outputs/<experiment>/<timestamp>)")
        if not (p / MARKER).exists():
            found = sorted(x.name for x in p.iterdir())[:10]
            raise NotARunDirectoryError(
                f"{p} is not a maze-lab run directory: it has no {MARKER} (found: {found}); run directories are "
                f"created by RunContext, `maze-lab train` or `maze-lab run`")
        return cls(p)


def _json_default(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)
