"""Step -> episode -> epoch aggregation of events into statistics, as declared by the event decorators."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from maze_lab.core.events.event_record import EventRecord
from maze_lab.core.events.pubsub import event_methods
from maze_lab.core.log_stats.event_decorators import EventStats, StatDef, get_event_stats


class StatKey(NamedTuple):
    """Identifies one statistic: the event method, the statistic's name on its level and the group values."""

    event: Callable
    name: str | None
    group: tuple | None

    @property
    def topic(self) -> str:
        """Name of the event topic (class) the event belongs to."""
        return self.event.__qualname__.rsplit(".", 1)[0]

    @property
    def event_name(self) -> str:
        """Name of the event method."""
        return self.event.__name__

    @property
    def label(self) -> str:
        """Statistic name and group values joined by '/', e.g. ``mean/raw_piece_usage_per_step``."""
        parts = [] if self.name is None else [str(self.name)]
        if self.group:
            parts.extend(str(g) for g in self.group)
        return "/".join(parts)


LogStats = dict[StatKey, Any]


def _value_of(stats: EventStats, event: EventRecord) -> Any:
    attrs = event.attributes
    names = stats.value_names()
    if not names:
        return None
    if len(names) == 1:
        return attrs.get(names[0])
    return {n: attrs.get(n) for n in names}


def _group_of(stats: EventStats, event: EventRecord) -> tuple | None:
    if not stats.group_by:
        return None
    return tuple(event.attributes.get(g) for g in stats.group_by)


def _empty_step_defs(stats: EventStats) -> list[StatDef]:
    if stats.empty_step_defs is None:
        stats.empty_step_defs = [d for d in stats.step if d.can_reduce_empty]
    return stats.empty_step_defs


def _pick(inputs: dict[str | None, list], d: StatDef, where: str, event: Callable) -> list:
    if d.input_name in inputs:
        return inputs[d.input_name]
    if d.input_name is None and len(inputs) == 1:
        return next(iter(inputs.values()))
    raise KeyError(
        f"{event.__qualname__}: {where} statistic input '{d.input_name}' does not exist; "
        f"statistics of the level below: {sorted(str(k) for k in inputs)}"
    )


def _reduce_level(inputs: dict[str | None, list], defs: Sequence[StatDef], where: str, event: Callable) -> dict:
    out: dict[str | None, Any] = {}
    for d in defs:
        values = _pick(inputs, d, where, event)
        out[d.output_name] = list(values) if d.reduce_fn is None else d.reduce_fn(values)
    return out


def aggregate_episode(step_logs: Sequence[Sequence[EventRecord]], topics: Iterable[type] = ()) -> LogStats:
    """Reduce the events of one episode (a list of per-step event lists) to episode statistics.

    :param topics: the event topics of the env; counting statistics of their ungrouped events are
        zero-filled for steps (and episodes) in which the event did not occur.
    """
    n_steps = len(step_logs)
    # (event method, group) -> step-level name -> list over steps (or over values for pass-through)
    step_values: dict[tuple[Callable, tuple | None], dict[str | None, list]] = {}
    seen_in_step: dict[tuple[Callable, tuple | None], int] = {}
    for events in step_logs:
        per_step: dict[tuple[Callable, tuple | None], list] = {}
        for ev in events:
            stats = get_event_stats(ev.interface_method)
            if stats is None or not stats.step:
                continue
            key = (ev.interface_method, _group_of(stats, ev))
            bucket = per_step.get(key)
            if bucket is None:
                per_step[key] = bucket = []
            bucket.append(_value_of(stats, ev))
        for key, values in per_step.items():
            stats = get_event_stats(key[0])
            outs = step_values.get(key)
            if outs is None:
                step_values[key] = outs = {}
            for d in stats.step:
                lst = outs.get(d.output_name)
                if lst is None:
                    outs[d.output_name] = lst = []
                if d.reduce_fn is None:
                    lst.extend(values)
                else:
                    lst.append(d.reduce_fn(values))
            seen_in_step[key] = seen_in_step.get(key, 0) + 1

    # zero-fill counting statistics for steps without the event
    known: set[Callable] = set()
    for topic in topics:
        known.update(event_methods(topic).values())
    for method in known:
        stats = get_event_stats(method)
        if stats is None or stats.group_by:
            continue
        empty_defs = _empty_step_defs(stats)
        if not empty_defs:
            continue
        key = (method, None)
        missing = n_steps - seen_in_step.get(key, 0)
        if missing <= 0 and key in step_values:
            continue
        outs = step_values.setdefault(key, {})
        for d in empty_defs:
            outs.setdefault(d.output_name, []).extend([d.reduce_fn([])] * missing)

    episode: LogStats = {}
    for (method, group), inputs in step_values.items():
        stats = get_event_stats(method)
        if not stats.episode:
            continue
        for name, value in _reduce_level(inputs, stats.episode, "episode", method).items():
            episode[StatKey(method, name, group)] = value
    return episode


class EpochStatsAggregator:
    """Collects episode statistics (from any number of envs) and reduces them to epoch statistics.

    Thread-safe: envs may add episodes from several threads while the trainer reduces.
    """

    def __init__(self) -> None:
        self._episodes: list[LogStats] = []
        self._cumulative: dict[StatKey, Any] = {}
        self._lock = threading.Lock()
        self.last_stats: LogStats = {}

    def add_episode(self, episode_stats: LogStats) -> None:
        """Record the statistics of one finished episode."""
        with self._lock:
            self._episodes.append(episode_stats)

    @property
    def n_episodes(self) -> int:
        """Episodes collected in the current epoch."""
        return len(self._episodes)

    def reduce(self) -> LogStats:
        """Reduce the collected episodes to epoch statistics and start a new epoch."""
        with self._lock:
            episodes, self._episodes = self._episodes, []
        grouped: dict[tuple[Callable, tuple | None], dict[str | None, list]] = {}
        for ep in episodes:
            for key, value in ep.items():
                grouped.setdefault((key.event, key.group), {}).setdefault(key.name, []).append(value)
        epoch: LogStats = {}
        for (method, group), inputs in grouped.items():
            stats = get_event_stats(method)
            for d in stats.epoch:
                values = _pick(inputs, d, "epoch", method)
                value = list(values) if d.reduce_fn is None else d.reduce_fn(values)
                key = StatKey(method, d.output_name, group)
                if d.cumulative:
                    value = self._cumulative.get(key, 0) + value
                    self._cumulative[key] = value
                epoch[key] = value
        self.last_stats = epoch
        return epoch


def stats_value(stats: LogStats, event: Callable, name: str | None = None, group: tuple | None = None) -> Any:
    """Look up one statistic, with an error listing what exists where it is missing."""
    key = StatKey(event, name, group)
    if key in stats:
        return stats[key]
    have = sorted(k.label or "<unnamed>" for k in stats if k.event is event)
    raise KeyError(f"no statistic '{name}' (group {group}) for {event.__qualname__}; available: {have}")
