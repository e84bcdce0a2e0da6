"""Checkpoint files: a refused or damaged file gets maze-lab's own message; a failed write names the path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from maze_lab.train.trainers.common.checkpoints import (
    CheckpointError,
    CheckpointWriteError,
    read_checkpoint,
    write_checkpoints,
)
from maze_lab.train.trainers.common.model_selection import BestModelSelection


class Payload:
    """An object whose unpickling would run code (``os.system``)."""

    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_a_checkpoint_with_code_is_refused_without_advice_to_unpickle(tmp_path: Path) -> None:
    path = tmp_path / "state_dict_last.pt"
    torch.save({"model": {"w": torch.zeros(1)}, "extra": Payload()}, path)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path)
    message = str(info.value)
    assert str(path) in message and "code-bearing" in message and "was not loaded" in message
    assert "os.system" in message or "posix.system" in message
    assert "weights_only" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_a_truncated_checkpoint_says_so(tmp_path: Path) -> None:
    path = tmp_path / "state_dict_last.pt"
    write_checkpoints({"model": {"w": torch.arange(1000.0)}}, tmp_path, BestModelSelection())
    assert read_checkpoint(path)["model"]["w"].shape == (1000,)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=r"state_dict_last.pt is truncated or corrupt and was not loaded"):
        read_checkpoint(path)
    path.write_bytes(b"")
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        read_checkpoint(path)


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9, 0.99])
def test_checkpoints_cut_anywhere_are_reported_as_truncated(tmp_path: Path, keep: float) -> None:
    path = tmp_path / "state_dict_last.pt"
    write_checkpoints({"model": {"w": torch.arange(50_000.0), "b": torch.ones(10)}, "epoch": 3}, tmp_path,
                      BestModelSelection())
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointError, match="truncated or corrupt and was not loaded"):
        read_checkpoint(path)


def test_a_missing_checkpoint_stays_a_file_not_found_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_checkpoint(tmp_path / "nope.pt")


def test_a_failed_write_names_the_path_and_keeps_the_previous_checkpoint(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import os

    from maze_lab.core.utils import atomic

    write_checkpoints({"model": {"w": torch.ones(3)}}, tmp_path, BestModelSelection())

    def disk_full(fd: int, data: bytes) -> None:  # what a full disk does halfway through the file
        os.write(fd, bytes(data[:100]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic, "_write_all", disk_full)
    with pytest.raises(CheckpointWriteError, match=r"could not write the checkpoint .*state_dict_last.pt.*No space"):
        write_checkpoints({"model": {"w": torch.zeros(3)}}, tmp_path, BestModelSelection())
    assert read_checkpoint(tmp_path / "state_dict_last.pt")["model"]["w"].tolist() == [1.0, 1.0, 1.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state_dict_last.pt"]  # no temporary file left
