"""DictImageEnv: a small seeded Gymnasium env with a Dict observation (RGB image, vector, category)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class DictImageEnv(gym.Env):
    """Guess the category: each step shows a random RGB image, a feature vector and a category.

    Observation ``{"rgb_image": uint8 (H, W, 3), "feature_vector": float32 (vector_dim,) in [-1, 1],
    "categorical_feature": Discrete(n_categories)}``; action ``Discrete(n_categories)``; reward 1 when the action
    equals the category shown before the step, else 0. Episodes terminate after ``episode_length`` steps.
    Everything is drawn from ``np_random``, so a seeded reset replays the same episode.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, height: int = 12, width: int = 16, vector_dim: int = 3, n_categories: int = 4,
                 episode_length: int = 10, render_mode: str | None = None):
        self.height, self.width = height, width
        self.vector_dim, self.n_categories = vector_dim, n_categories
        self.episode_length = episode_length
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Dict({
            "rgb_image": gym.spaces.Box(0, 255, shape=(height, width, 3), dtype=np.uint8),
            "feature_vector": gym.spaces.Box(-1.0, 1.0, shape=(vector_dim,), dtype=np.float32),
            "categorical_feature": gym.spaces.Discrete(n_categories),
        })
        self.action_space = gym.spaces.Discrete(n_categories)
        self._obs: dict[str, Any] | None = None
        self._t = 0

    def _draw(self) -> dict[str, Any]:
        rng = self.np_random
        return {
            "rgb_image": rng.integers(0, 256, size=(self.height, self.width, 3), dtype=np.uint8),
            "feature_vector": rng.uniform(-1.0, 1.0, size=self.vector_dim).astype(np.float32),
            "categorical_feature": np.int64(rng.integers(self.n_categories)),
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Start an episode."""
        super().reset(seed=seed)
        self._t = 0
        self._obs = self._draw()
        return self._obs, {}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        """Score the guess and show the next observation."""
        if self._obs is None:
            raise RuntimeError("DictImageEnv.step() was called before reset()")
        reward = float(int(action) == int(self._obs["categorical_feature"]))
        self._t += 1
        self._obs = self._draw()
        return self._obs, reward, self._t >= self.episode_length, False, {}

    def render(self) -> np.ndarray | None:
        """The current image."""
        if self.render_mode == "rgb_array" and self._obs is not None:
            return self._obs["rgb_image"].copy()
        return None
