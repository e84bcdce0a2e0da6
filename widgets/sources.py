"""What every widget reads: a run's statistics, and where known its live handle and its directory.

A widget is given a ``RunHandle`` (a run training in this kernel), a ``RunContext``, an ``AttachedRun``, a
``LoadedRun``, a ``StatsStore`` or a run directory. :class:`RunSource` turns any of them into the same few things: the
StatsStore (kept up to date with :meth:`RunSource.refresh`), the status, reason and error of the run, its progress,
its summary and configuration (read as data only), and the requests a live run takes (pause, resume, stop,
checkpoint; :meth:`RunSource.request`).

A run directory may belong to a run of another process (a detached run, a ``maze-lab train`` in a terminal, another
kernel): its ``stats.arrows`` is followed as it grows, its status is the one a reader must show (``died`` where the
process that owns it is gone; see :func:`maze_lab.run.run_status.resolve_status`), and requests reach it through its
control file without waiting (the run acknowledges them in its summary, which the next poll reads). A ``RunHandle``
of this kernel is asked directly.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from maze_lab.core.log_stats.stats_files import STATS_FILE, file_identity
from maze_lab.core.log_stats.writers import StatsStore
from maze_lab.run.run_status import ENDED, LIVE, RunControlError, resolve_status, send_request

_KEYS = ["prefix", "topic", "event", "name"]


@dataclass
class Request:
    """A request made to a run through :meth:`RunSource.request`, and its acknowledgement once the run gave it."""

    action: str
    at: float = field(default_factory=time.time)
    seq: int | None = None
    """Its number in the run's control file (None for a RunHandle of this kernel, asked directly)."""
    ack: dict[str, Any] | None = None
    """``at``, ``error`` and (a checkpoint) ``checkpoint`` once the run acknowledged it; None before."""


