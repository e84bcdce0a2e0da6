"""Interfaces for the parts of an env: space conversion, reward aggregation, KPIs and rendering."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from maze_lab.core.events.pubsub import Subscriber

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MazeStateType = Any
MazeActionType = Any
ObservationType = dict[str, np.ndarray]
ActionType = dict[str, Any]


class ObservationConversionInterface(ABC):
    """Turns a MazeState into a (dict) observation and declares the observation space."""

    @abstractmethod
    def maze_to_space(self, maze_state: MazeStateType) -> ObservationType:
        """Observation of the given state."""

    def space_to_maze(self, observation: ObservationType) -> MazeStateType:
        """Optional inverse (for imitation learning from observations)."""
        raise NotImplementedError(f"{type(self).__name__} does not convert observations back to states")

    @abstractmethod
    def space(self) -> gym.spaces.Dict:
        """The observation space."""


class ActionConversionInterface(ABC):
    """Turns a (dict) action into a MazeAction and declares the action space."""

    @abstractmethod
    def space_to_maze(self, action: ActionType, maze_state: MazeStateType) -> MazeActionType:
        """MazeAction for the given action in the given state."""

    def maze_to_space(self, maze_action: MazeActionType) -> ActionType:
        """Optional inverse (for imitation learning from recorded MazeActions)."""
        raise NotImplementedError(f"{type(self).__name__} does not convert MazeActions back to actions")

    @abstractmethod
    def space(self) -> gym.spaces.Dict:
        """The action space."""

    def noop_action(self) -> ActionType | None:
        """An action that does nothing, where the env has one."""
        return None


class RewardAggregatorInterface(Subscriber):
    """Computes the reward from the events of a step; declares the topics it listens to.

    Assign it to ``core_env.reward_aggregator`` and register it with ``core_env.pubsub``: the framework then
    resets it at the start of each full env step and each episode (a structured env's sub-steps share one
    full step), so ``summarize_reward`` sees the events of the current step only.
    """

    def __init__(self) -> None:
        self.events: list = []

    def notify_event(self, event: Any) -> None:
        """Collect an event of this step."""
        self.events.append(event)

    def reset(self) -> None:
        """Forget the collected events; the CoreEnv calls it at the start of each full env step and episode."""
        self.events = []

    @abstractmethod
    def summarize_reward(self, maze_state: MazeStateType | None = None) -> float | np.ndarray:
        """The reward of this step (a float, or one value per actor for multi-agent envs)."""

    def query_events(self, event_spec: Any) -> list:
        """Collected events of a given event method or topic."""
        specs = event_spec if isinstance(event_spec, list | tuple) else [event_spec]
        return [e for e in self.events if any(e.interface_method is s or e.interface_class is s for s in specs)]


class KpiCalculator(ABC):
    """Computes KPIs at the end of an episode from its event log."""

    @abstractmethod
    def calculate_kpis(self, episode_event_log: Any, last_maze_state: MazeStateType) -> dict[str, float]:
        """KPI name -> value for the finished episode."""


class Renderer(ABC):
    """Draws a MazeState (and optionally the MazeAction taken in it) into a matplotlib figure."""

    @abstractmethod
    def render(self, maze_state: MazeStateType, maze_action: MazeActionType | None, events: Any = None,
               **kwargs: Any) -> Figure:
        """Return a new figure of the state; never uses global pyplot state."""

    def redraw(self, fig: Figure | None, maze_state: MazeStateType, maze_action: MazeActionType | None,
               events: Any = None, **kwargs: Any) -> Figure:
        """The state drawn into ``fig``, a figure this renderer returned before, where the renderer can update
        one in place (a viewer showing step after step then skips building the figure, its axes and ticks).

        The result must look like :meth:`render`'s when saved. Artists of the axes that belong to the step alone
        may come back animated (``artist.set_animated(True)``), as for matplotlib's blitting: ``savefig`` draws
        them (an axes' ones, not the figure's own), ``canvas.draw()`` leaves them out, and a viewer draws them on
        top of a kept picture of the rest (the background; see :meth:`background_key`). Everything not animated
        must lie below them. This default draws a new figure (``fig`` is left alone); renderers that update their
        figure from step to step override it.
        """
        return self.render(maze_state, maze_action, events=events, **kwargs)

    def background_key(self, fig: Figure) -> Hashable | None:
        """What the background of a :meth:`redraw` figure (its artists that are not animated) depends on: a viewer
        reuses a kept background while the key stays equal (at the same size and dpi); None keeps none."""
        return None

    def render_to_png(self, path: str, maze_state: MazeStateType, maze_action: MazeActionType | None = None,
                      **kwargs: Any) -> str:
        """Render and save to a PNG file."""
        fig = self.render(maze_state, maze_action, **kwargs)
        fig.savefig(path, dpi=kwargs.get("dpi", 100))
        return path

    def render_rgb(self, maze_state: MazeStateType, maze_action: MazeActionType | None = None) -> np.ndarray:
        """Render to an RGB array (H, W, 3)."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        fig = self.render(maze_state, maze_action)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        return np.asarray(canvas.buffer_rgba())[..., :3].copy()
