"""Schedules for learning rates and clip ranges, as functions of training progress in [0, 1]."""

from __future__ import annotations

from dataclasses import dataclass


class Schedule:
    """A value that changes with training progress (0 at epoch 0, 1 at the end of the training call).

    The trainers set progress = epoch / target epoch, where the target is the epoch the current ``train(n)`` call
    ends at (epochs done + n; ``n`` defaults to ``n_epochs`` of the config). Without a target (``n_epochs=0``)
    progress stays 0 and a schedule holds its start value.
    """

    def value(self, progress: float) -> float:
        """The value at ``progress``."""
        raise NotImplementedError

    @property
    def initial(self) -> float:
        """The value at the start."""
        return self.value(0.0)


@dataclass
class ConstantSchedule(Schedule):
    """Always the same value."""

    constant: float

    def value(self, progress: float) -> float:
        """The constant."""
        return self.constant


@dataclass
class LinearSchedule(Schedule):
    """Linear from ``start`` to ``end`` over the planned training (then stays at ``end``)."""

    start: float
    end: float = 0.0

    def value(self, progress: float) -> float:
        """Interpolated value."""
        p = min(max(progress, 0.0), 1.0)
        return self.start + (self.end - self.start) * p


def as_schedule(value: float | Schedule | dict) -> Schedule:
    """A schedule from a number, a schedule, or a config dict ``{"type": "linear", "start": .., "end": ..}``."""
    if isinstance(value, Schedule):
        return value
    if isinstance(value, dict):
        kind = value.get("type", "linear")
        params = {k: v for k, v in value.items() if k != "type"}
        if kind == "linear":
            return LinearSchedule(**params)
        if kind == "constant":
            return ConstantSchedule(**params)
        raise ValueError(f"unknown schedule type {kind!r}; valid: 'linear', 'constant'")
    return ConstantSchedule(float(value))
