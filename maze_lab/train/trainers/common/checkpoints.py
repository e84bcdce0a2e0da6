"""Checkpoint files shared by all trainers: ``state_dict_last.pt`` and ``state_dict_best.pt``, written atomically
and read without executing code from the file."""

from __future__ import annotations

import io
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from maze_lab.core.utils.atomic import write_atomic
from maze_lab.core.utils.yielding import give_way
from maze_lab.train.trainers.common.model_selection import BestModelSelection


class CheckpointError(ValueError):
    """A checkpoint file cannot be used: refused (it holds code-bearing objects), truncated, or not maze-lab's."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, no permission); the previous checkpoint is untouched."""


def _atomic_save(obj: Any, path: Path) -> None:
    try:
        # serialized in memory first: a full disk then fails in our write with ENOSPC ("No space left on device")
        # instead of deep in torch's zip writer with a message that does not say why
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        write_atomic(path, buffer.getbuffer())  # a crash never leaves a half-written checkpoint, nor a stray .tmp
    except (OSError, RuntimeError) as err:
        raise CheckpointWriteError(f"could not write the checkpoint {path}: {err}; the previous checkpoint at "
                                   f"that path (if any) is unchanged") from err


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
    give_way()  # a background run in a kernel makes room for a running cell between the two files
    if model_selection.best_state is not None and checkpoint_dir is not None:
        best = checkpoint_dir / "state_dict_best.pt"
        if model_selection.dump_file is None or Path(model_selection.dump_file) != best:
            _atomic_save({"model": model_selection.best_state, "epoch": model_selection.best_epoch,
                          "best_reward": model_selection.best_reward}, best)
    return path


def read_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """A checkpoint read with ``torch.load(weights_only=True)`` (no code from the file runs); anything that is
    not a maze-lab checkpoint is refused."""
    path = Path(path)
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as err:
        # torch's message advises weights_only=False, i.e. running the file's code: never pass that on
        found = sorted(set(re.findall(r"GLOBAL ([\w.]+)", str(err))))
        what = f" (it names {', '.join(found)})" if found else ""
        raise CheckpointError(
            f"{path} was not loaded: it contains code-bearing Python objects{what}, which maze-lab never "
            f"unpickles. maze-lab checkpoints hold only tensors, numbers and strings; this file was not written "
            f"by maze-lab or was tampered with.") from None
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except (EOFError, zipfile.BadZipFile, RuntimeError, OSError) as err:  # torch raises EINVAL for some cuts
        raise CheckpointError(f"{path} is truncated or corrupt and was not loaded ({type(err).__name__}: "
                              f"{' '.join(str(err).split())[:200]})") from None
    if not isinstance(state, dict) or "model" not in state:
        raise CheckpointError(f"{path} is not a maze-lab checkpoint (expected a dict with 'model' weights)")
    return state


def check_weights_fit(model: Any, weights: Any, source: str, advice: str | None = None) -> None:
    """Refuse weights whose parameters do not fit ``model`` with one :class:`CheckpointError` line naming ``source``,
    the policy key (or critic) and parameter, and both shapes; torch's own message lists every tensor and names no
    file. Modules of the model the weights do not hold are left to ``load_state_dict`` (a fine-tuned critic).

    :param weights: a checkpoint's ``model`` entry: module name (``policy_<key>``, ``critic_<key>``) -> state dict.
    :param source: what the weights came from, for the message (``input_dir=RUN: its checkpoint state_dict_last.pt``).
    :param advice: what to do, for the message (default: the advice for resuming a run).
    """
    if not isinstance(weights, dict):
        raise CheckpointError(f"{source} holds no model weights (a dict of module state dicts), got "
                              f"{type(weights).__name__}")
    problems: list[str] = []
    for module, own in model.state_dict().items():
        theirs = weights.get(module)
        if not isinstance(theirs, dict):
            continue
        what = _module_name(module)
        for name, tensor in own.items():
            other = theirs.get(name)
            if other is None:
                problems.append(f"{what} has no parameter {name} in the checkpoint")
            elif tuple(getattr(other, "shape", ())) != tuple(tensor.shape):
                problems.append(f"{what} parameter {name} has shape {list(getattr(other, 'shape', ()))} in the "
                                f"checkpoint and {list(tensor.shape)} in this run's model")
        extra = sorted(set(theirs) - set(own))
        if extra:
            problems.append(f"{what} has parameter(s) {', '.join(extra[:3])} in the checkpoint that this run's model "
                            f"lacks")
    if problems:
        more = f" (and {len(problems) - 1} more mismatch{'es' if len(problems) > 2 else ''})" if len(problems) > 1 \
            else ""
        advice = advice or ("It was trained with other observation or action spaces (another env or wrappers) or "
                            "another model; resume with the env, wrappers and model it was trained with, or start a "
                            "fresh run")
        raise CheckpointError(f"{source} does not fit this run's model: {problems[0]}{more}. {advice}")


def _module_name(module: str) -> str:
    """``policy_0`` -> ``policy key 0 (policy_0)``; ``critic_0`` -> ``critic 0 (critic_0)``."""
    kind, _, key = module.partition("_")
    if kind == "policy" and key:
        return f"policy key {key} ({module})"
    if kind == "critic" and key:
        return f"critic {key} ({module})"
    return module
