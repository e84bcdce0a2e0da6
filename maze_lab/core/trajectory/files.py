"""The episode file: a zip archive of JSON (header and one line per step) and ``.npy`` arrays, never a pickle.

``<episode uuid>.trajectory.zip`` holds

- ``episode.json``: format and version, episode id, env and renderer class paths, reset events, final MazeState,
  summary numbers (steps, return) and the table of stacked observation/action arrays;
- ``steps.jsonl``: one JSON object per env step: MazeState, MazeAction, serializable components and the
  sub-steps (actor, reward, terminated/truncated, info, events, row in the stacked arrays);
- ``arrays/*.npy``: observations and actions stacked per policy key and name, and large arrays of states;
- ``frames/<step>.png`` (optional): the env's own picture before each step, for envs whose renderer cannot redraw
  a recorded state (see :mod:`maze_lab.core.trajectory.frames`).

Arrays are read without pickle and objects are rebuilt only for allow-listed classes (see
:mod:`maze_lab.core.trajectory.serialization`), so loading a file never runs code the file names. Reading is
bounded (:class:`TrajectoryLimits`): every member's declared size is checked before it is decompressed (the zip
reader never returns more than the declared size), ``steps.jsonl`` is streamed line by line, and ``.npy``
members are read only when a value refers to them, after their dtype and shape were checked against the member.
Frame members are checked when the file is opened (name, size, count, PNG header and image size) and their bytes
are read when a frame is shown.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import stat
import time
import warnings
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from maze_lab.core.env.structured_env import ActorID
from maze_lab.core.trajectory.frames import FRAME_DIR, FRAME_MEMBER, EpisodeFrames, png_shape
from maze_lab.core.trajectory.records import EpisodeRecord, StepRecord, SubStepRecord
from maze_lab.core.trajectory.serialization import (
    ClassAllowList,
    Decoder,
    NotATrajectoryFileError,
    checked_array_dtype,
    checked_shape,
)
from maze_lab.core.utils.atomic import write_atomic
from maze_lab.core.utils.safe_files import UnsafeFileError, check_inside, file_kind, open_regular

FORMAT = "maze-lab-trajectory"
FORMAT_VERSION = 1
SUFFIX = ".trajectory.zip"
HEADER = "episode.json"
STEPS = "steps.jsonl"


class TrajectoryTooLargeError(NotATrajectoryFileError):
    """A member of a trajectory file is larger than the reading limits allow (see :class:`TrajectoryLimits`)."""


class TrajectoryWriteError(OSError):
    """An episode file could not be written (a full disk, no permission); the episodes written before are intact and
    no part of this one (nor a temporary file) is left."""


MiB = 1 << 20


@dataclass(frozen=True)
class TrajectoryLimits:
    """Upper bounds for reading one trajectory file; raise them for episodes that really are that large.

    :param max_json_bytes: the uncompressed size of ``episode.json`` and of ``steps.jsonl`` (each).
    :param max_line_bytes: one line (one env step) of ``steps.jsonl``.
    :param max_array_bytes: one ``.npy`` member, and one array written inline in the JSON.
    :param max_total_bytes: all members of the file together, uncompressed.
    :param max_frame_bytes: one recorded frame (a ``frames/<step>.png`` member).
    :param max_frames: the number of frame members of one file.
    :param max_frame_pixels: width times height of one frame, checked in its PNG header before it is decoded.
    """

    max_json_bytes: int = 64 * MiB
    max_line_bytes: int = 16 * MiB
    max_array_bytes: int = 512 * MiB
    max_total_bytes: int = 2048 * MiB
    max_frame_bytes: int = 8 * MiB
    max_frames: int = 100_000
    max_frame_pixels: int = 4096 * 4096


DEFAULT_LIMITS = TrajectoryLimits()
"""The limits used when a reader is given none."""


class EpisodeData:
    """An episode in its stored form: JSON-safe header and steps plus named arrays.

    The recorder builds it while an episode runs; :meth:`write` stores it and :meth:`decode` turns it into an
    :class:`EpisodeRecord` (which is what :func:`load_episode` does after reading a file).

    :param frames: PNG bytes of recorded frames by member name (``frames/<step>.png``); steps name theirs.
    """

    def __init__(self, header: dict[str, Any], steps: list[dict[str, Any]], arrays: Mapping[str, np.ndarray],
                 frames: Mapping[str, bytes] | None = None):
        self.header = header
        self.steps = steps
        self.arrays = arrays
        self.frames: Mapping[str, bytes] = frames if frames is not None else {}

    @property
    def episode_id(self) -> str:
        """The episode's UUID."""
        return self.header["episode_id"]

    def write(self, directory: str | Path) -> Path:
        """Write ``<episode_id>.trajectory.zip`` into ``directory`` (atomically: readers never see half a file)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.episode_id}{SUFFIX}"
        buffer = io.BytesIO()  # built in memory: a process killed while writing leaves no half file behind
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
            zf.writestr(HEADER, json.dumps(self.header))
            zf.writestr(STEPS, "".join(json.dumps(s, separators=(",", ":")) + "\n" for s in self.steps))
            for name, arr in self.arrays.items():
                if arr.dtype.hasobject:
                    raise TypeError(f"array {name!r} has dtype object, which cannot be stored without pickle")
                with zf.open(name, "w") as f:
                    np.lib.format.write_array(f, arr, allow_pickle=False)
            for name, png in self.frames.items():  # PNG is compressed already: stored as is
                zf.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), png,
                            compress_type=zipfile.ZIP_STORED)
        try:
            write_atomic(path, buffer.getbuffer())  # all or nothing: no part of it, and no temporary file, is left
        except OSError as err:
            raise TrajectoryWriteError(err.errno, f"could not write the episode {path.name} into {directory}: "
                                                  f"{err.strerror or err}; the episodes written there before are "
                                                  f"intact") from err
        return path

    @classmethod
    def read(cls, path: str | Path, limits: TrajectoryLimits | None = None) -> EpisodeData:
        """Read a trajectory file: header and steps now, ``.npy`` arrays lazily when a value needs them."""
        path = Path(path)
        limits = limits or DEFAULT_LIMITS
        with _open_zip(path) as zf:
            infos = _checked_members(zf, path, limits)
            header = _read_json_member(zf, infos[HEADER], path, limits)
            _check_header(header, path)
            steps = list(_stream_steps(zf, infos[STEPS], path, limits))
            frames = _checked_frames(zf, infos, header, path, limits)
        members = {name: info for name, info in infos.items() if name.startswith("arrays/") and name.endswith(".npy")}
        return cls(header, steps, LazyArrays(path, members, limits), frames)

    def decode(self, allowed_classes: ClassAllowList | Iterable[str | type] | None = None,
               source: str | None = None, warn: bool = True) -> EpisodeRecord:
        """The episode as records; objects of classes outside the allow-list stay plain dicts (with a warning where
        ``warn``; the record's ``refused_classes`` lists them either way)."""
        allow = ClassAllowList.of(allowed_classes)
        dec = Decoder(allow, self._array, source or f"episode {self.episode_id}", warn=warn)
        tables: dict[tuple[str, str], dict[str, str]] = {}  # names of members, read when a step refers to them
        for entry in self.header.get("arrays", []):
            tables.setdefault((entry["kind"], entry["key"]), {})[entry["name"]] = entry["member"]
        steps: list[StepRecord] = []
        for s in self.steps:
            substeps = []
            for sub in s["substeps"]:
                key = dec.decode(sub["actor"][0])
                table_key = json.dumps(sub["actor"][0])
                substeps.append(SubStepRecord(
                    actor_id=ActorID(key, int(sub["actor"][1])),
                    observation=self._values(dec, sub, "observation", tables.get(("observation", table_key))),
                    action=self._values(dec, sub, "action", tables.get(("action", table_key))),
                    reward=dec.decode(sub["reward"]), terminated=bool(sub["terminated"]),
                    truncated=bool(sub["truncated"]), info=dec.decode(sub.get("info", {})),
                    events=dec.decode(sub.get("events", []))))
            steps.append(StepRecord(index=int(s["index"]), maze_state=dec.decode(s.get("maze_state")),
                                    maze_action=dec.decode(s.get("maze_action")), substeps=substeps,
                                    serializable_components=dec.decode(s.get("components", {}))))
        h = self.header
        frames = self._frames(source or f"episode {self.episode_id}")
        return EpisodeRecord(episode_id=h["episode_id"], steps=steps, env=h.get("env"), renderer=h.get("renderer"),
                             final_maze_state=dec.decode(h.get("final_maze_state")),
                             reset_events=dec.decode(h.get("reset_events", [])), finished=bool(h.get("finished", True)),
                             metadata={"created": h.get("created"), **dec.decode(h.get("metadata", {}))},
                             refused_classes=dict(dec.refused), frames=frames)

    def _frames(self, source: str) -> EpisodeFrames | None:
        """The recorded frames, by step index (None where the episode has none)."""
        members: dict[int, str] = {}
        for s in self.steps:
            name = s.get("frame")
            if name is None:
                continue
            if not isinstance(name, str) or name not in self.frames:
                raise NotATrajectoryFileError(f"{source}: step {s.get('index')} names frame member {name!r}, which "
                                              f"the file does not hold")
            members[int(s["index"])] = name
        info = self.header.get("frames")
        if not members and not info:
            return None
        shape = _frames_shape(info, source)
        dropped = info.get("dropped", 0)
        if not isinstance(dropped, int) or isinstance(dropped, bool) or dropped < 0:
            raise NotATrajectoryFileError(f"{source}: the header's frames 'dropped' {dropped!r} is not a count")
        error = info.get("error")
        error = error[:500] if isinstance(error, str) else None
        return EpisodeFrames(members, self.frames.__getitem__, shape, dropped=dropped, error=error)

    def _values(self, dec: Decoder, sub: dict, kind: str, table: dict[str, str] | None) -> Any:
        if kind in sub:  # stored inline (not stackable)
            return dec.decode(sub[kind])
        row = sub["row"]
        return {name: self._array(member)[row] for name, member in (table or {}).items()}

    def _array(self, member: str) -> np.ndarray:
        try:
            return self.arrays[member]
        except KeyError:
            raise NotATrajectoryFileError(f"episode {self.episode_id}: array member {member!r} is missing") from None


def _frames_shape(info: Any, where: str) -> tuple[int, int, int]:
    """The ``shape`` of the header's ``frames`` entry, checked."""
    shape = info.get("shape") if isinstance(info, dict) else None
    if not isinstance(info, dict) or info.get("format") != "png" or not isinstance(shape, list) or len(shape) != 3:
        raise NotATrajectoryFileError(f"{where}: the header's 'frames' entry {repr(info)[:200]} is not "
                                      f"{{'format': 'png', 'count': n, 'shape': [height, width, channels]}}")
    h, w, c = checked_shape(shape, f"{where}: frames")
    if not (h and w and c in (1, 3, 4)):
        raise NotATrajectoryFileError(f"{where}: frames of shape {shape} are not images (expected [h, w, 1|3|4])")
    return h, w, c


def _checked_frames(zf: zipfile.ZipFile, infos: dict[str, zipfile.ZipInfo], header: dict[str, Any], path: Path,
                    limits: TrajectoryLimits) -> LazyFrames:
    """The frame members after checking their names, number, sizes (already limited) and PNG headers."""
    names = [name for name in infos if name.startswith(FRAME_DIR)]
    if not names:
        return LazyFrames(path, {})
    if len(names) > limits.max_frames:
        raise TrajectoryTooLargeError(f"{path}: it holds {len(names):,} frame members, more than the limit of "
                                      f"{limits.max_frames:,} (TrajectoryLimits.max_frames); the file was not read.")
    shape = _frames_shape(header.get("frames"), str(path))
    for name in names:
        where = f"{path}: member {name!r}"
        if not FRAME_MEMBER.fullmatch(name):
            raise NotATrajectoryFileError(f"{where} is not a frame member (frame members are named "
                                          f"frames/<step>.png)")
        try:
            with zf.open(infos[name]) as f:
                head = f.read(33)
        except (zipfile.BadZipFile, OSError, ValueError) as err:
            raise NotATrajectoryFileError(f"{where} cannot be read: {err}") from err
        h, w, c = png_shape(head, where)
        if h * w > limits.max_frame_pixels:
            raise TrajectoryTooLargeError(f"{where} is a {w}x{h} image, more than the limit of "
                                          f"{limits.max_frame_pixels:,} pixels (TrajectoryLimits.max_frame_pixels); "
                                          f"the file was not read.")
        if (h, w, c) != shape:
            raise NotATrajectoryFileError(f"{where} is a {h}x{w}x{c} image but the header declares frames of "
                                          f"shape {list(shape)}")
    return LazyFrames(path, {name: infos[name] for name in names})


def _check_header(header: Any, path: Path) -> None:
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise NotATrajectoryFileError(f"{path} is not a maze-lab trajectory file (format field "
                                      f"{header.get('format') if isinstance(header, dict) else None!r})")
    version = header.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise NotATrajectoryFileError(f"{path} has trajectory format version {version!r}; this maze-lab reads "
                                      f"versions up to {FORMAT_VERSION}")


def load_episode(path: str | Path, allowed_classes: ClassAllowList | Iterable[str | type] | None = None,
                 limits: TrajectoryLimits | None = None, warn: bool = True) -> EpisodeRecord:
    """Load one episode file.

    :param path: a ``.trajectory.zip`` file.
    :param allowed_classes: classes (or dotted paths, or module prefixes ending in ``.``) whose recorded objects
        are rebuilt besides maze-lab's own; objects of other classes load as plain dicts, with a warning.
    :param limits: size limits for reading (default :data:`DEFAULT_LIMITS`); a larger member is refused.
    :param warn: warn for each class not rebuilt (False: only ``record.refused_classes`` lists them).
    """
    path = Path(path)
    record = EpisodeData.read(path, limits).decode(allowed_classes, source=str(path), warn=warn)
    record.path = path
    return record


def read_episode_header(path: str | Path) -> dict[str, Any]:
    """The header of an episode file (ids, summary numbers, metadata) without reading its steps."""
    path = Path(path)
    limits = DEFAULT_LIMITS
    with _open_zip(path) as zf:
        infos = _checked_members(zf, path, limits)
        header = _read_json_member(zf, infos[HEADER], path, limits)
    _check_header(header, path)
    return header


def list_episodes(directory: str | Path) -> list[Path]:
    """Episode files under ``directory`` (searched recursively, so a run directory works), oldest first.

    Only regular files inside ``directory`` are listed: an episode file that is a FIFO, a device, a socket or a
    symlink leading out of ``directory`` is left out with a warning naming it (nothing is opened to find out)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise NotADirectoryError(f"{directory} is not a directory (give the directory that holds the "
                                 f"*{SUFFIX} files, or a run directory)")
    found: list[tuple[int, str, Path]] = []
    for path in directory.rglob(f"*{SUFFIX}"):
        if path.name.startswith("."):
            continue
        try:
            info = os.stat(path)
        except FileNotFoundError:
            if path.is_symlink():
                warnings.warn(f"{path} is a symlink to {os.readlink(path)}, which does not exist; it was left out "
                              f"of the episodes of {directory}", stacklevel=2)
            continue  # else deleted meanwhile
        if stat.S_ISDIR(info.st_mode):
            continue
        try:
            if not stat.S_ISREG(info.st_mode):
                raise UnsafeFileError(f"{path} is a {file_kind(info.st_mode)}, not a regular file")
            check_inside(path, directory, what="trajectory file")
        except UnsafeFileError as err:
            warnings.warn(f"{err}; it was left out of the episodes of {directory}", stacklevel=2)
            continue
        found.append((info.st_mtime_ns, path.name, path))
    return [path for _, _, path in sorted(found)]


def new_header(episode_id: str, **fields: Any) -> dict[str, Any]:
    """The header of a new episode file."""
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "episode_id": episode_id,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"), **fields}


# --- bounded reading ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _open_zip(path: Path) -> Iterator[zipfile.ZipFile]:
    """The episode file as a zip archive; a FIFO, a device or a socket is refused without blocking (see
    :func:`maze_lab.core.utils.safe_files.open_regular`), as is anything that is not a zip archive."""
    try:
        fh = open_regular(path, what="trajectory file")
    except UnsafeFileError as err:
        raise NotATrajectoryFileError(str(err)) from None
    except OSError as err:
        raise NotATrajectoryFileError(f"{path} is not a maze-lab trajectory file (expected a zip archive "
                                      f"written by TrajectoryRecordingWrapper): {err}") from err
    with fh:
        try:
            zf = zipfile.ZipFile(fh)
        except (zipfile.BadZipFile, OSError) as err:
            raise NotATrajectoryFileError(f"{path} is not a maze-lab trajectory file (expected a zip archive "
                                          f"written by TrajectoryRecordingWrapper): {err}") from err
        with zf:
            yield zf


def _too_large(path: Path, member: str, size: int, limit: int, field: str) -> TrajectoryTooLargeError:
    return TrajectoryTooLargeError(
        f"{path}: member {member!r} is {size:,} bytes uncompressed, more than the limit of {limit:,} bytes "
        f"(TrajectoryLimits.{field}); it was not read. If the file is trusted and really that large, pass "
        f"limits=TrajectoryLimits({field}=...) to load_episode.")


def _checked_members(zf: zipfile.ZipFile, path: Path, limits: TrajectoryLimits) -> dict[str, zipfile.ZipInfo]:
    """The members by name, after checking their declared sizes (zipfile never inflates past a declared size)."""
    infos = {info.filename: info for info in zf.infolist()}
    if HEADER not in infos or STEPS not in infos:
        raise NotATrajectoryFileError(f"{path} is not a maze-lab trajectory file: it lacks {HEADER} or {STEPS}")
    total = 0
    for name, info in infos.items():
        if name in (HEADER, STEPS):
            limit, field = limits.max_json_bytes, "max_json_bytes"
        elif name.startswith(FRAME_DIR):
            limit, field = limits.max_frame_bytes, "max_frame_bytes"
        else:
            limit, field = limits.max_array_bytes, "max_array_bytes"
        if info.file_size > limit:
            raise _too_large(path, name, info.file_size, limit, field)
        total += info.file_size
    if total > limits.max_total_bytes:
        raise TrajectoryTooLargeError(
            f"{path}: its members are {total:,} bytes uncompressed together, more than the limit of "
            f"{limits.max_total_bytes:,} bytes (TrajectoryLimits.max_total_bytes); the file was not read.")
    return infos


def _read_json_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path, limits: TrajectoryLimits) -> Any:
    try:
        return json.loads(zf.read(info))
    except (ValueError, zipfile.BadZipFile, OSError) as err:
        raise NotATrajectoryFileError(f"{path}: member {info.filename!r} is not valid JSON: {err}") from err


def _stream_steps(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path, limits: TrajectoryLimits
                  ) -> Iterator[dict[str, Any]]:
    """The steps of ``steps.jsonl``, one line at a time; a line longer than the limit is refused."""
    try:
        with zf.open(info) as raw:
            stream = io.BufferedReader(raw)
            number = 0
            while True:
                line = stream.readline(limits.max_line_bytes + 1)
                if not line:
                    return
                number += 1
                if len(line) > limits.max_line_bytes:
                    raise TrajectoryTooLargeError(
                        f"{path}: member {STEPS!r} line {number} is longer than the limit of "
                        f"{limits.max_line_bytes:,} bytes (TrajectoryLimits.max_line_bytes); the file was not read.")
                if line.strip():
                    step = json.loads(line)
                    if not isinstance(step, dict):
                        raise ValueError(f"expected a JSON object, got {type(step).__name__}")
                    yield step
    except (ValueError, zipfile.BadZipFile, OSError) as err:
        if isinstance(err, NotATrajectoryFileError):
            raise
        raise NotATrajectoryFileError(f"{path}: member {STEPS!r} is damaged: {err}") from err


def _read_npy(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> np.ndarray:
    """One ``.npy`` member: its header is checked against the member's size before the data is read."""
    where = f"{path}: member {info.filename!r}"
    try:
        with zf.open(info) as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise NotATrajectoryFileError(f"{where}: unsupported .npy version {version}")
            dtype = checked_array_dtype(dtype.str, where)
            shape = checked_shape(list(shape), where)
            nbytes = math.prod(shape) * dtype.itemsize
            remaining = info.file_size - f.tell()
            if nbytes != remaining:
                raise NotATrajectoryFileError(f"{where}: its header declares {shape} of {dtype.str} ({nbytes:,} "
                                              f"bytes) but the member holds {remaining:,} bytes of data")
            data = f.read(nbytes)
    except (ValueError, zipfile.BadZipFile, OSError) as err:
        if isinstance(err, NotATrajectoryFileError):
            raise
        raise NotATrajectoryFileError(f"{where} is not a valid .npy array: {err}") from err
    if len(data) != nbytes:
        raise NotATrajectoryFileError(f"{where} is truncated")
    arr = np.frombuffer(data, dtype=dtype)
    return arr.reshape(shape, order="F" if fortran else "C").copy()


class LazyArrays(Mapping):
    """The ``.npy`` members of a trajectory file, each read (and checked) the first time it is used."""

    def __init__(self, path: Path, members: dict[str, zipfile.ZipInfo], limits: TrajectoryLimits):
        self.path = path
        self.members = members
        self.limits = limits
        self._cache: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._cache:
            info = self.members[name]  # KeyError for a missing member, as for a dict
            with _open_zip(self.path) as zf:
                self._cache[name] = _read_npy(zf, info, self.path)
        return self._cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)

    @property
    def loaded(self) -> list[str]:
        """The members read so far."""
        return list(self._cache)


class LazyFrames(Mapping):
    """The frame members of a trajectory file (checked when the file was opened), read when a frame is shown."""

    def __init__(self, path: Path, members: dict[str, zipfile.ZipInfo]):
        self.path = path
        self.members = members

    def __getitem__(self, name: str) -> bytes:
        info = self.members[name]  # KeyError for a missing member, as for a dict
        with _open_zip(self.path) as zf:
            try:
                data = zf.read(info)  # at most the declared size, which was checked against the limits
            except (zipfile.BadZipFile, OSError, ValueError) as err:
                raise NotATrajectoryFileError(f"{self.path}: member {name!r} cannot be read: {err}") from err
        return data

    def __contains__(self, name: object) -> bool:
        return name in self.members  # without reading the member

    def __iter__(self) -> Iterator[str]:
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)
