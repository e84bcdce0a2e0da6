"""Raw event logs: the events of each episode, written as one TSV file per event type."""

from __future__ import annotations

import csv
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from maze_lab.core.events.event_record import EventRecord


class EpisodeEventLog:
    """All events of one episode, step by step."""

    def __init__(self, episode_id: Any, step_event_logs: Sequence[Sequence[EventRecord]],
                 step_rewards: Sequence[float] | None = None):
        self.episode_id = episode_id
        self.step_event_logs = step_event_logs
        self.step_rewards = list(step_rewards) if step_rewards is not None else None

    def query_events(self, event_spec: Callable | type | Sequence) -> list[EventRecord]:
        """Events of the episode matching an event method, a topic class, or a list of those."""
        specs = list(event_spec) if isinstance(event_spec, list | tuple) else [event_spec]
        try:  # event methods and topics compare by identity: a set of them finds the same events
            wanted = set(specs)
        except TypeError:
            return [
                ev
                for step in self.step_event_logs
                for ev in step
                if any(ev.interface_method is s or ev.interface_class is s for s in specs)
            ]
        return [ev for step in self.step_event_logs for ev in step
                if ev.interface_method in wanted or ev.interface_class in wanted]

    def __len__(self) -> int:
        return len(self.step_event_logs)


class EventLogWriter(ABC):
    """Receives the event log of each finished episode."""

    @abstractmethod
    def write(self, episode_log: EpisodeEventLog) -> None:
        """Write one episode."""

    def close(self) -> None:
        """Flush and release files."""


def _cell(value: Any) -> str:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float | int | str | bool) or value is None:
        return str(value)
    try:
        return json.dumps(value)
    except TypeError:
        return repr(value)


class TSVEventLogWriter(EventLogWriter):
    """Appends each event to ``<log_dir>/<Topic>.<event>.tsv`` with columns episode_id, step and the event's
    attributes (one file per event type, as in Maze).

    Files stay open; they are flushed at most once per ``flush_seconds`` and on :meth:`close`.
    """

    def __init__(self, log_dir: str | Path, skip_topics: Sequence[str] = ("ObservationEvents",),
                 flush_seconds: float = 2.0):
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.skip_topics = set(skip_topics)
        self.flush_seconds = flush_seconds
        self._headers: dict[str, list[str]] = {}
        self._files: dict[str, Any] = {}
        self._last_flush = time.monotonic()

    def _writer(self, name: str) -> Any:
        entry = self._files.get(name)
        if entry is None:
            path = self.log_dir / f"{name}.tsv"
            new = not path.exists()
            fh = path.open("a", newline="")
            w = csv.writer(fh, delimiter="\t", lineterminator="\n")
            if new:
                w.writerow(self._headers[name])
            entry = self._files[name] = (fh, w)
        return entry[1]

    def write(self, episode_log: EpisodeEventLog) -> None:
        """Append the episode's events."""
        rows: dict[str, list[list[str]]] = {}
        if episode_log.step_rewards is not None:
            rows["BaseEnvEvents.reward"] = [[str(episode_log.episode_id), str(i), _cell(r)]
                                            for i, r in enumerate(episode_log.step_rewards)]
            self._headers.setdefault("BaseEnvEvents.reward", ["episode_id", "step", "value"])
        for step, events in enumerate(episode_log.step_event_logs):
            for ev in events:
                topic = ev.interface_class.__name__
                if topic in self.skip_topics:
                    continue
                name = f"{topic}.{ev.interface_method.__name__}"
                header = self._headers.get(name)
                if header is None:
                    header = self._headers[name] = ["episode_id", "step", *ev.attributes.keys()]
                rows.setdefault(name, []).append(
                    [str(episode_log.episode_id), str(step)] + [_cell(ev.attributes.get(h)) for h in header[2:]]
                )
        for name, lines in rows.items():
            self._writer(name).writerows(lines)
        now = time.monotonic()
        if now - self._last_flush > self.flush_seconds:
            self.flush()
            self._last_flush = now

    def flush(self) -> None:
        """Write buffered rows to disk."""
        for fh, _ in self._files.values():
            fh.flush()

    def close(self) -> None:
        """Flush and close all files."""
        for fh, _ in self._files.values():
            fh.close()
        self._files = {}

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
