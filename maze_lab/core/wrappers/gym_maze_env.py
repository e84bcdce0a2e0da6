"""Gymnasium envs as MazeEnvs (GymMazeEnv); MazeEnvs as Gymnasium envs (GymnasiumEnvAdapter, re-exported from
``gymnasium_adapter``)."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym

from maze_lab.core.env.core_env import CoreEnv
from maze_lab.core.env.interfaces import ActionConversionInterface, ObservationConversionInterface, Renderer
from maze_lab.core.env.maze_env import MazeEnv
from maze_lab.core.env.space_checks import value_fast_check
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


# the plumbed step and reset (see CoreEnv): GymMazeEnv's fused step and reset do their work
_GYM_CORE_STEP, _GYM_CORE_RESET = GymCoreEnv.step, GymCoreEnv.reset


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

    _gym_fast: tuple | None = None  # the fused step's parts; None: the general MazeEnv step

    @property
    def check_spaces(self) -> bool:
        """Whether every action and observation is checked against its space."""
        return self._check_spaces

    @check_spaces.setter
    def check_spaces(self, value: bool) -> None:
        MazeEnv.check_spaces.fset(self, value)  # type: ignore[attr-defined]
        self._gym_fast = self._fused_step_parts()

    def _fused_step_parts(self) -> tuple | None:
        """What :meth:`step` and :meth:`reset` need to do the work of MazeEnv's, GymCoreEnv's and the CoreEnv
        plumbing's in one call: (core env, action check, (low, high) of a Discrete Gymnasium action space whose check
        is done in place, whether the action space is a Dict, whether the observation space is a Dict, observation
        check, value check of a non-Dict observation). None where this env is not built from those exact parts (a
        subclass's own core env or conversions)."""
        if "_step_fns" not in self.__dict__ or self._flat_key != 0:
            return None
        core = self.core_env
        act, obs = self.action_conversion_dict[0], self.observation_conversion_dict[0]
        if (type(core) is not GymCoreEnv or GymCoreEnv.step is not _GYM_CORE_STEP or "step" in core.__dict__
                or GymCoreEnv.reset is not _GYM_CORE_RESET or "reset" in core.__dict__
                or type(act) is not GymActionConversion or type(obs) is not GymObservationConversion):
            return None
        check_action, _, _, check_obs = self._step_fns[0]
        discrete = None
        if check_action is not None and not act.is_dict and isinstance(act.space()["action"], gym.spaces.Discrete):
            space = act.space()["action"]
            discrete = (int(space.start), int(space.start + space.n))
        check_value = None
        if check_obs is not None and not obs.is_dict:
            check_value = value_fast_check(obs.space()["observation"])
        return core, check_action, discrete, act.is_dict, obs.is_dict, check_obs, check_value

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Reset the Gymnasium env: MazeEnv.reset with GymCoreEnv's reset and the CoreEnv plumbing done in place (see
        :meth:`step`)."""
        fast = self._gym_fast
        if fast is None or self.core_env is not fast[0]:
            return MazeEnv.reset(self, seed=seed, options=options)
        core = fast[0]
        context = core.context
        context.reset_env_episode()
        # the CoreEnv plumbing of a reset (see core_env._plumbed_reset): no events, aggregator, full step or time
        service = context.event_service
        if service._step_events:
            service._step_events = []
        aggregator = core.reward_aggregator
        if aggregator is not None:
            aggregator.reset()
        core._full_step_open = False
        core._tracker().reset()
        context.step_id = 0
        # GymCoreEnv.reset (a seed given to seed() before is used once)
        if seed is None and core._next_seed is not None:
            seed, core._next_seed = core._next_seed, None
        state, _ = core.env.reset(seed=seed, options=options)
        core._state = state
        # MazeEnv.reset's bookkeeping and observation
        self._last_maze_state = state
        self._last_maze_action = None
        self._acted_in_state = None
        obs = state if fast[4] else {"observation": state}
        if self.check_spaces:
            self._reset_obs_checks[0](obs)
            for name, sub in self._reset_other_spaces[0]:
                if not sub.contains(obs[name]):
                    warnings.warn(f"reset(): observation['{name}'] = {obs[name]!r} is outside {sub}", stacklevel=2)
        self._has_reset = True
        self._can_step = True
        self._last_obs = obs
        return obs, {}

    def step(self, action: dict) -> tuple[dict, float, bool, bool, dict]:
        """Step the Gymnasium env: MazeEnv.step with GymCoreEnv's step and the CoreEnv plumbing done in place (the
        same checks, errors, statistics and env time; one call instead of five per step)."""
        fast = self._gym_fast
        if fast is None or not self._can_step or self.core_env is not fast[0]:
            return MazeEnv.step(self, action)
        core, check_action, discrete, action_is_dict, obs_is_dict, check_obs, check_value = fast
        if discrete is not None and action.__class__ is dict and len(action) == 1 and (
                (maze_action := action.get("action")).__class__ is int and discrete[0] <= maze_action < discrete[1]):
            pass  # the action check's common case: a Python int in range
        else:
            if check_action is not None:
                fixed = check_action(action)
                if fixed is not None:  # e.g. a Discrete action given as an integer array of shape (1,)
                    action = fixed
            maze_action = action if action_is_dict else action["action"]
        # the CoreEnv plumbing of a flat env (see core_env._plumbed_step): a new step's events, aggregator and time.
        # Without a reward aggregator (the rule for a Gymnasium env) the full step opens and closes around the
        # Gymnasium step, which cannot touch the env time: nothing to do but advance it
        context = core.context
        service = context.event_service
        if service._step_events:
            service._step_events = []
        plumbed = core._full_step_open or core.reward_aggregator is not None
        if plumbed:
            if not core._full_step_open:
                core.reward_aggregator.reset()
                core._full_step_open = True
            time_before = context.step_id
        state, reward, terminated, truncated, info = core.env.step(maze_action)  # GymCoreEnv.step
        core._state = state
        reward, terminated, truncated = float(reward), bool(terminated), bool(truncated)
        if plumbed and context.step_id != time_before:
            core._manages_env_time = True
            core._full_step_open = False
            core._tracker().reset()
        elif not core._manages_env_time:
            context.step_id += 1  # context.increment_env_step()
            if plumbed:
                core._full_step_open = False
        # MazeEnv.step's bookkeeping and observation
        self._can_step = not (terminated or truncated)
        self._acted_in_state = self._last_maze_state
        self._last_maze_state = state
        self._last_maze_action = maze_action
        obs = state if obs_is_dict else {"observation": state}
        if check_obs is not None and (check_value is None or not check_value(state)):
            check_obs(obs)
        self._last_obs = obs
        return obs, reward, terminated, truncated, info


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
