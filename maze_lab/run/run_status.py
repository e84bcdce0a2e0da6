"""A run directory tells the truth about its run: who owns it, whether the owner is alive, and requests to it.

The process that trains a run (a kernel, ``maze-lab train``, a worker of a grid, a detached run) records itself in
``owner.json`` (pid, host, boot id, the process's start time) and beats a heartbeat into it every
:data:`HEARTBEAT_S` seconds while it trains. A reader on the same machine asks the operating system whether that
process still lives (a reused pid is told apart by its start time); a reader on another machine trusts the heartbeat
(no beat for :data:`STALE_S` seconds). A run whose summary says it is live but whose owner is gone is ``died``.

Requests (pause, resume, stop, checkpoint) reach the owner through ``control.json``: whoever asks writes the next
request number and the action; the owner reads it within :data:`POLL_S` seconds, carries it out, and acknowledges it in
the summary (``control``: number, action, when, and the checkpoint written), which is what the asker waits for.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from maze_lab.core.utils.atomic import write_atomic

OWNER_FILE = "owner.json"
"""Who trains the run: pid, host, boot id, process start time, heartbeat."""
CONTROL_FILE = "control.json"
"""The latest request to the run's owner: number, action, when, by whom."""

HEARTBEAT_S = 1.0
"""Seconds between two heartbeats of a training run."""
POLL_S = 0.2
"""Seconds between two looks of a training run at its control file."""
STALE_S = 20.0
"""A run on another machine whose heartbeat is older than this is taken for dead."""

LIVE = ("created", "starting", "running", "paused", "stopping")
"""Statuses of a run that has not ended (as its summary records them)."""
ENDED = ("done", "stopped", "early-stopped", "failed", "interrupted", "died")
"""Statuses of a run that has ended, each with its reason in the summary (``reason``)."""
ACTIONS = ("pause", "resume", "stop", "checkpoint")
"""What can be asked of a live run."""

MAX_SMALL_FILE = 64 * 1024
"""Largest owner or control file that is read."""


class RunControlError(RuntimeError):
    """A request cannot reach a run: it has ended, its owner is gone, or it did not answer in time."""


