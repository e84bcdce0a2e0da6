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


class _Plan:
    """Pre-computed handling of one event method (cached: the hot path of episode aggregation)."""

    __slots__ = ("stats", "group_by", "value_name", "value_names", "passthrough", "empty_defs", "step_outputs",
                 "counted")

    def __init__(self, stats: EventStats):
        self.stats = stats
        self.group_by = stats.group_by
        names = stats.value_names()
        self.value_names = names
        self.value_name = names[0] if len(names) == 1 else None
        self.passthrough = all(d.reduce_fn is None for d in stats.step)
        self.empty_defs = [d for d in stats.step if d.can_reduce_empty]
        self.step_outputs = tuple(d.output_name for d in stats.step)
        # every step statistic counts the events (``len``): their values are never looked at, so not collected
        self.counted = all(d.reduce_fn is len for d in stats.step)

    def value(self, attrs: dict) -> Any:
        if self.value_name is not None:
            return attrs.get(self.value_name)
        if not self.value_names:
            return None
        return {n: attrs.get(n) for n in self.value_names}


_PLANS: dict[Callable, _Plan | None] = {}
_TOPIC_METHODS: dict[type, list[Callable]] = {}


def _plan_for(method: Callable) -> _Plan | None:
    plan = _PLANS.get(method, _PLANS)
    if plan is _PLANS:
        stats = get_event_stats(method)
        plan = _Plan(stats) if stats is not None and stats.step else None
        _PLANS[method] = plan
    return plan  # type: ignore[return-value]


# (event method, group) -> [(StatKey, StatDef)] of its episode statistics: the keys are made once, not per episode
_EPISODE_DEFS: dict[tuple, list[tuple[StatKey, StatDef]]] = {}
_EPISODE_DEFS_MAX = 4096  # groups are few in practice; past this many (values as groups?) the cache starts over


def _episode_defs(key: tuple) -> list[tuple[StatKey, StatDef]]:
    defs = _EPISODE_DEFS.get(key)
    if defs is None:
        method, group = key
        defs = [(StatKey(method, d.output_name, group), d) for d in _PLANS[method].stats.episode]
        if len(_EPISODE_DEFS) >= _EPISODE_DEFS_MAX:
            _EPISODE_DEFS.clear()
        _EPISODE_DEFS[key] = defs
    return defs


def _topic_methods(topic: type) -> list[Callable]:
    methods = _TOPIC_METHODS.get(topic)
    if methods is None:
        methods = _TOPIC_METHODS[topic] = list(event_methods(topic).values())
    return methods


def _pick(inputs: dict[str | None, list], d: StatDef, where: str, event: Callable) -> list:
    if d.input_name in inputs:
        return inputs[d.input_name]
    if d.input_name is None and len(inputs) == 1:
        return next(iter(inputs.values()))
    raise KeyError(
        f"{event.__qualname__}: {where} statistic input '{d.input_name}' does not exist; "
        f"statistics of the level below: {sorted(str(k) for k in inputs)}"
    )


def aggregate_episode(
    step_logs: Sequence[Sequence[EventRecord]],
    topics: Iterable[type] = (),
    buffered: dict[tuple, list] | None = None,
    step_reduced: dict[tuple, dict[str | None, list]] | None = None,
) -> LogStats:
    """Reduce the events of one episode (a list of per-step event lists) to episode statistics.

    :param topics: the event topics of the env; counting statistics of their ungrouped events are
        zero-filled for steps (and episodes) in which the event did not occur.
    :param buffered: values of pass-through events (step statistic None) that a wrapper buffered itself
        instead of dispatching event objects, keyed by (event method, group).
    :param step_reduced: step statistics computed elsewhere, keyed by (event method, group), e.g. the
        per-step reward sums of the LogStatsWrapper.
    """
    n_steps = len(step_logs)
    passthrough: dict[tuple, list] = {}
    if buffered:
        for key, values in buffered.items():
            if _plan_for(key[0]) is not None:
                passthrough[key] = values
    reducing: dict[tuple, dict[int, Any]] = {}  # per step: a list of values, or a count for counted events
    seen: dict[Callable, tuple] = {}  # event method -> (plan, its key where ungrouped), for this episode
    for i, events in enumerate(step_logs) if any(step_logs) else ():
        for ev in events:
            method = ev.interface_method
            entry = seen.get(method)
            if entry is None:
                plan = _plan_for(method)
                entry = seen[method] = (plan, None if plan is None or plan.group_by else (method, None))
            plan, key = entry
            if plan is None:
                continue
            attrs = ev.attributes
            if key is None:
                key = (method, tuple([attrs.get(g) for g in plan.group_by]))
            if plan.counted:  # every step statistic is len: count the events, their values are not needed
                per_step = reducing.get(key)
                if per_step is None:
                    reducing[key] = per_step = {}
                per_step[i] = per_step.get(i, 0) + 1
                continue
            vn = plan.value_name
            value = attrs.get(vn) if vn is not None else plan.value(attrs)
            if plan.passthrough:
                lst = passthrough.get(key)
                if lst is None:
                    passthrough[key] = lst = []
                lst.append(value)
            else:
                per_step = reducing.get(key)
                if per_step is None:
                    reducing[key] = per_step = {}
                bucket = per_step.get(i)
                if bucket is None:
                    per_step[i] = bucket = []
                bucket.append(value)

    for topic in topics:
        for method in _topic_methods(topic):
            plan = _plan_for(method)
            if plan is None or plan.group_by or not plan.empty_defs or plan.passthrough:
                continue
            reducing.setdefault((method, None), {})

    step_values: dict[tuple, dict[str | None, list]] = dict(step_reduced or {})
    for key in step_values:
        _plan_for(key[0])
    for key, values in passthrough.items():
        step_values[key] = dict.fromkeys(_PLANS[key[0]].step_outputs, values)
    for key, per_step in reducing.items():
        plan = _PLANS[key[0]]
        outs: dict[str | None, list] = {}
        missing = n_steps - len(per_step)
        for d in plan.stats.step:
            if d.reduce_fn is None:
                outs[d.output_name] = [v for b in per_step.values() for v in b]
            else:
                fn = d.reduce_fn
                lst = list(per_step.values()) if plan.counted else [fn(b) for b in per_step.values()]
                if missing > 0 and d in plan.empty_defs:
                    lst.extend([fn([])] * missing)
                outs[d.output_name] = lst
        step_values[key] = outs

    episode: LogStats = {}
    for key, inputs in step_values.items():
        for stat_key, d in _episode_defs(key):
            name = d.input_name
            values = inputs[name] if name in inputs else _pick(inputs, d, "episode", key[0])
            fn = d.reduce_fn
            episode[stat_key] = list(values) if fn is None else fn(values)
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
