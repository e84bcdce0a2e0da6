"""RandomResetWrapper: starts episodes at a random point by taking random actions after reset."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np

from maze_lab.core.wrappers.wrapper import Wrapper


class RandomResetWrapper(Wrapper):
    """After each reset, takes a uniformly drawn number of random actions (between the bounds, both included).

    The number of steps and the actions come from the wrapper's own generator, seeded by ``reset(seed=...)`` or
    ``seed()``, so a seeded reset is reproducible. Should an episode end while skipping, the env is reset once
    more and that fresh observation is returned.

    :param min_skip_steps: fewest steps to skip.
    :param max_skip_steps: most steps to skip.
    """

    def __init__(self, env: Any, min_skip_steps: int = 0, max_skip_steps: int = 100):
        super().__init__(env)
        if not 0 <= min_skip_steps <= max_skip_steps:
            raise ValueError(f"need 0 <= min_skip_steps <= max_skip_steps, got {min_skip_steps} and {max_skip_steps}")
        self.min_skip_steps = int(min_skip_steps)
        self.max_skip_steps = int(max_skip_steps)
        # private copies: sampling must not disturb the generators of the env's own spaces
        self._spaces = copy.deepcopy(dict(env.action_spaces_dict))
        self._rng: np.random.Generator | None = None
        self._warned = False
        self.last_skip_steps = 0

    def _reseed(self, seed: int | None) -> None:
        self._rng = np.random.default_rng(seed)
        for i, space in enumerate(self._spaces.values()):
            space.seed(int(self._rng.integers(2**31 - 1)) + i)

    def seed(self, seed: int | None) -> None:
        """Seed the skipping and the wrapped env."""
        self._reseed(seed)
        self.env.seed(seed)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Reset, then take a random number of random actions."""
        if seed is not None or self._rng is None:
            self._reseed(seed)
        n_skip = int(self._rng.integers(self.min_skip_steps, self.max_skip_steps + 1))
        obs, info = self.env.reset(seed=seed, options=options)
        self.last_skip_steps = 0
        for _ in range(n_skip):
            action = self._spaces[self.env.actor_id().step_key].sample()
            obs, _, terminated, truncated, info = self.env.step(action)
            self.last_skip_steps += 1
            if terminated or truncated:
                if not self._warned:
                    warnings.warn(f"RandomResetWrapper: the episode ended after {self.last_skip_steps} random steps "
                                  f"(max_skip_steps={self.max_skip_steps}); resetting again", stacklevel=2)
                    self._warned = True
                obs, info = self.env.reset(options=options)
                break
        return obs, info
