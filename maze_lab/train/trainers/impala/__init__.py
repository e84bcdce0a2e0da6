"""IMPALA: actors in worker processes, a learner that corrects their lag with V-trace.
``ImpalaAlgorithmConfig`` imports without torch (configurations are checked before torch is imported); ``IMPALA``
is imported on first use."""

from __future__ import annotations

from typing import Any

from maze_lab.train.trainers.impala.config import ImpalaAlgorithmConfig

__all__ = ["IMPALA", "ImpalaAlgorithmConfig"]


def __getattr__(name: str) -> Any:
    if name == "IMPALA":
        from maze_lab.train.trainers.impala.impala import IMPALA

        return IMPALA
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
