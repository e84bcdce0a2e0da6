"""Soft Actor-Critic and SAC from demonstrations. ``SACAlgorithmConfig`` imports without torch (configurations are
checked before torch is imported); ``SAC`` is imported on first use."""

from __future__ import annotations

from typing import Any

from maze_lab.train.trainers.sac.config import SACAlgorithmConfig

__all__ = ["SAC", "SACAlgorithmConfig"]


def __getattr__(name: str) -> Any:
    if name == "SAC":
        from maze_lab.train.trainers.sac.sac import SAC

        return SAC
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
