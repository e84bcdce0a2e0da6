"""What every widget reads: a run's statistics, and where known its live handle and its directory.

A widget is given a ``RunHandle`` (a run training in this kernel), a ``RunContext``, a ``LoadedRun``, a
``StatsStore`` or a run directory. :class:`RunSource` turns any of them into the same few things: the StatsStore
(kept up to date with :meth:`RunSource.refresh`), the status and error of the run, its progress, its summary and
configuration (read as data only), and the handle for pause / resume / stop where the run trains in this kernel.
A run directory may belong to a run of another process (a ``maze-lab train`` in a terminal, another user's
notebook): its ``stats.arrows`` is followed as it grows, and its status read from ``maze_lab_run.json``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from maze_lab.core.log_stats.writers import StatsStore


class RunSource:
    """One run as widgets see it.

    :param source: a RunHandle (live, controllable), a RunContext (its run; live where it trains in the background),
        a LoadedRun, a StatsStore (statistics only) or the path of a run directory (followed while it grows).
    """

    def __init__(self, source: Any):
        self.handle: Any = None
        self.run_dir: Path | None = None
        self._store: StatsStore | None = None
        self._follow = False
        if isinstance(source, RunSource):
            self.handle, self.run_dir, self._store, self._follow = (source.handle, source.run_dir, source._store,
                                                                    source._follow)
        elif isinstance(source, StatsStore):
            self._store = source
        elif hasattr(source, "store") and hasattr(source, "progress") and hasattr(source, "run_dir"):  # RunHandle
            self.handle, self._store, self.run_dir = source, source.store, Path(source.run_dir)
        elif hasattr(source, "_single"):  # RunContext
            run = source._single()
            self._store, self.run_dir = run.store, Path(run.run_directory.path)
            self.handle = run.handle
        elif hasattr(source, "directory") and hasattr(source, "path"):  # LoadedRun
            self.run_dir, self._follow = Path(source.path), True
        elif isinstance(source, str | Path):
            from maze_lab.run.run_dir import RunDirectory

            self.run_dir, self._follow = RunDirectory.open(source).path, True
        else:
            raise TypeError(f"widgets read a RunHandle, RunContext, LoadedRun, StatsStore or run directory, got "
                            f"{type(source).__name__}")
        self.load_error: str | None = None
        self._summary: dict[str, Any] = {}
        self._summary_read = 0.0

    # ---- statistics -----------------------------------------------------------------------------------------
    @property
    def store(self) -> StatsStore:
        """The run's statistics (an empty store while a followed run has not finished an epoch)."""
        if self._store is None:
            self._store = StatsStore()
            self.refresh()
        return self._store

    def refresh(self) -> bool:
        """Take in what the run wrote since the last call (followed run directories; a live store needs nothing);
        returns whether anything new came. Never raises for a damaged or vanished directory: the reason is kept
        in :attr:`load_error` and shown by the widgets."""
        if not self._follow:
            return False
        try:
            if self._store is None or (len(self._store) == 0 and self._store._source is None):
                self._store = StatsStore.follow(self.run_dir)
                self.load_error = None
                return len(self._store) > 0
            new = self._store.refresh()
            self.load_error = None
            return new > 0
        except (OSError, ValueError) as err:  # includes StatsFileError, DamagedRunError
            if self._store is None:
                self._store = StatsStore()
            self.load_error = f"{type(err).__name__}: {err}"
            return False

    @property
    def version(self) -> int:
        """Changes whenever new epochs arrived."""
        return self.store.version

    # ---- the run ---------------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """A short label: the experiment and run directory name, or ``statistics``."""
        if self.run_dir is None:
            return "statistics"
        return f"{self.run_dir.parent.name}/{self.run_dir.name}"

    def summary(self, max_age: float = 0.5) -> dict[str, Any]:
        """``maze_lab_run.json`` (re-read at most every ``max_age`` seconds); ``{}`` without a directory, and
        ``{"status": "damaged", "error": ...}`` where it cannot be read."""
        if self.run_dir is None:
            return {}
        now = time.monotonic()
        if now - self._summary_read >= max_age:
            from maze_lab.run.run_dir import RunDirectory

            try:
                self._summary = RunDirectory(self.run_dir).read_summary()
            except FileNotFoundError:
                self._summary = {"status": "deleted", "error": f"{self.run_dir} no longer exists"} \
                    if not self.run_dir.exists() else {"status": "created"}
            except (OSError, ValueError) as err:
                self._summary = {"status": "damaged", "error": str(err)}
            self._summary_read = now
        return self._summary

    @property
    def status(self) -> str:
        """starting / running / paused / stopping / done / stopped / failed (and interrupted, damaged, deleted,
        unknown for directories)."""
        if self.handle is not None:
            return self.handle.status
        return str(self.summary().get("status", "unknown" if self.run_dir is None else "created"))

    @property
    def error(self) -> str | None:
        """The failure's message and traceback, where the run failed."""
        if self.handle is not None:
            return self.handle.traceback if self.handle.status == "failed" else None
        summary = self.summary()
        return summary.get("error") if summary.get("status") in ("failed", "damaged", "deleted") else None

    @property
    def live(self) -> bool:
        """Whether new statistics may still come."""
        if self.handle is not None:
            return bool(self.handle.running)
        return self._follow and self.status in ("created", "running", "starting", "stopping", "paused")

    @property
    def controllable(self) -> bool:
        """Whether pause / resume / stop reach the run (it trains in this kernel)."""
        return self.handle is not None

    def progress(self) -> dict[str, Any]:
        """epoch, n_epochs, env_steps, last_eval_reward, warnings (what is known)."""
        if self.handle is not None:
            return dict(self.handle.progress)
        summary = self.summary()
        out = {k: summary.get(k) for k in ("epoch", "env_steps", "last_eval_reward", "best_eval_reward",
                                           "best_epoch")}
        out["status"] = self.status
        out["n_epochs"] = self._target_epochs()
        if out["epoch"] is None and len(self.store):
            out["epoch"] = int(self.store.to_dataframe().epoch.max())
        out["warnings"] = []
        return out

    def _target_epochs(self) -> int | None:
        """The run's n_epochs (None: until early stopping), from its config.yaml, parsed once: a run's
        configuration does not change after the run was created."""
        if "_n_epochs" not in self.__dict__:
            config = self.config()
            if not config:
                return None  # not written yet (or unreadable): looked for again next time
            n_epochs = config.get("n_epochs") or (config.get("algorithm") or {}).get("n_epochs")
            self._n_epochs = n_epochs if isinstance(n_epochs, int) and n_epochs > 0 else None
        return self._n_epochs

    def config(self) -> dict[str, Any]:
        """The run's composed configuration as plain data (``{}`` where there is none or it cannot be read)."""
        if self.run_dir is None:
            return {}
        from maze_lab.run.run_dir import RunDirectory

        try:
            return RunDirectory(self.run_dir).read_config()
        except (OSError, ValueError):
            return {}
