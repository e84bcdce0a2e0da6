"""Model selection: keep the weights of the best evaluation so far."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import torch

from maze_lab.core.utils.atomic import write_atomic


class BestModelSelection:
    """Remembers the best evaluation reward and the model weights that reached it.

    :param dump_file: where the best weights are written (``torch.save`` of the state dict); "" or None for
        memory only.
    :param model: the model whose ``state_dict()`` is kept.
    """

    def __init__(self, dump_file: str | Path | None = None, model: Any = None):
        self.dump_file = Path(dump_file) if dump_file else None
        self.model = model
        self.best_reward = -float("inf")
        self.best_epoch: int | None = None
        self.best_state: dict[str, Any] | None = None
        self.last_improvement_epoch = 0

    def update(self, reward: float, epoch: int = 0) -> bool:
        """Record an evaluation; returns True where it is a new best."""
        if not reward > self.best_reward:
            return False
        self.best_reward = float(reward)
        self.best_epoch = epoch
        self.last_improvement_epoch = epoch
        if self.model is not None:
            self.best_state = copy.deepcopy(self.model.state_dict())
            if self.dump_file is not None:
                self.dump_file.parent.mkdir(parents=True, exist_ok=True)
                buffer = io.BytesIO()
                torch.save(self.best_state, buffer)
                write_atomic(self.dump_file, buffer.getbuffer())
        return True

    def epochs_without_improvement(self, epoch: int) -> int:
        """Epochs since the last new best."""
        return epoch - self.last_improvement_epoch
