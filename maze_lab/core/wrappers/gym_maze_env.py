"""Gymnasium envs as MazeEnvs (GymMazeEnv) and MazeEnvs as Gymnasium envs (GymnasiumEnvAdapter)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from maze_lab.core.env.core_env import CoreEnv
from maze_lab.core.env.interfaces import ActionConversionInterface, ObservationConversionInterface, Renderer
from maze_lab.core.env.maze_env import MazeEnv
from maze_lab.core.env.structured_env import StepKey


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


class GymMazeEnv(MazeEnv):
    """Any Gymnasium env (an id string or an instance) as a MazeEnv with dict spaces under policy key 0.

    :param env: a registered env id such as ``"CartPole-v1"`` or a ``gymnasium.Env`` instance.
    :param render_mode: render mode for env ids; ``"rgb_array"`` enables the renderer.
    :param make_kwargs: further keyword arguments for ``gymnasium.make``.
    """

    def __init__(self, env: str | gym.Env, render_mode: str | None = "rgb_array", check_spaces: bool = True,
                 **make_kwargs: Any):
        if isinstance(env, str):
            try:
                spec = gym.spec(env)
            except gym.error.Error as err:
                known = sorted(k for k in gym.registry if "/" not in k)
                raise ValueError(f"'{env}' is not a registered Gymnasium env ({err}); some registered ids: "
                                 f"{', '.join(known[:30])}") from err
            env = _make_with_render_mode(spec.id, render_mode, make_kwargs)
        elif not isinstance(env, gym.Env):
            raise TypeError(f"GymMazeEnv takes a Gymnasium env id or gymnasium.Env instance, got {type(env).__name__}")
        self.gym_env = env
        core = GymCoreEnv(env)
        super().__init__(core, {0: GymActionConversion(env.action_space)},
                         {0: GymObservationConversion(env.observation_space)}, check_spaces=check_spaces)


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


class GymnasiumEnvAdapter(gym.Env):
    """A (structured) maze-lab env as a plain ``gymnasium.Env`` so other frameworks can train on it.

    The observation and action spaces are the union of all policy keys' dict spaces (keys that two policy
    keys declare with different spaces are prefixed ``<step_key>/``); keys the current actor does not use are
    zero-filled, and with several policy keys an ``actor`` entry tells which policy key acts.
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, env: Any, render_mode: str | None = None):
        self.env = env
        self.render_mode = render_mode
        self.step_keys: list[StepKey] = list(env.observation_spaces_dict)
        self._obs_names: dict[StepKey, dict[str, str]] = {}
        self._act_names: dict[StepKey, dict[str, str]] = {}
        obs_spaces = self._merge(env.observation_spaces_dict, self._obs_names)
        act_spaces = self._merge(env.action_spaces_dict, self._act_names)
        if len(self.step_keys) > 1:
            obs_spaces["actor"] = gym.spaces.Discrete(len(self.step_keys))
        self.observation_space = gym.spaces.Dict(obs_spaces)
        self.action_space = gym.spaces.Dict(act_spaces)
        self._zeros = {k: self._zero(s) for k, s in obs_spaces.items()}

    @staticmethod
    def _merge(spaces_dict: dict, names: dict) -> dict[str, gym.spaces.Space]:
        merged: dict[str, gym.spaces.Space] = {}
        owners: dict[str, gym.spaces.Space] = {}
        for key, space in spaces_dict.items():
            for name, sub in space.spaces.items():
                if name in owners and owners[name] != sub:
                    names.setdefault(key, {})[name] = f"{key}/{name}"
                else:
                    owners[name] = sub
                    names.setdefault(key, {})[name] = name
        for key, space in spaces_dict.items():
            for name, sub in space.spaces.items():
                merged[names[key][name]] = sub
        return merged

    @staticmethod
    def _zero(space: gym.spaces.Space) -> Any:
        if isinstance(space, gym.spaces.Box):
            return np.clip(np.zeros(space.shape, dtype=space.dtype), space.low, space.high).astype(space.dtype)
        if isinstance(space, gym.spaces.Discrete):
            return np.int64(space.start)
        if isinstance(space, gym.spaces.MultiBinary):
            return np.zeros(space.shape, dtype=space.dtype)
        if isinstance(space, gym.spaces.MultiDiscrete):
            return np.zeros(space.shape, dtype=space.dtype)
        return space.sample()

    def _to_gym_obs(self, obs: dict) -> dict:
        key = self.env.actor_id().step_key
        # fresh copies: callers (and gymnasium's checker) may keep or modify returned arrays
        out = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in self._zeros.items()}
        names = self._obs_names[key]
        for name, value in obs.items():
            out[names[name]] = value
        if "actor" in out:
            out["actor"] = np.int64(self.step_keys.index(key))
        return out

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Reset the maze-lab env."""
        super().reset(seed=seed)
        obs, info = self.env.reset(seed=seed, options=options)
        return self._to_gym_obs(obs), info

    def step(self, action: dict) -> tuple[dict, float, bool, bool, dict]:
        """Pass the current actor's part of the action to the maze-lab env."""
        key = self.env.actor_id().step_key
        names = self._act_names[key]
        sub = {name: action[full] for name, full in names.items()}
        for name, value in sub.items():
            if isinstance(value, np.ndarray) and value.ndim == 0:
                sub[name] = value.item()
        obs, reward, terminated, truncated, info = self.env.step(sub)
        return self._to_gym_obs(obs), float(reward), bool(terminated), bool(truncated), info

    def render(self) -> np.ndarray | None:
        """RGB frame from the maze-lab env's renderer."""
        return self.env.render() if hasattr(self.env, "render") else None

    def close(self) -> None:
        """Close the maze-lab env."""
        self.env.close()
