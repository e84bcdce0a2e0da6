"""Process-wide default statistics writers, for plain-Python scripts (``setup_logging``)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from maze_lab.core.log_stats.writers import ConsoleWriter, LogStatsWriter, TensorBoardWriter

_lock = threading.Lock()
_default_writers: list[LogStatsWriter] = []


def register_log_stats_writer(writer: LogStatsWriter) -> None:
    """Add a writer that every env and trainer without writers of its own uses."""
    with _lock:
        _default_writers.append(writer)


def default_writers() -> list[LogStatsWriter]:
    """The registered default writers."""
    with _lock:
        return list(_default_writers)


def clear_log_stats_writers() -> None:
    """Remove (and close) all default writers."""
    with _lock:
        writers = list(_default_writers)
        _default_writers.clear()
    for w in writers:
        w.close()


def setup_logging(job_config: Any = None, log_dir: str | Path = ".", console: bool = True,
                  tensorboard: bool = True) -> list[LogStatsWriter]:
    """Register a console writer and a TensorBoard writer in ``log_dir`` as defaults (replacing earlier ones).

    :param job_config: the run's configuration; written to ``log_dir/config.yaml`` where given.
    """
    clear_log_stats_writers()
    writers: list[LogStatsWriter] = []
    if console:
        writers.append(ConsoleWriter())
    if tensorboard:
        writers.append(TensorBoardWriter(log_dir))
    for w in writers:
        register_log_stats_writer(w)
    if job_config is not None:
        from omegaconf import OmegaConf

        Path(log_dir).mkdir(parents=True, exist_ok=True)
        (Path(log_dir) / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(job_config)))
    return writers
