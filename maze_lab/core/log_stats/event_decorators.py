"""Decorators on event-topic methods that declare how events become step, episode and epoch statistics.

Events of one step are reduced to step statistics, the step statistics of an episode to episode
statistics, and the episode statistics of an epoch to epoch statistics. Each level may define several
statistics (``output_name``) and pick which statistic of the level below it consumes (``input_name``).
A reduce function of ``None`` passes the values through unreduced to the next level.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np


@dataclass(frozen=True)
class StatDef:
    """One statistic on one level."""

    reduce_fn: Callable[[list], Any] | None
    input_name: str | None = None
    output_name: str | None = None
    cumulative: bool = False

    @property
    def can_reduce_empty(self) -> bool:
        """Whether a step with no event still yields a value (e.g. a count of 0)."""
        if self.reduce_fn is None:
            return False
        try:
            value = self.reduce_fn([])
        except Exception:  # noqa: BLE001 - any failure means "no value for empty steps"
            return False
        return value is not None and np.isscalar(value) and np.isfinite(value)


@dataclass
class EventStats:
    """All statistics declared on one event method."""

    step: list[StatDef] = field(default_factory=list)
    episode: list[StatDef] = field(default_factory=list)
    epoch: list[StatDef] = field(default_factory=list)
    group_by: tuple[str, ...] = ()
    plots: list[tuple[Callable, str | None]] = field(default_factory=list)
    arg_names: tuple[str, ...] | None = None

    def value_names(self) -> tuple[str, ...]:
        """Attribute names that carry the value (all arguments that are not grouping attributes)."""
        return tuple(n for n in (self.arg_names or ()) if n not in self.group_by)


STATS_ATTRIBUTE = "__maze_lab_stats__"


def get_event_stats(method: Callable) -> EventStats | None:
    """The statistics declared on an event method, or None."""
    return getattr(method, STATS_ATTRIBUTE, None)


def _stats_of(method: Callable) -> EventStats:
    stats = getattr(method, STATS_ATTRIBUTE, None)
    if stats is None:
        import inspect

        params = list(inspect.signature(method).parameters)[1:]
        stats = EventStats(arg_names=tuple(params))
        setattr(method, STATS_ATTRIBUTE, stats)
    return stats


def _level_decorator(level: str, decorator: str, stat: StatDef) -> Callable:
    """A decorator adding ``stat`` to the statistics of ``level`` (step, episode or epoch) of an event."""
    if stat.reduce_fn is not None and not callable(stat.reduce_fn):
        raise TypeError(f"{decorator} takes a reduce function (e.g. sum, len, np.mean) or None, got {stat.reduce_fn!r}")

    def decorate(method: Callable) -> Callable:
        # decorators run bottom-up; insert at the front so the list reads top-down as written
        getattr(_stats_of(method), level).insert(0, stat)
        return method

    return decorate


def define_step_stats(
    reduce_function: Callable[[list], Any] | None, input_name: str | None = None, output_name: str | None = None
) -> Callable:
    """Declare how the events of one step are reduced (e.g. ``len`` counts them; None keeps each value)."""
    return _level_decorator("step", "define_step_stats", StatDef(reduce_function, input_name, output_name))


def define_episode_stats(
    reduce_function: Callable[[list], Any] | None, input_name: str | None = None, output_name: str | None = None
) -> Callable:
    """Declare how the step statistics of one episode are reduced."""
    return _level_decorator("episode", "define_episode_stats", StatDef(reduce_function, input_name, output_name))


def define_epoch_stats(
    reduce_function: Callable[[list], Any] | None,
    input_name: str | None = None,
    output_name: str | None = None,
    cumulative: bool = False,
) -> Callable:
    """Declare how the episode statistics of one epoch are reduced.

    :param cumulative: keep a running total over all epochs (for counts such as ``total_step_count``).
    """
    return _level_decorator("epoch", "define_epoch_stats",
                            StatDef(reduce_function, input_name, output_name, cumulative))


def define_stats_grouping(*group_by: str) -> Callable:
    """Compute all statistics of the event separately for each value of the given attributes."""

    def decorate(method: Callable) -> Callable:
        stats = _stats_of(method)
        unknown = [g for g in group_by if g not in (stats.arg_names or ())]
        if unknown:
            raise ValueError(
                f"define_stats_grouping on {method.__qualname__}: {unknown} are not arguments; "
                f"valid: {list(stats.arg_names or ())}"
            )
        stats.group_by = tuple(group_by)
        return method

    return decorate


def define_plot(create_figure_function: Callable, input_name: str | None = None) -> Callable:
    """Attach a plotting function that draws the epoch values of this event (e.g. a histogram)."""

    def decorate(method: Callable) -> Callable:
        _stats_of(method).plots.insert(0, (create_figure_function, input_name))
        return method

    return decorate


def histogram(values: Sequence[Any]) -> list:
    """Reducer that keeps every value (flattening lists), for distributions and histograms."""
    # decided once per call from the value types (C loops), not per value: nothing to flatten (an episode's values)
    # or only lists (an epoch's episodes); a mix is flattened value by value
    if not isinstance(values, list | tuple):
        values = list(values)
    kinds = set(map(type, values))
    lists = [issubclass(k, list) for k in kinds]
    if not any(lists):
        return list(values)
    if all(lists):
        return list(chain.from_iterable(values))
    out: list = []
    for v in values:
        if isinstance(v, list):
            out.extend(v)
        else:
            out.append(v)
    return out
