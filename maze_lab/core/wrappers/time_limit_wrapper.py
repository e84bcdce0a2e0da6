"""TimeLimitWrapper: ends episodes after a fixed number of full env steps by setting ``truncated``."""

from __future__ import annotations

from typing import Any

from maze_lab.core.env.structured_env import FullStepTracker
from maze_lab.core.wrappers.wrapper import Wrapper


class TimeLimitWrapper(Wrapper):
    """Sets ``truncated`` once an episode has lasted ``max_episode_steps`` env steps (``terminated`` is untouched).

    Steps are full env steps, the env time: the sub-steps of a structured env count once together. The count is
    the env time of the wrapped MazeEnv (full env steps since reset, so steps taken by a RandomResetWrapper below
    count too); envs without an env time are counted by this wrapper, by the same rule (a full step ends when the
    actors went round, see :class:`FullStepTracker`).

    :param max_episode_steps: the step limit; None or 0 disables it.
    """

    def __init__(self, env: Any, max_episode_steps: int | None = None):
        super().__init__(env)
        self.max_episode_steps: int | None = None
        self.set_max_episode_steps(max_episode_steps)
        self.elapsed_steps: int | None = None
        self._env_time = getattr(env, "get_env_time", None)
        # envs without env time: full steps are told apart by their actors (where the env has actors)
        self._full_steps = FullStepTracker() if self._env_time is None and hasattr(env, "actor_id") else None

    def set_max_episode_steps(self, max_episode_steps: int | None) -> None:
        """Change the step limit (None or 0 disables it)."""
        if max_episode_steps is not None and (not isinstance(max_episode_steps, int) or max_episode_steps < 0):
            raise ValueError(f"max_episode_steps must be a non-negative int or None, got {max_episode_steps!r}")
        self.max_episode_steps = max_episode_steps or None

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Reset the wrapped env and the step count."""
        self.elapsed_steps = 0
        if self._full_steps is not None:
            self._full_steps.reset()
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Step and truncate the episode at the limit."""
        if self.elapsed_steps is None:
            raise RuntimeError("TimeLimitWrapper.step() was called before reset(); call env.reset() first")
        if self._env_time is not None:
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.elapsed_steps = self._env_time()
        elif self._full_steps is not None:
            actor = self.env.actor_id()
            obs, reward, terminated, truncated, info = self.env.step(action)
            if self._full_steps.sub_step_done(actor, self.env.actor_id(), terminated or truncated):
                self.elapsed_steps += 1
        else:
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.elapsed_steps += 1
        if self.max_episode_steps is not None and self.elapsed_steps >= self.max_episode_steps:
            truncated = True
        return obs, reward, terminated, truncated, info