class RunSource:
    """One run as widgets see it.

    :param source: a RunHandle (live, controllable), a RunContext (its run; live where it trains in the background),
        an AttachedRun (a run of any process, e.g. a detached one: followed through its directory), a LoadedRun, a
        StatsStore (statistics only) or the path of a run directory (followed while it grows).
    """

    def __init__(self, source: Any):
        from maze_lab.run.attach import AttachedRun

        self.handle: Any = None
        self.run_dir: Path | None = None
        self._store: StatsStore | None = None
        self._follow = False
        if isinstance(source, RunSource):
            self.handle, self.run_dir, self._store, self._follow = (source.handle, source.run_dir, source._store,
                                                                    source._follow)
        elif isinstance(source, StatsStore):
            self._store = source
        elif isinstance(source, AttachedRun):  # a run of another process: its directory is the way to it
            self.run_dir, self._follow = source.run_dir, True
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
        self.notice: str | None = None
        """Something a reader should know that is no error (statistics read anew after their file was replaced)."""
        self._identity: Any = source._identity if isinstance(source, RunSource) else None
        self._version_base = source._version_base if isinstance(source, RunSource) else 0
        self._summary: dict[str, Any] = {}
        self._resolved: dict[str, Any] = {}
        self._summary_read = 0.0
        self._checkpoint_thread: threading.Thread | None = None

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
                self._read_anew()
                self.load_error = None
                return len(self._store) > 0
            if self._stats_replaced():
                # another file (another run's) took the place of the one read so far: its epochs, not a mix
                self._read_anew()
                self.load_error = None
                self.notice = (f"{STATS_FILE} of {self.run_dir} was replaced by another file while it was followed; "
                               f"its statistics were read anew ({time.strftime('%H:%M:%S')})")
                return True
            new = self._store.refresh()
            self._identity = self._stats_identity()
            self.load_error = None
            return new > 0
        except (OSError, ValueError) as err:  # includes StatsFileError, DamagedRunError
            if self._store is None:
                self._store = StatsStore()
            self.load_error = f"{type(err).__name__}: {err}"
            return False

    def _read_anew(self) -> None:
        """Read the run's statistics from the start (a new store: readers that kept the old one see it change)."""
        shown = self.version if self._store is not None else 0
        self._identity = self._stats_identity(end=0)  # the inode before the read: a later swap still shows
        self._store = StatsStore.follow(self.run_dir)
        self._version_base = shown + 1 if shown else 0  # the version moves on, whatever the new store counts
        self._identity = self._stats_identity(inode_of=self._identity)

    def _stats_identity(self, end: int | None = None, inode_of: Any = None) -> Any:
        """The identity of the followed ``stats.arrows`` as read up to the store's end (see ``file_identity``)."""
        source = None if self._store is None else self._store._source
        path = self.run_dir / STATS_FILE if source is None else source[0]
        identity = file_identity(path, source[1] if end is None and source is not None else (end or 0))
        if inode_of is not None and identity is not None and inode_of[:2] != identity[:2]:
            return inode_of  # replaced while it was read: the next look reads it anew
        return identity

    def _stats_replaced(self) -> bool:
        """Whether ``stats.arrows`` is no longer the file read so far (a file that is gone is no replacement: the
        curves read stay)."""
        if self.run_dir is None or self._store is None or self._store._source is None:
            return False
        now = self._stats_identity()
        if now is None:
            return False
        return self._identity is not None and now != self._identity

    @property
    def version(self) -> int:
        """Changes whenever new epochs arrived (or the statistics were read anew)."""
        return self.store.version + self._version_base

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
            # the status a reader shows: `died` where the summary says the run trains but its process is gone
            self._resolved = resolve_status(self.run_dir, self._summary)
            self._summary_read = now
        return self._summary

    def resolved(self, max_age: float = 0.5) -> dict[str, Any]:
        """The run's status as a reader shows it, read with :meth:`summary`: ``status`` (``died`` where its owner is
        gone), ``reason``, ``live`` (a process trains it now), ``last_seen`` and ``owner``; ``{}`` without a
        directory."""
        self.summary(max_age)
        return self._resolved

    @property
    def status(self) -> str:
        """starting / running / paused / stopping / done / stopped / early-stopped / failed (and interrupted, died,
        damaged, deleted, unknown for directories)."""
        if self.handle is not None:
            return self.handle.status
        status = self.resolved().get("status") or self.summary().get("status")
        return str(status or ("unknown" if self.run_dir is None else "created"))

    @property
    def reason(self) -> str | None:
        """Why the run ended as it did (an early stop's patience, a stop on request, when a run that died was last
        seen, a failure's one line); None while it trains or where nothing was recorded."""
        if self.handle is not None:
            if self.handle.running or self.run_dir is None:
                return None
            return self.summary(max_age=0).get("reason")  # written as the run ended: read it anew
        return self.resolved().get("reason") if self.status in ENDED else None

    @property
    def last_seen(self) -> str | None:
        """When the process that owns the run last beat its heartbeat (ISO time), where known."""
        return self.resolved().get("last_seen") if self.run_dir is not None else None

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
        return self._follow and self.status in LIVE

    @property
    def controllable(self) -> bool:
        """Whether pause / resume / stop / checkpoint reach the run: it trains in this kernel (a RunHandle), or a
        live process owns its directory (a detached run, another kernel's, a terminal's)."""
        if self.handle is not None:
            return True
        return self._follow and bool(self.resolved().get("live")) and self.status in LIVE

    # ---- requests ----------------------------------------------------------------------------------------------
    def request(self, action: str) -> Request:
        """Ask the run for ``action`` (pause, resume, stop, checkpoint) without waiting: a RunHandle of this kernel
        directly (a checkpoint is waited for in a thread), any other run through its control file. Follow the
        answer with :meth:`acknowledgement`. Raises RunControlError where the run takes no requests (it has ended,
        or no process owns it)."""
        request = Request(action)
        handle = self.handle
        if handle is not None:
            if action == "stop":
                handle.stop(timeout=0)
            elif action == "pause":
                handle.pause()
            elif action == "resume":
                handle.resume()
            elif action == "checkpoint":
                if self._checkpoint_thread is not None and self._checkpoint_thread.is_alive():
                    raise RunControlError("a checkpoint is being written; wait for it")

                def write() -> None:
                    try:
                        path = handle.checkpoint(timeout=None)
                        request.ack = {"at": time.time(), "error": None,
                                       "checkpoint": None if path is None else str(path)}
                    except Exception as err:  # noqa: BLE001 - shown with the request
                        request.ack = {"at": time.time(), "error": f"{type(err).__name__}: {err}"}

                self._checkpoint_thread = threading.Thread(target=write, daemon=True,
                                                           name=f"maze-lab checkpoint {self.name}")
                self._checkpoint_thread.start()
                return request
            else:
                raise ValueError(f"unknown request {action!r}; one of pause, resume, stop, checkpoint")
            request.ack = {"at": time.time(), "error": None}
            return request
        if self.run_dir is None:
            raise RunControlError("statistics alone take no requests: there is no run to ask")
        if not self.controllable:
            state = self.resolved(max_age=0)
            why = state.get("reason") or f"status {state.get('status')}"
            raise RunControlError(f"the run takes no {action} request: it is not training ({why})")
        request.seq = send_request(self.run_dir, action)
        self._summary_read = 0.0  # the next look reads the summary anew
        return request

    def acknowledgement(self, request: Request) -> dict[str, Any] | None:
        """The run's answer to ``request`` (``at``, ``error``, ``checkpoint``), once it gave one; None before."""
        if request.ack is not None or request.seq is None:
            return request.ack
        control = self.summary().get("control")
        if isinstance(control, dict) and isinstance(control.get("seq"), int) and control["seq"] >= request.seq:
            request.ack = dict(control) if control["seq"] == request.seq else {"at": control.get("at"), "error": None}
        return request.ack

    def progress(self) -> dict[str, Any]:
        """epoch, n_epochs, env_steps, last_eval_reward, warnings (what is known)."""
        if self.handle is not None:
            return dict(self.handle.progress)
        summary = self.summary()
        out = {k: summary.get(k) for k in ("epoch", "env_steps", "last_eval_reward", "best_eval_reward",
                                           "best_epoch")}
        out["status"] = self.status
        target = summary.get("target_epochs")  # what the run was asked for (a detached run's n_epochs too)
        out["n_epochs"] = target if isinstance(target, int) and target > 0 else self._target_epochs()
        if out["epoch"] is None and len(self.store):
            out["epoch"] = int(max(row[0] for row in self.store.rows_since(0)[0]))
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


