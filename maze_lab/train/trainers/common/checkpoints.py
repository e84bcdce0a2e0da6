"""Checkpoint files shared by all trainers: ``state_dict_last.pt`` and ``state_dict_best.pt``, written atomically
and read without executing code from the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from maze_lab.train.trainers.common.model_selection import BestModelSelection


def _atomic_save(obj: Any, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    tmp.replace(path)  # a crash never leaves a half-written checkpoint


def write_checkpoints(state: dict[str, Any], checkpoint_dir: Path | None, model_selection: BestModelSelection,
                      path: str | Path | None = None) -> Path | None:
    """Write ``state`` to ``path`` (default ``<checkpoint_dir>/state_dict_last.pt``) and the best weights so far
    to ``<checkpoint_dir>/state_dict_best.pt``; returns the path of the last checkpoint (None without a place)."""
    if path is None:
        if checkpoint_dir is None:
            return None
        path = checkpoint_dir / "state_dict_last.pt"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_save(state, path)
    if model_selection.best_state is not None and checkpoint_dir is not None:
        best = checkpoint_dir / "state_dict_best.pt"
        if model_selection.dump_file is None or Path(model_selection.dump_file) != best:
            _atomic_save({"model": model_selection.best_state, "epoch": model_selection.best_epoch,
                          "best_reward": model_selection.best_reward}, best)
    return path


def read_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """A checkpoint read with ``torch.load(weights_only=True)`` (no code from the file runs); anything that is
    not a maze-lab checkpoint is refused."""
    state = torch.load(Path(path), map_location=device, weights_only=True)
    if not isinstance(state, dict) or "model" not in state:
        raise ValueError(f"{path} is not a maze-lab checkpoint (expected a dict with 'model' weights)")
    return state
