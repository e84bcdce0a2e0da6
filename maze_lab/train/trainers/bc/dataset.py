"""In-memory imitation dataset: observations and actions per policy key from a directory of episode files."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.trajectory import (
    ClassAllowList,
    EpisodeRecord,
    UntrustedClassWarning,
    list_episodes,
    load_episode,
)


@dataclass
class ImitationBatch:
    """Samples of one policy key: observation and action tensors with a common first axis."""

    obs: dict[str, torch.Tensor]
    actions: dict[str, torch.Tensor]

    def __len__(self) -> int:
        return int(next(iter(self.actions.values())).shape[0])

    def select(self, idx: torch.Tensor) -> ImitationBatch:
        """A minibatch."""
        return ImitationBatch({k: v[idx] for k, v in self.obs.items()}, {k: v[idx] for k, v in self.actions.items()})

    def to(self, device: torch.device | str) -> ImitationBatch:
        """The batch on ``device``."""
        return ImitationBatch({k: v.to(device) for k, v in self.obs.items()},
                              {k: v.to(device) for k, v in self.actions.items()})


def _tensor(arr: np.ndarray) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(arr))
    return t.float() if t.dtype == torch.float64 else t


def _check_finite(obs: Mapping[str, np.ndarray], key: StepKey, source: str) -> None:
    """Refuse recorded observations holding NaN or inf: cloning them would turn the loss into NaN."""
    for name, arr in obs.items():
        arr = np.asarray(arr)
        if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
            steps = np.flatnonzero(~np.isfinite(arr.reshape(len(arr), -1)).all(axis=1)) if arr.ndim else [0]
            raise ValueError(f"{source}: the recorded observation {name!r} of policy key {key!r} holds NaN or inf at "
                             f"sub-step {int(steps[0])} ({len(steps)} sub-step(s) in all); imitation needs finite "
                             f"observations: re-record the episodes from a fixed env, or leave this file out")


class InMemoryImitationDataset:
    """All sub-steps of the recorded episodes, kept per episode and per policy key, split by episode.

    :param trajectory_dir: a directory holding ``*.trajectory.zip`` episode files (searched recursively).
    :param episodes: already loaded episodes instead of (or in addition to) a directory.
    :param allowed_classes: classes rebuilt when the files are decoded (see :func:`load_episode`).
    :param max_episodes: load at most this many episodes (oldest first).
    """

    def __init__(self, trajectory_dir: str | Path | None = None, episodes: Iterable[EpisodeRecord] = (),
                 allowed_classes: ClassAllowList | Iterable[str | type] | None = None,
                 max_episodes: int | None = None):
        self.trajectory_dir = Path(trajectory_dir) if trajectory_dir is not None else None
        records = list(episodes)
        sources = [f"episode {r.episode_id}" for r in records]
        if self.trajectory_dir is not None:
            if not self.trajectory_dir.exists():
                raise FileNotFoundError(f"trajectory directory {self.trajectory_dir} does not exist; record episodes "
                                        "first (e.g. SequentialRolloutRunner(..., trajectory_dir=...))")
            paths = list_episodes(self.trajectory_dir)
            if max_episodes is not None:
                paths = paths[:max_episodes]
            loaded = [load_episode(p, allowed_classes, warn=False) for p in paths]
            records += loaded
            sources += [str(p) for p in paths]
            _warn_refused_classes(loaded, self.trajectory_dir)
        if not records:
            where = self.trajectory_dir if self.trajectory_dir is not None else "the given episodes"
            raise ValueError(f"no recorded episodes in {where} (expected *.trajectory.zip episode files); "
                             "record some with SequentialRolloutRunner(..., record_trajectory=True)")
        self.episode_ids: list[str] = [r.episode_id for r in records]
        self.episode_rewards: list[float] = [r.total_reward for r in records]
        self._data: list[dict[StepKey, tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]] = []
        for rec, source in zip(records, sources, strict=True):
            stacked = {key: rec.stacked(key) for key in rec.step_keys}
            for key, (obs, _) in stacked.items():
                _check_finite(obs, key, source)
            self._data.append(stacked)
        keys: list[StepKey] = []
        for ep in self._data:
            keys += [k for k in ep if k not in keys]
        self.step_keys: list[StepKey] = keys

    def __len__(self) -> int:
        return len(self._data)

    @property
    def n_samples(self) -> int:
        """Sub-steps over all episodes and policy keys."""
        return sum(len(next(iter(a.values()))) for ep in self._data for _, a in ep.values())

    def split(self, validation_percentage: float, seed: int | None = None) -> tuple[list[int], list[int]]:
        """Episode indices ``(train, validation)``: a seeded shuffle, ``validation_percentage`` of the episodes held
        out (at least one where the percentage is positive and there are two episodes or more)."""
        n = len(self._data)
        order = np.random.default_rng(seed).permutation(n).tolist()
        n_val = int(round(n * validation_percentage / 100.0))
        if validation_percentage > 0 and n >= 2:
            n_val = min(max(n_val, 1), n - 1)
        else:
            n_val = 0
        return sorted(order[n_val:]), sorted(order[:n_val])

    def batches(self, episode_indices: Sequence[int] | None = None) -> dict[StepKey, ImitationBatch]:
        """Samples of the given episodes (default: all) concatenated per policy key."""
        idx = range(len(self._data)) if episode_indices is None else episode_indices
        out: dict[StepKey, ImitationBatch] = {}
        for key in self.step_keys:
            parts = [self._data[i][key] for i in idx if key in self._data[i]]
            if not parts:
                continue
            obs = {n: _tensor(np.concatenate([p[0][n] for p in parts])) for n in parts[0][0]}
            actions = {n: _tensor(np.concatenate([p[1][n] for p in parts])) for n in parts[0][1]}
            out[key] = ImitationBatch(obs, actions)
        return out

    def check_spaces(self, observation_spaces: Mapping[StepKey, Any], action_spaces: Mapping[StepKey, Any]) -> None:
        """Raise a ValueError naming the policy key, the entry and both shapes where the recorded data does not fit
        the policy's spaces (Dict spaces per policy key)."""
        where = self.trajectory_dir if self.trajectory_dir is not None else "the given episodes"
        for key in self.step_keys:
            if key not in action_spaces:
                raise ValueError(f"trajectories in {where} hold policy key {key!r}, the policy has keys "
                                 f"{list(action_spaces)}")
            ep = next(e for e in self._data if key in e)
            for kind, recorded, spaces in (("observation", ep[key][0], observation_spaces[key]),
                                           ("action", ep[key][1], action_spaces[key])):
                expected = dict(spaces.spaces)
                missing = [n for n in expected if n not in recorded]
                if missing:
                    raise ValueError(f"policy key {key!r}: the policy's {kind} space has {missing} which the "
                                     f"trajectories in {where} lack; recorded {kind} entries: {sorted(recorded)}, "
                                     f"policy's: {sorted(expected)}")
                for name, space in expected.items():
                    got = tuple(recorded[name].shape[1:])
                    want = tuple(space.shape) if space.shape is not None else ()
                    if got != want:
                        raise ValueError(f"policy key {key!r}, {kind} '{name}': the trajectories in {where} have "
                                         f"shape {got}, the policy's space {space} has shape {want}")


def _warn_refused_classes(records: list[EpisodeRecord], directory: Path) -> None:
    """One warning for all episode files whose objects (maze states, actions of the env's own classes) were not
    rebuilt, instead of one per file: cloning learns from their observations and actions, which load in full."""
    refused = sorted({path for record in records for path in record.refused_classes})
    if not refused:
        return
    files = sum(1 for record in records if record.refused_classes)
    shown = ", ".join(refused[:3]) + (f" and {len(refused) - 3} more" if len(refused) > 3 else "")
    warnings.warn(f"{files} of {len(records)} episode files in {directory} hold objects of classes that are not "
                  f"rebuilt ({shown}); they load as plain dicts. Behavioural cloning learns from the observations and "
                  f"actions, which load in full, so training is not affected and nothing needs to be allowed",
                  UntrustedClassWarning, stacklevel=3)

