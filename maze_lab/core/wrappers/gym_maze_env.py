"""Gymnasium envs as MazeEnvs (GymMazeEnv); MazeEnvs as Gymnasium envs (GymnasiumEnvAdapter, re-exported from
``gymnasium_adapter``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from maze_lab.core.env.core_env import CoreEnv
from maze_lab.core.env.interfaces import ActionConversionInterface, ObservationConversionInterface, Renderer
from maze_lab.core.env.maze_env import MazeEnv
from maze_lab.core.wrappers.gymnasium_adapter import GymnasiumEnvAdapter

__all__ = ["GymActionConversion", "GymCoreEnv", "GymMazeEnv", "GymObservationConversion", "GymRenderer",
           "GymnasiumEnvAdapter", "make_gym_maze_env"]


class GymObservationConversion(ObservationConversionInterface):
    """Dict observation spaces pass through; any other space becomes ``{"observation": obs}``."""

    def __init__(self, space: gym.spaces.Space):
        self.is_dict = isinstance(space, gym.spaces.Dict)
        self._space = space if self.is_dict else gym.spaces.Dict({"observation": space})

    def maze_to_space(self, maze_state: Any) -> dict:
        """Wrap the Gymnasium observation."""
        return maze_state if self.is_dict else {"observation": maze_state}

    def space_to_maze(self, observation: dict) -> Any:
        """Unwrap."""
        return observation if self.is_dict else observation["observation"]

    def space(self) -> gym.spaces.Dict:
        """Dict observation space."""
        return self._space


class GymActionConversion(ActionConversionInterface):
    """Dict action spaces pass through; any other space becomes ``{"action": action}``."""

    def __init__(self, space: gym.spaces.Space):
        self.is_dict = isinstance(space, gym.spaces.Dict)
        self._space = space if self.is_dict else gym.spaces.Dict({"action": space})

    def space_to_maze(self, action: dict, maze_state: Any) -> Any:
        """Unwrap the dict action."""
        return action if self.is_dict else action["action"]

    def maze_to_space(self, maze_action: Any) -> dict:
        """Wrap a Gymnasium action."""
        return maze_action if self.is_dict else {"action": maze_action}

    def space(self) -> gym.spaces.Dict:
        """Dict action space."""
        return self._space


class GymRenderer(Renderer):
    """Draws the current frame of a Gymnasium env created with ``render_mode="rgb_array"``.

    Gymnasium envs cannot draw an arbitrary recorded state, so this renders the env as it is now.
    """

    def __init__(self, env: gym.Env):
        self.env = env

    def render(self, maze_state: Any, maze_action: Any, events: Any = None, **kwargs: Any):
        """A figure with the env's current RGB frame."""
        from matplotlib.figure import Figure

        frame = self.env.render()
        fig = Figure(figsize=kwargs.get("figsize", (5, 4)))
        ax = fig.add_subplot(1, 1, 1)
        if frame is not None:
            ax.imshow(frame)
        ax.set_axis_off()
        if maze_action is not None:
            ax.set_title(f"action: {maze_action}")
        return fig


class GymCoreEnv(CoreEnv):
    """A Gymnasium env as a CoreEnv: the observation is the MazeState, the Gymnasium action the MazeAction."""

    def __init__(self, env: gym.Env):
        super().__init__()
        self.env = env
        self._state: Any = None
        self._next_seed: int | None = None

    def step(self, maze_action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Step the Gymnasium env."""
        obs, reward, terminated, truncated, info = self.env.step(maze_action)
        self._state = obs
        return obs, float(reward), bool(terminated), bool(truncated), info

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        """Reset the Gymnasium env (a seed given to ``seed()`` before is used once)."""
        if seed is None and self._next_seed is not None:
            seed, self._next_seed = self._next_seed, None
        obs, _ = self.env.reset(seed=seed, options=options)
        self._state = obs
        return obs

    def seed(self, seed: int | None) -> None:
        """Use ``seed`` at the next reset and seed the action space."""
        self._next_seed = seed
        if seed is not None:
            self.env.action_space.seed(seed)

    def get_maze_state(self) -> Any:
        """The last observation."""
        return self._state

    def get_renderer(self) -> Renderer | None:
        """A renderer where the env renders RGB frames."""
        return GymRenderer(self.env) if getattr(self.env, "render_mode", None) == "rgb_array" else None

    def close(self) -> None:
        """Close the Gymnasium env."""
        self.env.close()


def _headless_sdl() -> None:
    """On a machine without a display, let pygame (Gymnasium's classic-control renderer) draw off-screen without
    complaining: ``rgb_array`` frames need no window, and SDL's default driver printed "error: XDG_RUNTIME_DIR is
    invalid or not set" on the first render. A display, or an SDL driver the user chose, is left alone."""
    import os
    import sys

    if sys.platform.startswith("linux") and not any(os.environ.get(k) for k in ("DISPLAY", "WAYLAND_DISPLAY",
                                                                                  "SDL_VIDEODRIVER")):
        os.environ["SDL_VIDEODRIVER"] = "dummy"


class GymMazeEnv(MazeEnv):
    """Any Gymnasium env (an id string or an instance) as a MazeEnv with dict spaces under policy key 0.

    :param env: a registered env id such as ``"CartPole-v1"`` or a ``gymnasium.Env`` instance.
    :param render_mode: render mode for env ids; ``"rgb_array"`` enables the renderer.
    :param check_spaces: check actions and observations against their spaces (see :class:`MazeEnv`).
    :param observation_bounds: ``warn`` (default): an observation outside its declared Box bounds warns once per
        key with the value and is used as it is, as Gymnasium's own checker does (third-party envs such as
        LunarLander-v3 leave their bounds by a little); ``error`` raises instead.
    :param make_kwargs: further keyword arguments for ``gymnasium.make``.
    """

    def __init__(self, env: str | gym.Env, render_mode: str | None = "rgb_array", check_spaces: bool = True,
                 observation_bounds: str = "warn", **make_kwargs: Any):
        if isinstance(env, str):
            try:
                spec = gym.spec(env)
            except gym.error.Error as err:
                known = sorted(k for k in gym.registry if "/" not in k)
                raise ValueError(f"'{env}' is not a registered Gymnasium env ({err}); some registered ids: "
                                 f"{', '.join(known[:30])}") from err
            if render_mode == "rgb_array":
                _headless_sdl()
            env = _make_with_render_mode(spec.id, render_mode, make_kwargs)
        elif not isinstance(env, gym.Env):
            raise TypeError(f"GymMazeEnv takes a Gymnasium env id or gymnasium.Env instance, got {type(env).__name__}")
        self.gym_env = env
        core = GymCoreEnv(env)
        super().__init__(core, {0: GymActionConversion(env.action_space)},
                         {0: GymObservationConversion(env.observation_space)}, check_spaces=check_spaces,
                         observation_bounds=observation_bounds)


def _make_with_render_mode(env_id: str, render_mode: str | None, make_kwargs: dict) -> gym.Env:
    """``gym.make`` with the render mode where the env supports it, else without one."""
    import warnings

    if render_mode is None:
        return gym.make(env_id, **make_kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(env_id, render_mode=render_mode, **make_kwargs)
    if render_mode not in (env.metadata.get("render_modes") or []):
        env.close()
        env = gym.make(env_id, **make_kwargs)
    return env


def make_gym_maze_env(name: str, **kwargs: Any) -> GymMazeEnv:
    """Factory for configs (``_target_: maze_lab.core.wrappers.gym_maze_env.make_gym_maze_env``)."""
    return GymMazeEnv(name, **kwargs)
