"""ResizeImgPreProcessor: resizes images by bilinear interpolation."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np

from maze_lab.core.wrappers.observation_preprocessing.preprocessors.base import PreProcessor


class ResizeImgPreProcessor(PreProcessor):
    """Resizes an image to ``target_size`` = (height, width) with bilinear interpolation (half-pixel centres).

    Images are (H, W) or (H, W, C); with ``transpose`` they are channels-first (C, H, W) and the last two axes
    are resized. The dtype is kept (integer images are rounded).

    :param observation_space: a Box image space.
    :param target_size: the new (height, width).
    :param transpose: whether the image is channels-first.
    """

    tag = "resize_img"

    def __init__(self, observation_space: gym.spaces.Box, target_size: Sequence[int], transpose: bool = False):
        super().__init__(observation_space)
        space = self._require_box()
        if len(target_size) != 2 or min(target_size) < 1:
            raise ValueError(f"ResizeImgPreProcessor: target_size must be (height, width), got {target_size}")
        if not 2 <= len(space.shape) <= 3 or (transpose and len(space.shape) != 3):
            raise ValueError(f"ResizeImgPreProcessor: expected an (H, W), (H, W, C) or, with transpose, (C, H, W) "
                             f"image, got shape {space.shape}")
        self.target_size = (int(target_size[0]), int(target_size[1]))
        self.transpose = transpose
        self.axes = (1, 2) if transpose else (0, 1)
        shape = list(space.shape)
        shape[self.axes[0]], shape[self.axes[1]] = self.target_size
        self.shape = tuple(shape)
        self._plans = [_axis_plan(space.shape[a], n) for a, n in zip(self.axes, self.target_size, strict=True)]

    def processed_space(self) -> gym.spaces.Box:
        """The Box of the resized image."""
        space = self.observation_space
        if np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high)):
            low, high = self.process(space.low), self.process(space.high)
        else:
            low = np.full(self.shape, np.min(space.low), dtype=space.dtype)
            high = np.full(self.shape, np.max(space.high), dtype=space.dtype)
        return gym.spaces.Box(low=low, high=high, dtype=space.dtype)

    def process(self, observation: np.ndarray) -> np.ndarray:
        """The resized image."""
        out = np.asarray(observation, dtype=np.float64)
        for axis, (i0, i1, w) in zip(self.axes, self._plans, strict=True):
            shape = [1] * out.ndim
            shape[axis] = len(w)
            w = w.reshape(shape)
            out = np.take(out, i0, axis=axis) * (1.0 - w) + np.take(out, i1, axis=axis) * w
        dtype = self.observation_space.dtype
        if np.issubdtype(dtype, np.integer):
            out = np.rint(out)
        return out.astype(dtype)


def _axis_plan(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source indices and weights of bilinear interpolation along one axis."""
    src = np.clip((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0.0, n_in - 1)
    i0 = np.floor(src).astype(np.int64)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, src - i0
