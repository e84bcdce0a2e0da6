"""A replay buffer of transitions (observation, action, reward, next observation, terminated) for one policy key,
filled from rollouts or from recorded episodes and sampled uniformly."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from maze_lab.train.trainers.common.rollout import Rollout

_PER_KEY = ("obs", "action", "next_obs")
"""The parts of a transition that hold one array per observation or action key."""

_SCALAR = ("reward", "terminated")
"""The parts of a transition that hold one number."""


@dataclass(frozen=True)
class TransitionBatch:
    """Transitions drawn from a :class:`ReplayBuffer` as tensors; every tensor's first axis is the transition."""

    obs: dict[str, torch.Tensor]
    action: dict[str, torch.Tensor]
    next_obs: dict[str, torch.Tensor]
    reward: torch.Tensor
    terminated: torch.Tensor


class ReplayBuffer:
    """A ring buffer of transitions; arrays are allocated on the first insert (sized by ``capacity``), the oldest
    transitions are overwritten once it is full.

    :param capacity: transitions the buffer holds.
    :param seed: seed of the uniform sampling.
    """

    def __init__(self, capacity: int, seed: int | None = None):
        self.capacity = int(capacity)
        self.size = 0
        self._next = 0
        self._arrays: dict[tuple[str, str], np.ndarray] = {}  # (part, key) -> array; key "" for reward, terminated
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.size

    def add(self, obs: Mapping[str, np.ndarray], actions: Mapping[str, np.ndarray], reward: np.ndarray,
            next_obs: Mapping[str, np.ndarray], terminated: np.ndarray) -> None:
        """Insert a batch of transitions (every array's first axis is the transition)."""
        columns = {**{("obs", k): v for k, v in obs.items()}, **{("action", k): v for k, v in actions.items()},
                   **{("next_obs", k): v for k, v in next_obs.items()},
                   ("reward", ""): np.asarray(reward, np.float32),
                   ("terminated", ""): np.asarray(terminated, np.float32)}
        n = len(columns["reward", ""])
        if not self._arrays:
            for name, value in columns.items():
                value = np.asarray(value)
                dtype = np.float32 if value.dtype == np.float64 else value.dtype
                self._arrays[name] = np.empty((self.capacity, *value.shape[1:]), dtype)
        elif set(columns) != set(self._arrays):
            raise ValueError(f"transitions with keys {_names(columns)} do not fit the buffer's {_names(self._arrays)}")
        idx = (self._next + np.arange(n)) % self.capacity
        for name, value in columns.items():
            self._arrays[name][idx] = value
        self._next = int((self._next + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)

    def add_rollout(self, rollout: Rollout) -> None:
        """Insert the transitions of a rollout of a one-policy-key env. The next observation of a step is the one
        the env returned; where a time limit cut the episode it is the recorded last observation (the following
        one starts a new episode), where the episode terminated it is not used."""
        records = rollout.records
        for s, record in enumerate(records):
            following = records[s + 1].obs if s + 1 < len(records) else rollout.next_obs
            next_obs = {k: np.array(v, copy=True) for k, v in following.items()}
            for env_index, last_obs in record.bootstrap:
                for k, v in last_obs.items():
                    next_obs[k][env_index] = v
            self.add(record.obs, record.actions, record.reward, next_obs, record.terminated)

    def sample(self, batch_size: int, device: torch.device | str = "cpu") -> TransitionBatch:
        """A uniformly drawn batch (with replacement)."""
        if not self.size:
            raise ValueError("the replay buffer is empty: fill it before sampling")
        idx = self._rng.integers(0, self.size, size=int(batch_size))
        parts: dict[str, Any] = {part: {} for part in _PER_KEY}
        for (part, key), array in self._arrays.items():
            tensor = torch.from_numpy(array[idx]).to(device)
            if key:
                parts[part][key] = tensor
            else:
                parts[part] = tensor
        return TransitionBatch(**parts)

    def state_dict(self) -> dict[str, Any]:
        """The stored transitions, oldest first, as tensors (what a checkpoint read with weights only can hold),
        named ``obs/<key>``, ``action/<key>``, ``next_obs/<key>``, ``reward`` and ``terminated``."""
        order = (self._next - self.size + np.arange(self.size)) % self.capacity
        return {"size": self.size, "arrays": {_name(part, key): torch.from_numpy(array[order])
                                              for (part, key), array in self._arrays.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Put back the transitions of :meth:`state_dict`; where there are more than ``capacity``, the newest."""
        arrays = {name: np.asarray(t) for name, t in dict(state.get("arrays", {})).items()}
        lengths = {len(a) for a in arrays.values()}
        if len(lengths) > 1 or (arrays and lengths != {int(state.get("size", -1))}):
            raise ValueError(f"the checkpoint's replay buffer is inconsistent: {len(arrays)} columns with lengths "
                             f"{sorted(lengths)} for a size of {state.get('size')}")
        self.size, self._next, self._arrays = 0, 0, {}
        if not arrays or not lengths.pop():
            return
        parts: dict[str, Any] = {part: {} for part in _PER_KEY}
        for name, array in arrays.items():
            part, _, key = name.partition("/")
            if (part in _PER_KEY) != bool(key) or part not in (*_PER_KEY, *_SCALAR):
                raise ValueError(f"the checkpoint's replay buffer has a column {name!r}; expected obs/<key>, "
                                 f"action/<key>, next_obs/<key>, reward and terminated")
            if key:
                parts[part][key] = array[-self.capacity:]
            else:
                parts[part] = array[-self.capacity:]
        if any(part not in parts for part in _SCALAR):
            raise ValueError(f"the checkpoint's replay buffer lacks {[p for p in _SCALAR if p not in parts]}")
        self.add(parts["obs"], parts["action"], parts["reward"], parts["next_obs"], parts["terminated"])


def _name(part: str, key: str) -> str:
    return f"{part}/{key}" if key else part


def _names(columns: Mapping[tuple[str, str], Any]) -> list[str]:
    return sorted(_name(part, key) for part, key in columns)


def load_demonstrations(buffer: ReplayBuffer, trajectory_dir: str | Path, allowed_classes: tuple = ()) -> int:
    """Insert the transitions of the recorded episodes in ``trajectory_dir`` (``*.trajectory.zip``, one policy
    key); returns how many. The last step of an episode cut off by a time limit has no recorded next observation
    and is left out."""
    from maze_lab.core.trajectory import list_episodes, load_episode

    directory = Path(trajectory_dir)
    if not directory.is_dir():
        raise FileNotFoundError(f"SACfD demonstrations: {directory} is not a directory of recorded episodes "
                                "(*.trajectory.zip); record some with RunContext.rollout or maze-lab rollout")
    paths = list_episodes(directory)
    if not paths:
        raise FileNotFoundError(f"SACfD demonstrations: no *.trajectory.zip episodes in {directory}")
    added = 0
    for path in paths:
        episode = load_episode(path, allowed_classes=allowed_classes)
        subs = [sub for step in episode.steps for sub in step.substeps]
        keys = {sub.actor_id.step_key for sub in subs}
        if len(keys) > 1:
            raise ValueError(f"{path}: SACfD takes episodes of envs with one policy key; this one has {sorted(keys)}")
        for t, sub in enumerate(subs):
            if t + 1 < len(subs):
                next_obs = subs[t + 1].observation
            elif sub.terminated:
                next_obs = sub.observation  # not used: the target of a terminal transition is its reward
            else:
                continue
            buffer.add({k: np.asarray(v)[None] for k, v in sub.observation.items()},
                       {k: np.asarray(v)[None] for k, v in sub.action.items()}, np.array([sub.reward]),
                       {k: np.asarray(v)[None] for k, v in next_obs.items()}, np.array([sub.terminated]))
            added += 1
    return added
