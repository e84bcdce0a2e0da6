"""Run directories: ``<log_base_dir>/<experiment_name>/<timestamp>/`` with config, statistics, checkpoints, summary."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from maze_lab.core.utils.atomic import write_atomic
from maze_lab.core.utils.safe_files import UnsafeFileError, open_regular, read_at_most, read_bounded

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


class DamagedRunError(ValueError):
    """A run directory whose files cannot be read: an empty or invalid summary, an invalid ``config.yaml``,
    truncated statistics."""


class ExistingRunError(FileExistsError):
    """A new run was asked to write into the directory of an existing run."""


MAX_SUMMARY_BYTES = 16 * 1024**2
"""Largest ``maze_lab_run.json`` that is read (summaries are a few kB; tracebacks of failures included)."""

MAX_CONFIG_BYTES = 16 * 1024**2
"""Largest ``config.yaml`` that is read."""

RUN_OUTPUTS = ("config.yaml", "stats.arrows", "checkpoints", "tensorboard",
               "event_logs", "model_graphs", "trajectories")
"""What a run writes into its directory besides the summary: a directory holding any of these has results."""


def _read_bounded_text(path: Path, max_bytes: int, what: str, base: Path | None = None) -> str:
    """The text of ``path``, refused (DamagedRunError) where it is larger than ``max_bytes``, not UTF-8, or not a
    regular file inside ``base`` (default: the directory holding it): a FIFO, a device or a symlink leaving it."""
    try:
        data = read_bounded(path, max_bytes, path.parent if base is None else base, what=what)
    except UnsafeFileError as err:
        raise DamagedRunError(str(err)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DamagedRunError(f"{path} is not UTF-8 text ({err}); a {what} is written as UTF-8") from None


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
    def console_log(self) -> Path:
        """What the run printed: its epoch lines (and a detached run's whole console)."""
        return self.path / "console.log"

    def read_console_tail(self, max_bytes: int = 64 * 1024) -> str:
        """The last ``max_bytes`` of :attr:`console_log` as text, starting at a whole line ("" where there is none
        yet); a FIFO, a device or a symlink leaving the run is refused (DamagedRunError), as for every file read
        from a run directory."""
        try:
            fh = open_regular(self.console_log, self.path, what="console log")
        except FileNotFoundError:
            return ""
        except UnsafeFileError as err:
            raise DamagedRunError(str(err)) from None
        with fh:
            size = os.fstat(fh.fileno()).st_size
            start = max(0, size - max_bytes)
            fh.seek(start)
            data = read_at_most(fh, min(size, max_bytes))
        text = data.decode("utf-8", errors="replace")
        if start and "\n" in text:
            text = text.split("\n", 1)[1]  # the first line was cut
        return text

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
        """The summary (status, seed, versions, metrics); an empty or invalid file raises DamagedRunError."""
        text = _read_bounded_text(self.summary_file, MAX_SUMMARY_BYTES, "run summary", self.path)
        if not text.strip():
            raise DamagedRunError(f"{self.summary_file} is empty; a run summary is a JSON object with the status, "
                                  f"seed and metrics of the run")
        try:
            summary = json.loads(text)
        except json.JSONDecodeError as err:
            raise DamagedRunError(f"{self.summary_file} is not valid JSON ({err}); a run summary is a JSON object "
                                  f"with the status, seed and metrics of the run") from None
        if not isinstance(summary, dict):
            raise DamagedRunError(f"{self.summary_file} holds a JSON {type(summary).__name__}; a run summary is a "
                                  f"JSON object with the status, seed and metrics of the run")
        return summary

    def read_config(self) -> dict[str, Any]:
        """``config.yaml`` as plain data, read without resolving interpolations or instantiating anything; a file
        that is not a YAML mapping as maze-lab writes it (or one with YAML aliases) raises DamagedRunError."""
        import io

        import yaml
        from omegaconf import DictConfig, OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        path = self.config_file
        text = _read_bounded_text(path, MAX_CONFIG_BYTES, "config.yaml", self.path)
        try:
            # aliases can expand a small file into a huge configuration, and maze-lab never writes them
            if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=yaml.SafeLoader)):
                raise DamagedRunError(f"{path} uses YAML aliases (*name), which maze-lab never writes; it was not "
                                      f"read")
            cfg = OmegaConf.load(io.StringIO(text))
        except (yaml.YAMLError, OmegaConfBaseException, ValueError) as err:
            if isinstance(err, DamagedRunError):
                raise
            raise DamagedRunError(f"{path} is not a valid configuration ({' '.join(str(err).split())[:300]})") \
                from None
        if not isinstance(cfg, DictConfig):
            raise DamagedRunError(f"{path} holds a YAML {type(OmegaConf.to_container(cfg)).__name__}; the "
                                  f"configuration of a run is a mapping (env, wrappers, model, algorithm, ...)")
        return OmegaConf.to_container(cfg, resolve=False)

    def check_statistics(self) -> None:
        """Raise DamagedRunError where a statistics file of the run is truncated or not maze-lab's (its header and
        footer are read, not the whole file)."""
        stream = self.path / "stats.arrows"
        with self._open_statistics(stream) as fh:
            head = read_at_most(fh, 1024**2) if fh is not None else b""
        if head:
            import pyarrow as pa

            try:
                pa.ipc.open_stream(pa.py_buffer(head))
            except (pa.ArrowException, OSError, ValueError) as err:
                raise DamagedRunError(f"{stream} is not a maze-lab statistics file "
                                      f"({' '.join(str(err).split())[:200]})") from None

    @contextlib.contextmanager
    def _open_statistics(self, path: Path) -> Iterator[BinaryIO | None]:
        """``path`` open for reading where it is a regular file inside the run (None where there is none); anything
        else raises DamagedRunError naming it (a FIFO, a device, a symlink leading out of the run or nowhere)."""
        try:
            fh = open_regular(path, self.path, what="statistics file")
        except FileNotFoundError:
            if os.path.islink(path):
                raise DamagedRunError(f"{path} is a symlink to {os.readlink(path)}, which does not exist") from None
            fh = None
        except (UnsafeFileError, IsADirectoryError) as err:
            raise DamagedRunError(str(err)) from None
        try:
            yield fh
        finally:
            if fh is not None:
                fh.close()

    def has_results(self) -> bool:
        """Whether a run wrote its configuration, statistics or checkpoints here (see :data:`RUN_OUTPUTS`)."""
        return any((self.path / name).exists() for name in RUN_OUTPUTS)

    def write_summary(self, **updates: Any) -> dict[str, Any]:
        """Merge ``updates`` into the summary and write it atomically (threads of one process that write the same
        summary take turns, so that no update is lost)."""
        with _summary_lock(self.summary_file):
            summary = self.read_summary() if self.summary_file.exists() else {}
            summary.update(updates)
            summary["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
            text = json.dumps(summary, indent=2, default=_json_default)
            try:
                write_atomic(self.summary_file, text.encode())  # no temporary file outlives the write
            except OSError as err:
                if err.errno != errno.ENOSPC or not self.summary_file.exists():
                    raise
                # disk full: the status of the run must still be recorded, so the summary is rewritten in place,
                # within the space its file already holds
                _overwrite_in_place(self.summary_file, summary)
            return summary

    @classmethod
    def open(cls, path: str | Path) -> RunDirectory:
        """Open an existing run directory; anything else is refused with a clear message."""
        p = Path(path)
        if not p.is_dir():
            raise NotARunDirectoryError(f"{p} is not a directory; give the path of a maze-lab run directory "
                                        f"(outputs/<experiment_name>/<timestamp>)")
        if not os.path.lexists(p / MARKER):  # a marker that cannot be read still marks a (damaged) run
            found = sorted(x.name for x in p.iterdir())[:10]
            raise NotARunDirectoryError(
                f"{p} is not a maze-lab run directory: it has no {MARKER} (found: {found}); run directories are "
                f"created by RunContext, `maze-lab train` or `maze-lab run`")
        return cls(p)


_summary_locks: dict[str, threading.Lock] = {}
_summary_locks_guard = threading.Lock()


def _summary_lock(path: Path) -> threading.Lock:
    key = os.path.abspath(path)
    with _summary_locks_guard:
        return _summary_locks.setdefault(key, threading.Lock())


def _overwrite_in_place(path: Path, summary: dict[str, Any]) -> None:
    """Rewrite ``path`` without allocating disk space: long fields are cut to fit the blocks the file holds."""
    room = max(path.stat().st_blocks * 512, path.stat().st_size)
    text = json.dumps(summary, indent=2, default=_json_default)
    for field in ("error", "reason"):
        if len(text.encode()) <= room:
            break
        value = str(summary.get(field) or "")
        keep = max(0, len(value) - (len(text.encode()) - room) - 16)
        summary = {**summary, field: value[len(value) - keep:]}  # the end of a traceback names the error
        text = json.dumps(summary, indent=2, default=_json_default)
    if len(text.encode()) > room:
        text = json.dumps({k: summary[k] for k in ("status", "reason", "experiment", "epoch") if k in summary})
    with path.open("r+b") as fh:
        fh.write(text.encode())
        fh.truncate()


def _json_default(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)