def series_of(df: Any) -> dict[tuple[str, str, str, str], tuple[np.ndarray, np.ndarray]]:
    """Every statistic of a long-format statistics DataFrame as ``(prefix, topic, event, name) -> (epochs, values)``,
    epochs ascending; where an epoch was logged twice (a resumed run) the last value counts."""
    if df.empty:
        return {}
    if df.duplicated(subset=["epoch", *_KEYS], keep="last").any():
        df = df.drop_duplicates(subset=["epoch", *_KEYS], keep="last")
    df = df.sort_values("epoch", kind="stable")
    epochs, values = df["epoch"].to_numpy(), df["value"].to_numpy(dtype=np.float64)
    return {key: (epochs[idx], values[idx]) for key, idx in df.groupby(_KEYS, sort=False).indices.items()}


class SeriesBook:
    """Every statistic of a StatsStore as ``(prefix, topic, event, name) -> (epochs, values)`` (as :func:`series_of`
    gives them), kept up to date by taking in only the rows the store published since the last :meth:`update`.

    A live run publishes an epoch of a few dozen rows between two polls; rebuilding a DataFrame of every epoch for
    each of them made the cockpit's redraw cost grow with the run and took half of it. A new store (a followed run
    directory read anew) or a large batch of rows is read whole, through pandas.
    """

    WHOLE_ROWS = 20_000
    """A batch of new rows at least this large is read with every earlier row as one DataFrame."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, str, str, str], tuple[np.ndarray, np.ndarray]] = {}
        self._store: Any = None
        self._seen = 0

    def update(self, store: StatsStore) -> set[tuple[str, str, str, str]]:
        """Take in the store's new rows; returns the keys whose series changed (every key where it was read whole)."""
        start = self._seen if store is self._store else 0
        rows, total = store.rows_since(start)
        if not rows:
            if start == 0:
                self.series = {}
            self._store, self._seen = store, total
            return set()
        if start == 0 or len(rows) >= self.WHOLE_ROWS:
            import pandas as pd

            if start:
                rows, total = store.rows_since(0)
            self.series = series_of(pd.DataFrame(rows, columns=list(store.COLUMNS)))
            changed = set(self.series)
        else:
            changed = self._append(rows)
        self._store, self._seen = store, total
        return changed

    def _append(self, rows: list[tuple]) -> set[tuple[str, str, str, str]]:
        by_key: dict[tuple[str, str, str, str], tuple[list[int], list[float]]] = {}
        for epoch, prefix, topic, event, name, value in rows:
            epochs, values = by_key.setdefault((prefix, topic, event, name), ([], []))
            epochs.append(epoch)
            values.append(value)
        for key, (new_epochs, new_values) in by_key.items():
            epochs = np.asarray(new_epochs, dtype=np.int64)
            values = np.asarray(new_values, dtype=np.float64)
            old = self.series.get(key)
            ordered = len(epochs) < 2 or bool(np.all(epochs[1:] > epochs[:-1]))
            if old is not None and len(old[0]):
                ordered = ordered and bool(epochs[0] > old[0][-1])
                epochs, values = np.concatenate([old[0], epochs]), np.concatenate([old[1], values])
            if not ordered:  # an epoch logged again (a resumed run): ascending epochs, the last value of each
                order = np.argsort(epochs, kind="stable")
                epochs, values = epochs[order], values[order]
                last = np.append(epochs[1:] != epochs[:-1], True)
                epochs, values = epochs[last], values[last]
            self.series[key] = (epochs, values)
        return set(by_key)
