"""Trajectory records: what happened in one sub-step, one env step, and one episode."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from maze_lab.core.env.structured_env import ActorID, StepKey
from maze_lab.core.trajectory.frames import EpisodeFrames


@dataclass
class SubStepRecord:
    """One actor's turn: what it observed, what it did, and what the env answered."""

    actor_id: ActorID
    """The actor that acted (policy key and agent)."""
    observation: dict[str, Any]
    """The observation the actor acted on (arrays by observation name)."""
    action: dict[str, Any]
    """The action the actor took (arrays by action head)."""
    reward: float
    """The reward returned for this sub-step."""
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)
    """The info dict of the sub-step (JSON-safe values; others as their repr)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """Events fired during the sub-step: ``{"topic", "event", "attributes"}`` dicts."""


@dataclass
class StepRecord:
    """One env step (all its sub-steps): the MazeState it started in and the MazeAction it applied.

    Flat envs have one sub-step per step; structured envs (e.g. piece selection, then cutting) several.
    """

    index: int
    """Position of the step in its episode (0 = first)."""
    maze_state: Any
    """The MazeState the step started in (the state the first actor observed)."""
    maze_action: Any
    """The MazeAction the env applied in this step (None where the step ended before the env acted)."""
    substeps: list[SubStepRecord]
    serializable_components: dict[str, Any] = field(default_factory=dict)
    """Further env components stored with the state (``env.get_serializable_components()``)."""

    @property
    def reward(self) -> float:
        """The summed reward of the step's sub-steps."""
        return float(sum(s.reward for s in self.substeps))

    @property
    def terminated(self) -> bool:
        """Whether the episode terminated in this step."""
        return any(s.terminated for s in self.substeps)

    @property
    def truncated(self) -> bool:
        """Whether the episode was truncated in this step."""
        return any(s.truncated for s in self.substeps)

    @property
    def events(self) -> list[dict[str, Any]]:
        """The events of all sub-steps, in the order they were fired."""
        return [e for s in self.substeps for e in s.events]

    @property
    def actor_ids(self) -> list[ActorID]:
        """The actors of the sub-steps, in order."""
        return [s.actor_id for s in self.substeps]


@dataclass
class EpisodeRecord:
    """A recorded episode: its steps plus what is needed to replay and draw them."""

    episode_id: str
    """A UUID string; also the file name of the episode."""
    steps: list[StepRecord]
    env: str | None = None
    """Dotted class path of the env (the innermost MazeEnv)."""
    renderer: str | None = None
    """Dotted class path of the env's renderer, rebuilt by :meth:`make_renderer` (None: the env has none)."""
    final_maze_state: Any = None
    """The MazeState after the last step."""
    reset_events: list[dict[str, Any]] = field(default_factory=list)
    """Events fired while the env was reset."""
    finished: bool = True
    """Whether the episode ended by ``terminated``/``truncated`` (False: it was cut off by a reset or close)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Free-form information (creation time, seed, policy, ...)."""
    refused_classes: dict[str, str] = field(default_factory=dict)
    """Classes that were not rebuilt on load (dotted path -> reason); their objects are plain dicts."""
    path: Path | None = None
    """The file the episode was loaded from or written to."""
    frames: EpisodeFrames | None = None
    """The env's own pictures (PNG) by step index, recorded for envs whose renderer cannot redraw a recorded state
    (see :class:`~maze_lab.core.trajectory.frames.EpisodeFrames`); None where none were recorded."""

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def n_steps(self) -> int:
        """Number of env steps."""
        return len(self.steps)

    @property
    def n_substeps(self) -> int:
        """Number of sub-steps (actions taken)."""
        return sum(len(s.substeps) for s in self.steps)

    @property
    def rewards(self) -> np.ndarray:
        """Reward of every step."""
        return np.array([s.reward for s in self.steps], dtype=np.float64)

    @property
    def total_reward(self) -> float:
        """Sum of all rewards (the undiscounted return)."""
        return float(self.rewards.sum())

    @property
    def cumulative_rewards(self) -> np.ndarray:
        """Return up to and including each step."""
        return np.cumsum(self.rewards)

    @property
    def step_keys(self) -> list[StepKey]:
        """Policy keys that acted, in order of first appearance."""
        keys: list[StepKey] = []
        for step in self.steps:
            for sub in step.substeps:
                if sub.actor_id.step_key not in keys:
                    keys.append(sub.actor_id.step_key)
        return keys

    def substeps(self, step_key: StepKey | None = None) -> list[SubStepRecord]:
        """All sub-steps in order, optionally only those of one policy key."""
        return [sub for step in self.steps for sub in step.substeps
                if step_key is None or sub.actor_id.step_key == step_key]

    def stacked(self, step_key: StepKey) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Observations and actions of one policy key stacked along a first axis (for imitation learning)."""
        subs = self.substeps(step_key)
        if not subs:
            raise KeyError(f"no sub-steps of policy key {step_key!r}; keys in this episode: {self.step_keys}")
        return _stack([s.observation for s in subs]), _stack([s.action for s in subs])

    def make_renderer(self, allowed_classes: Iterable[str | type] | None = None) -> Any:
        """The env's renderer rebuilt from its recorded class path (allow-listed, no-argument constructor).

        Returns None where no renderer was recorded or it cannot be rebuilt (:func:`rebuild_renderer` says why).
        """
        renderer, _ = rebuild_renderer(self.renderer, allowed_classes)
        return renderer


def _stack(dicts: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
    names = list(dicts[0])
    return {n: np.stack([np.asarray(d[n]) for d in dicts]) for n in names}


def rebuild_renderer(path: str | None, allowed_classes: Iterable[str | type] | None = None) -> tuple[Any, str]:
    """``(renderer or None, note)``: the renderer at a recorded class path and why it is missing, if it is."""
    from maze_lab.core.env.interfaces import Renderer
    from maze_lab.core.trajectory.serialization import ClassAllowList

    if not path:
        return None, "the env has no renderer"
    allow = ClassAllowList.of(allowed_classes)
    if not allow.allows(path):
        return None, (f"renderer '{path}' is not on the allow-list; pass allowed_classes=['{path}'] if you trust "
                      f"the recording")
    cls = allow.resolve(path, Renderer)
    if cls is None:
        return None, f"renderer '{path}' cannot be imported from that path (or is not a Renderer)"
    try:
        return cls(), ""
    except TypeError:
        return None, (f"the env's renderer {path.rsplit('.', 1)[-1]} needs constructor arguments (it draws a live "
                      f"env), so it cannot redraw recorded states")


def event_view(event: dict[str, Any]) -> Any:
    """An object with ``interface_class``/``interface_method`` names and ``attributes``, as renderers expect
    of live events, for a recorded event dict."""
    from types import SimpleNamespace

    return SimpleNamespace(interface_class=SimpleNamespace(__name__=event.get("topic", "")),
                           interface_method=SimpleNamespace(__name__=event.get("event", "")),
                           attributes=event.get("attributes", {}),
                           name=f"{event.get('topic', '')}.{event.get('event', '')}")
