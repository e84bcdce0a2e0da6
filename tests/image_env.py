"""An env with pixel observations for the tests: a uint8 image (1 x 6 x 6, channel first) holding one bright pixel,
in the left or the right half; the action names the half (0 left, 1 right) and earns 1 when right. Eight images
per episode (then truncated): a policy that reads the pixels earns 8, a random one about 4."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

SIZE = 6
EPISODE_STEPS = 8


class BrightSideEnv(gym.Env):
    """Which half of the image holds the bright pixel."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (1, SIZE, SIZE), np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self._side = 0
        self._t = 0

    def _image(self) -> np.ndarray:
        self._side = int(self.np_random.integers(2))
        image = np.zeros((1, SIZE, SIZE), np.uint8)
        col = int(self.np_random.integers(SIZE // 2)) + self._side * (SIZE // 2)
        image[0, int(self.np_random.integers(SIZE)), col] = 255
        return image

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._image(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = float(int(action) == self._side)
        self._t += 1
        return self._image(), reward, False, self._t >= EPISODE_STEPS, {}


def make_env() -> Any:
    """The env as maze-lab trains it."""
    from maze_lab import GymMazeEnv

    return GymMazeEnv(BrightSideEnv())


class MissionEnv(BrightSideEnv):
    """The pixel env with MiniGrid's layout: a Dict observation with the image, a direction and a ``mission`` text
    (a Text space), or with ``extra`` given, another entry of that space (a Graph or a Sequence space)."""

    def __init__(self, extra: gym.spaces.Space | None = None) -> None:
        super().__init__()
        self._extra = extra if extra is not None else gym.spaces.Text(max_length=64)
        self.observation_space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (1, SIZE, SIZE), np.uint8),
                                                  "direction": gym.spaces.Discrete(4), "mission": self._extra})

    def _wrap(self, image: np.ndarray) -> dict[str, Any]:
        return {"image": image, "direction": 0, "mission": self._extra.sample()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        image, info = super().reset(seed=seed, options=options)
        return self._wrap(image), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        image, reward, terminated, truncated, info = super().step(action)
        return self._wrap(image), reward, terminated, truncated, info
