"""Behavioural cloning (imitation learning) from recorded trajectories; checkpoints fine-tune with A2C/PPO.
``BCAlgorithmConfig`` imports without torch (configurations are checked before torch is imported); the trainer and
the dataset are imported on first use."""

from __future__ import annotations

import importlib
from typing import Any

from maze_lab.train.trainers.bc.config import BCAlgorithmConfig

__all__ = ["BC", "BCAlgorithmConfig", "ImitationBatch", "ImitationEvents", "InMemoryImitationDataset"]

_LAZY = {"BC": "bc_trainer", "ImitationBatch": "dataset", "InMemoryImitationDataset": "dataset",
         "ImitationEvents": "events"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
