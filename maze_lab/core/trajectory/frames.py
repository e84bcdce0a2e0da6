"""Frames recorded with an episode: the pictures an env renders itself (``render_mode="rgb_array"``), kept for envs
whose renderer cannot redraw a recorded state (plain Gymnasium envs).

A frame is stored as a PNG member ``frames/<step>.png`` of the episode file, and the step's JSON line names it
(``"frame": "frames/<step>.png"``); the header says ``{"format": "png", "count": n, "shape": [h, w, c]}``. PNG
keeps a CartPole frame (400 x 600 x 3, 720 KB raw) at a few KB. Reading checks every frame member before anyone
decodes it: its name, its size (:class:`~maze_lab.core.trajectory.files.TrajectoryLimits`), the PNG signature and
the image header (width, height, 8-bit grey/RGB/RGBA, the shape the episode header declares).

Encoding needs only numpy and zlib (no imaging library), so recording works wherever the engine runs.
"""

from __future__ import annotations

import inspect
import re
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

FRAME_DIR = "frames/"
FRAME_MEMBER = re.compile(r"frames/(\d{1,9})\.png")
"""The name every frame member must have."""

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COLOUR_TYPES = {1: 0, 3: 2, 4: 6}  # channels -> PNG colour type (grey, RGB, RGBA)
_CHANNELS = {v: k for k, v in _COLOUR_TYPES.items()}


def frame_member(step: int) -> str:
    """The member name of step ``step``'s frame."""
    return f"{FRAME_DIR}{int(step)}.png"


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(frame: np.ndarray, level: int = 3) -> bytes:
    """PNG bytes of an ``(h, w)``, ``(h, w, 1)``, ``(h, w, 3)`` or ``(h, w, 4)`` uint8 frame.

    Every row uses PNG's "up" filter (difference to the row above): rendered frames repeat rows a lot, so the
    differences are mostly zeros and deflate to little at a low (fast) compression level.
    """
    arr = np.asarray(frame)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or arr.shape[2] not in _COLOUR_TYPES or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"a frame must be an (h, w), (h, w, 3) or (h, w, 4) image array, got shape {arr.shape}")
    if arr.dtype != np.uint8:
        if arr.dtype.kind == "f" and arr.size and float(np.nanmax(arr)) <= 1.0:
            arr = arr * 255.0
        arr = np.clip(np.nan_to_num(arr), 0, 255).astype(np.uint8)
    h, w, c = arr.shape
    rows = np.ascontiguousarray(arr).reshape(h, w * c)
    raw = np.empty((h, w * c + 1), dtype=np.uint8)
    raw[:, 0] = 2  # filter type "up"
    raw[0, 1:] = rows[0]
    np.subtract(rows[1:], rows[:-1], out=raw[1:, 1:])  # uint8 arithmetic wraps modulo 256, as PNG wants
    header = struct.pack(">IIBBBBB", w, h, 8, _COLOUR_TYPES[c], 0, 0, 0)
    return (PNG_SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw.tobytes(), level))
            + _chunk(b"IEND", b""))


def png_shape(data: bytes, where: str = "frame") -> tuple[int, int, int]:
    """``(height, width, channels)`` from a PNG's header, checked to be an 8-bit grey, RGB or RGBA image.

    :param data: the PNG bytes (only the first 33 are needed).
    :param where: names the file and member in the error.
    """
    from maze_lab.core.trajectory.serialization import NotATrajectoryFileError

    if len(data) < 33 or data[:8] != PNG_SIGNATURE:
        raise NotATrajectoryFileError(f"{where} is not a PNG image (it does not start with the PNG signature)")
    length, kind = struct.unpack(">I4s", data[8:16])
    if kind != b"IHDR" or length != 13:
        raise NotATrajectoryFileError(f"{where} is not a valid PNG image (its first chunk is not a 13-byte IHDR)")
    w, h, depth, colour, compression, filtering, interlace = struct.unpack(">IIBBBBB", data[16:29])
    if zlib.crc32(data[12:29]) & 0xFFFFFFFF != struct.unpack(">I", data[29:33])[0]:
        raise NotATrajectoryFileError(f"{where} is damaged (the checksum of its PNG header does not match)")
    if w < 1 or h < 1 or depth != 8 or colour not in _CHANNELS or compression or filtering or interlace > 1:
        raise NotATrajectoryFileError(f"{where} is a PNG of {w}x{h}, bit depth {depth}, colour type {colour}; "
                                      f"frames are 8-bit grey, RGB or RGBA images")
    return h, w, _CHANNELS[colour]


class EpisodeFrames(Mapping):
    """The frames of an episode: step index -> PNG bytes (read from the file when asked, after the checks above).

    :param members: step index -> member name.
    :param read: reads one member's bytes (bounded and checked by the file reader).
    :param shape: ``(height, width, channels)`` of every frame.
    :param dropped: steps without a frame: beyond the recorder's ``max_frames``, or after a frame failed.
    :param error: why the recorder stopped keeping frames, if a frame failed (the env's render raised, returned
        no image, or changed its size).
    """

    def __init__(self, members: Mapping[int, str], read: Callable[[str], bytes], shape: tuple[int, ...],
                 dropped: int = 0, error: str | None = None):
        self.members = dict(sorted(members.items()))
        self._read = read
        self.shape = tuple(int(d) for d in shape)
        self.dropped = int(dropped)
        self.error = error

    @classmethod
    def in_memory(cls, pngs: Mapping[int, bytes], shape: tuple[int, ...], dropped: int = 0) -> EpisodeFrames:
        """Frames held as bytes (an episode decoded in the process that recorded it)."""
        by_member = {frame_member(step): png for step, png in pngs.items()}
        return cls({step: frame_member(step) for step in pngs}, by_member.__getitem__, shape, dropped)

    def __getitem__(self, step: int) -> bytes:
        return self._read(self.members[step])

    def __iter__(self) -> Iterator[int]:
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)

    def png(self, step: int) -> bytes | None:
        """PNG bytes of step ``step``'s frame (the picture before the step's action), None where none was kept."""
        return self[step] if step in self.members else None

    def __repr__(self) -> str:
        return f"EpisodeFrames({len(self)} frames of shape {self.shape}, {self.dropped} dropped)"


def _gym_env(env: Any) -> Any:
    """The Gymnasium env inside a maze-lab env (GymMazeEnv), or None."""
    inner = getattr(env, "unwrapped", env)
    gym_env = getattr(inner, "gym_env", None)
    if gym_env is None:
        gym_env = getattr(getattr(inner, "core_env", None), "env", None)
    return gym_env if hasattr(gym_env, "render") and hasattr(gym_env, "render_mode") else None


def rgb_frame_source(env: Any) -> Callable[[], Any] | None:
    """A function returning the env's current picture as an RGB array, where the env renders them itself: a
    Gymnasium env made with ``render_mode="rgb_array"`` (GymMazeEnv's default). None for other envs."""
    gym_env = _gym_env(env)
    if gym_env is not None and getattr(gym_env, "render_mode", None) == "rgb_array":
        return gym_env.render
    return None


def renderer_redraws_states(renderer: Any) -> bool:
    """Whether a renderer can draw a recorded state: it can be rebuilt from its class with no arguments (a
    renderer that holds a live env, such as GymRenderer, cannot)."""
    if renderer is None:
        return False
    try:
        inspect.signature(type(renderer)).bind()
    except (TypeError, ValueError):
        return False
    return True