# ---- small files, read safely --------------------------------------------------------------------------------------
def read_small_json(path: Path, max_bytes: int = MAX_SMALL_FILE) -> dict[str, Any] | None:
    """A small JSON object from ``path``; None where it is missing, not a regular file (a FIFO, a device), larger
    than ``max_bytes``, or not a JSON object. Never blocks (the file is opened non-blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
            return None
        data = os.read(fd, max_bytes + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        value = json.loads(data[:max_bytes].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _write_json(path: Path, value: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(value, indent=1).encode())


# ---- who owns a run, and whether it lives ---------------------------------------------------------------------------
def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:  # noqa: PTH123
            return fh.read().strip() or None
    except OSError:
        return None


def _process_start(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of a process from ``/proc``; None where there is no ``/proc``
    entry for it (or no ``/proc`` at all)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:  # noqa: PTH123
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def owner_record(pid: int | None = None, mode: str = "process") -> dict[str, Any]:
    """The owner record of process ``pid`` (default: this one) on this machine."""
    pid = os.getpid() if pid is None else pid
    proc = _process_start(pid)
    now = time.time()
    return {"pid": pid, "host": socket.gethostname(), "boot_id": _boot_id(),
            "process_start": None if proc is None else proc[1], "mode": mode, "since": now, "heartbeat": now}


def _pid_alive(pid: int, process_start: int | None) -> bool:
    proc = _process_start(pid)
    if proc is not None:
        state, start = proc
        if state in ("Z", "X"):
            return False  # ended; its parent has not collected it yet
        return process_start is None or start == process_start  # else: the pid was reused
    if os.path.isdir("/proc/self"):
        return False  # a /proc without the pid: gone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_alive(owner: dict[str, Any], now: float | None = None) -> bool:
    """Whether the process an owner record names still lives (see the module docstring)."""
    now = time.time() if now is None else now
    same_machine = owner.get("host") == socket.gethostname() and owner.get("boot_id") == _boot_id()
    pid = owner.get("pid")
    if same_machine and isinstance(pid, int):
        return _pid_alive(pid, owner.get("process_start") if isinstance(owner.get("process_start"), int) else None)
    beat = owner.get("heartbeat")
    return isinstance(beat, int | float) and now - beat <= STALE_S


def read_owner(run_dir: str | Path) -> dict[str, Any] | None:
    """The owner record of a run directory (None where there is none)."""
    return read_small_json(Path(run_dir) / OWNER_FILE)


def resolve_status(run_dir: str | Path, summary: dict[str, Any]) -> dict[str, Any]:
    """The status a reader shows: the summary's, except that a live status whose owner is gone reads ``died``.

    Returns ``status``, ``reason``, ``live`` (the owner trains it now), ``last_seen`` (ISO time of the owner's last
    heartbeat, where known) and ``owner`` (``pid@host``)."""
    status = summary.get("status")
    reason = summary.get("reason")
    owner = read_owner(run_dir) if status in LIVE else None
    info: dict[str, Any] = {"status": status, "reason": reason, "live": False, "last_seen": None, "owner": None}
    if owner is None:
        return info
    beat = owner.get("heartbeat")
    info["last_seen"] = _iso(beat) if isinstance(beat, int | float) else None
    info["owner"] = f"{owner.get('pid')}@{owner.get('host')}"
    if owner_alive(owner):
        info["live"] = True
        return info
    seen = f" (last seen {info['last_seen']})" if info["last_seen"] else ""
    info["status"] = "died"
    info["reason"] = f"its process {info['owner']} ended without recording how the run ended{seen}"
    return info


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


# ---- the owner's side -----------------------------------------------------------------------------------------------
class RunOwner:
    """Kept by the process that trains a run: writes ``owner.json``, beats the heartbeat and carries out the
    requests of ``control.json`` in a daemon thread.

    :param handle_request: called with an action of :data:`ACTIONS`; returns the fields to acknowledge it with in
        the summary (e.g. ``status``), or raises to refuse it (the error is acknowledged instead).
    :param write_summary: merges fields into the run's summary (thread-safe).
    """

    def __init__(self, run_dir: str | Path, handle_request: Callable[[str], dict[str, Any]],
                 write_summary: Callable[..., Any], mode: str = "process", accept_since: float | None = None):
        self.run_dir = Path(run_dir)
        self._handle_request = handle_request
        self._write_summary = write_summary
        self._record = owner_record(mode=mode)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pending: list[tuple[int, str, Callable[[], dict[str, Any] | None]]] = []
        # the request on file is taken where it was made since ``accept_since`` (e.g. between the start of a detached
        # run and its first heartbeat); older ones were meant for an earlier run in this directory
        control = read_small_json(self.run_dir / CONTROL_FILE) or {}
        seq = control.get("seq") if isinstance(control.get("seq"), int) else 0
        requested = control.get("requested") if isinstance(control.get("requested"), int | float) else 0.0
        fresh = accept_since is not None and requested >= accept_since
        self._seen = seq - 1 if fresh and seq > 0 else seq

    def start(self) -> RunOwner:
        """Record this process as the owner and start the heartbeat."""
        _write_json(self.run_dir / OWNER_FILE, self._record)
        self._thread = threading.Thread(target=self._loop, name=f"maze-lab owner {self.run_dir.name}", daemon=True)
        self._thread.start()
        return self

    def stop_heartbeat(self) -> None:
        """Stop taking requests (the run is ending); requests already carried out are acknowledged."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        for seq, action, done in self._pending:
            try:
                fields = done()
            except Exception:  # noqa: BLE001
                fields = None
            if fields is not None:
                self._acknowledge(seq, action, fields)
        self._pending.clear()

    def close(self) -> None:
        """The run's final status is recorded: the owner record says when it ended."""
        if not self._stop.is_set():
            self.stop_heartbeat()
        self._beat(ended=True)

    def wait_for(self, seq: int, action: str, done: Callable[[], dict[str, Any] | None]) -> None:
        """Acknowledge request ``seq`` once ``done()`` returns fields (polled by the heartbeat thread)."""
        self._pending.append((seq, action, done))

    def _beat(self, ended: bool = False) -> None:
        self._record["heartbeat"] = time.time()
        if ended:
            self._record["ended"] = self._record["heartbeat"]
        try:
            _write_json(self.run_dir / OWNER_FILE, self._record)
        except OSError:
            pass  # a full or vanished disk: the run goes on; a reader on this machine asks the OS instead

    def _loop(self) -> None:
        next_beat = 0.0
        while not self._stop.wait(POLL_S):
            try:
                self._poll()
            except Exception:  # noqa: BLE001 - the heartbeat must never take the run down
                pass
            if time.monotonic() >= next_beat:
                self._beat()
                next_beat = time.monotonic() + HEARTBEAT_S

    def _poll(self) -> None:
        for item in list(self._pending):
            seq, action, done = item
            fields = done()
            if fields is not None:
                self._pending.remove(item)
                self._acknowledge(seq, action, fields)
        control = read_small_json(self.run_dir / CONTROL_FILE)
        if not control or not isinstance(control.get("seq"), int) or control["seq"] <= self._seen:
            return
        seq, action = control["seq"], control.get("action")
        self._seen = seq
        if action not in ACTIONS:
            self._acknowledge(seq, str(action), {}, error=f"unknown request {action!r}; one of {', '.join(ACTIONS)}")
            return
        try:
            result = self._handle_request(action)
        except Exception as err:  # noqa: BLE001 - refused: the asker is told why
            self._acknowledge(seq, action, {}, error=" ".join(str(err).split()))
            return
        if callable(result):  # to be acknowledged later (a checkpoint written at the next update)
            self.wait_for(seq, action, result)
        else:
            self._acknowledge(seq, action, result or {})

    def _acknowledge(self, seq: int, action: str, fields: dict[str, Any], error: str | None = None) -> None:
        ack = {"seq": seq, "action": action, "at": time.time(), "error": error,
               **{k: v for k, v in fields.items() if k != "status"}}
        updates: dict[str, Any] = {"control": ack}
        if "status" in fields:
            updates["status"] = fields["status"]
        self._write_summary(**updates)


# ---- the asker's side -----------------------------------------------------------------------------------------------
def send_request(run_dir: str | Path, action: str, by: str | None = None) -> int:
    """Write request ``action`` into the run's control file; returns its number."""
    if action not in ACTIONS:
        raise ValueError(f"unknown request {action!r}; one of {', '.join(ACTIONS)}")
    path = Path(run_dir) / CONTROL_FILE
    previous = read_small_json(path) or {}
    seq = (previous.get("seq") if isinstance(previous.get("seq"), int) else 0) + 1
    _write_json(path, {"seq": seq, "action": action, "requested": time.time(),
                       "by": by or f"{os.getpid()}@{socket.gethostname()}"})
    return seq
