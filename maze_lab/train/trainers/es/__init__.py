"""OpenAI-style evolution strategies (Salimans et al., 2017) with worker processes on one machine.
``ESAlgorithmConfig`` imports without torch (configurations are checked before torch is imported); ``ES`` is
imported on first use."""

from __future__ import annotations

from typing import Any

from maze_lab.train.trainers.es.config import ESAlgorithmConfig

__all__ = ["ES", "ESAlgorithmConfig"]


def __getattr__(name: str) -> Any:
    if name == "ES":
        from maze_lab.train.trainers.es.es import ES

        return ES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
