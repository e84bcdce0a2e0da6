"""Attach to any run directory, live or finished, from any process: its status, progress and statistics, and the
requests a live run takes (pause, resume, stop, checkpoint) through its control file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from maze_lab.run.run_dir import DamagedRunError, RunDirectory
from maze_lab.run.run_status import ENDED, RunControlError, resolve_status, send_request

REQUEST_TIMEOUT_S = 60.0
"""How long a request waits for the run to acknowledge it, by default."""


def run_state(run_dir: str | Path) -> dict[str, Any]:
    """The run's summary with the status a reader shows (``died`` where its owner is gone; see
    :func:`maze_lab.run.run_status.resolve_status`), ``live``, ``last_seen`` and ``owner`` added."""
    run = RunDirectory(run_dir)
    summary = run.read_summary()
    return {**summary, **resolve_status(run.path, summary)}


def request_run(run_dir: str | Path, action: str, timeout: float | None = REQUEST_TIMEOUT_S,
                wait_for_end: bool | None = None) -> dict[str, Any]:
    """Ask a live run for ``action`` (pause, resume, stop, checkpoint) and wait until it acknowledged it; returns
    the run's state then. A ``stop`` waits until the run has ended (its checkpoint written), unless ``wait_for_end``
    is False. Raises :class:`RunControlError` with one line where the run has ended, its owner is gone, or it did
    not answer within ``timeout`` seconds."""
    run_dir = Path(run_dir)
    RunDirectory.open(run_dir)
    state = run_state(run_dir)
    _check_live(run_dir, state, action)
    seq = send_request(run_dir, action)
    wait_for_end = action == "stop" if wait_for_end is None else wait_for_end
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        state = run_state(run_dir)
        ack = state.get("control") if isinstance(state.get("control"), dict) else {}
        acknowledged = isinstance(ack.get("seq"), int) and ack["seq"] >= seq
        if acknowledged and ack.get("error") and ack["seq"] == seq:
            raise RunControlError(f"{run_dir}: the run refused to {action}: {ack['error']}")
        if state.get("status") in ENDED:
            if action == "stop" and state["status"] != "died":
                return state
            if not acknowledged or state["status"] == "died":
                raise RunControlError(f"{run_dir}: the run ended (status {state['status']}) before it took the "
                                      f"request to {action}")
        if acknowledged and not wait_for_end:
            return state
        if deadline is not None and time.monotonic() > deadline:
            raise RunControlError(f"{run_dir}: the run did not {'end' if acknowledged else 'answer'} within "
                                  f"{timeout:g} s after the request to {action} (status {state.get('status')})")
        time.sleep(0.05)


def _check_live(run_dir: Path, state: dict[str, Any], action: str) -> None:
    status = state.get("status")
    if status == "died":
        raise RunControlError(f"{run_dir}: cannot {action}: the run died ({state.get('reason')})")
    if status in ENDED:
        raise RunControlError(f"{run_dir}: cannot {action}: the run has ended (status {status})")
    if not state.get("live"):
        raise RunControlError(f"{run_dir}: cannot {action}: the run is not training (status {status}; no process "
                              f"owns it now)")


class AttachedRun:
    """A handle on a run directory, live or finished, in this process or another: the equivalent of
    :class:`~maze_lab.run.run_context.RunHandle` for a detached run, a run of another kernel, or one of the shell.

    Nothing in the directory is executed; statuses are read from its summary (``died`` where its owner is gone).
    """

    def __init__(self, run_dir: str | Path):
        self._run = RunDirectory.open(run_dir)
        self._store: Any = None

    @property
    def run_dir(self) -> Path:
        """The run directory."""
        return self._run.path

    @property
    def state(self) -> dict[str, Any]:
        """The summary with the status a reader shows (see :func:`run_state`)."""
        return run_state(self.run_dir)

    @property
    def status(self) -> str:
        """``created``, ``running``, ``paused``, ``stopping``, or how it ended: ``done``, ``stopped``,
        ``early-stopped``, ``failed``, ``interrupted``, ``died``."""
        try:
            return str(self.state.get("status"))
        except DamagedRunError:
            return "damaged"

    @property
    def running(self) -> bool:
        """Whether the run has not ended (it may be paused or still starting)."""
        return self.status not in (*ENDED, "damaged")

    @property
    def progress(self) -> dict[str, Any]:
        """Status, epoch, target epochs, env steps and the last evaluation reward, as the run last recorded them."""
        s = self.state
        target = s.get("target_epochs")
        epoch = s.get("epoch") or 0
        return {"status": s.get("status"), "epoch": epoch, "n_epochs": target, "env_steps": s.get("env_steps") or 0,
                "last_eval_reward": s.get("last_eval_reward"), "fraction": (epoch / target) if target else None,
                "reason": s.get("reason"), "last_seen": s.get("last_seen")}

    @property
    def store(self) -> Any:
        """The run's statistics (a StatsStore that follows the file: each access adds the epochs written since)."""
        from maze_lab.core.log_stats.writers import StatsStore

        if self._store is None:
            self._store = StatsStore.follow(self.run_dir)
        else:
            self._store.refresh()
        return self._store

    @property
    def stats(self) -> Any:
        """The statistics as a DataFrame."""
        return self.store.to_dataframe()

    @property
    def latest_checkpoint(self) -> Path | None:
        """The last checkpoint, once written."""
        path = self._run.last_checkpoint
        return path if path.exists() else None

    @property
    def best_checkpoint(self) -> Path | None:
        """The best checkpoint, once written."""
        path = self._run.best_checkpoint
        return path if path.exists() else None

    def pause(self, timeout: float | None = REQUEST_TIMEOUT_S) -> None:
        """Pause the run between updates (returns once it acknowledged)."""
        request_run(self.run_dir, "pause", timeout)

    def resume(self, timeout: float | None = REQUEST_TIMEOUT_S) -> None:
        """Continue a paused run."""
        request_run(self.run_dir, "resume", timeout)

    def checkpoint(self, timeout: float | None = REQUEST_TIMEOUT_S) -> Path | None:
        """Have the run write a checkpoint now; returns its path (the run goes on)."""
        state = request_run(self.run_dir, "checkpoint", timeout)
        path = (state.get("control") or {}).get("checkpoint")
        return Path(path) if path else self.latest_checkpoint

    def stop(self, timeout: float | None = REQUEST_TIMEOUT_S) -> Path | None:
        """Stop the run after its current update; waits until it has ended and returns its last checkpoint. A run
        that has already ended is left as it is."""
        if self.running:
            try:
                request_run(self.run_dir, "stop", timeout)
            except RunControlError:
                if self.running:
                    raise
        return self.latest_checkpoint

    def wait(self, timeout: float | None = None, poll_seconds: float = 0.2) -> str:
        """Block until the run ends (or the timeout passes); returns its status."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.running and (deadline is None or time.monotonic() < deadline):
            time.sleep(poll_seconds)
        return self.status

    async def wait_async(self, poll_seconds: float = 0.5) -> str:
        """``await handle.wait_async()`` in a cell: wait without blocking the kernel's event loop."""
        import asyncio

        while self.running:
            await asyncio.sleep(poll_seconds)
        return self.status

    def __repr__(self) -> str:
        p = self.progress
        return (f"<AttachedRun {p['status']} epoch {p['epoch']}/{p['n_epochs']} env_steps {p['env_steps']} "
                f"run_dir={self.run_dir}>")


def attach(run_dir: str | Path) -> AttachedRun:
    """A handle on the run in ``run_dir`` (live or finished, started anywhere on this machine)."""
    return AttachedRun(run_dir)
