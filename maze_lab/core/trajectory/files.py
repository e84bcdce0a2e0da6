"""The episode file: a zip archive of JSON (header and one line per step) and ``.npy`` arrays, never a pickle.

``<episode uuid>.trajectory.zip`` holds

- ``episode.json``: format and version, episode id, env and renderer class paths, reset events, final MazeState,
  summary numbers (steps, return) and the table of stacked observation/action arrays;
- ``steps.jsonl``: one JSON object per env step: MazeState, MazeAction, serializable components and the
  sub-steps (actor, reward, terminated/truncated, info, events, row in the stacked arrays);
- ``arrays/*.npy``: observations and actions stacked per policy key and name, and large arrays of states.

Arrays are read with ``allow_pickle=False`` and objects are rebuilt only for allow-listed classes (see
:mod:`maze_lab.core.trajectory.serialization`), so loading a file never runs code the file names.
"""

from __future__ import annotations

import json
import os
import time
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from maze_lab.core.env.structured_env import ActorID
from maze_lab.core.trajectory.records import EpisodeRecord, StepRecord, SubStepRecord
from maze_lab.core.trajectory.serialization import ClassAllowList, Decoder

FORMAT = "maze-lab-trajectory"
FORMAT_VERSION = 1
SUFFIX = ".trajectory.zip"
HEADER = "episode.json"
STEPS = "steps.jsonl"


class NotATrajectoryFileError(ValueError):
    """A file is not a maze-lab trajectory file (or one of an unsupported version)."""


class EpisodeData:
    """An episode in its stored form: JSON-safe header and steps plus named arrays.

    The recorder builds it while an episode runs; :meth:`write` stores it and :meth:`decode` turns it into an
    :class:`EpisodeRecord` (which is what :func:`load_episode` does after reading a file).
    """

    def __init__(self, header: dict[str, Any], steps: list[dict[str, Any]], arrays: dict[str, np.ndarray]):
        self.header = header
        self.steps = steps
        self.arrays = arrays

    @property
    def episode_id(self) -> str:
        """The episode's UUID."""
        return self.header["episode_id"]

    def write(self, directory: str | Path) -> Path:
        """Write ``<episode_id>.trajectory.zip`` into ``directory`` (atomically: readers never see half a file)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.episode_id}{SUFFIX}"
        tmp = directory / f".{self.episode_id}.tmp"
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
            zf.writestr(HEADER, json.dumps(self.header))
            zf.writestr(STEPS, "".join(json.dumps(s, separators=(",", ":")) + "\n" for s in self.steps))
            for name, arr in self.arrays.items():
                if arr.dtype.hasobject:
                    raise TypeError(f"array {name!r} has dtype object, which cannot be stored without pickle")
                with zf.open(name, "w") as f:
                    np.lib.format.write_array(f, arr, allow_pickle=False)
        os.replace(tmp, path)
        return path

    @classmethod
    def read(cls, path: str | Path) -> EpisodeData:
        """Read a trajectory file (arrays with ``allow_pickle=False``)."""
        path = Path(path)
        try:
            zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as err:
            raise NotATrajectoryFileError(f"{path} is not a maze-lab trajectory file (expected a zip archive "
                                          f"written by TrajectoryRecordingWrapper): {err}") from err
        with zf:
            names = set(zf.namelist())
            if HEADER not in names or STEPS not in names:
                raise NotATrajectoryFileError(f"{path} is not a maze-lab trajectory file: it lacks {HEADER} or {STEPS}")
            header = json.loads(zf.read(HEADER))
            _check_header(header, path)
            steps = [json.loads(line) for line in zf.read(STEPS).decode("utf-8").splitlines() if line.strip()]
            arrays: dict[str, np.ndarray] = {}
            for name in sorted(names):
                if name.startswith("arrays/") and name.endswith(".npy"):
                    with zf.open(name) as f:
                        arrays[name] = np.lib.format.read_array(f, allow_pickle=False)
        return cls(header, steps, arrays)

    def decode(self, allowed_classes: ClassAllowList | Iterable[str | type] | None = None,
               source: str | None = None) -> EpisodeRecord:
        """The episode as records; objects of classes outside the allow-list stay plain dicts (with a warning)."""
        allow = ClassAllowList.of(allowed_classes)
        dec = Decoder(allow, self._array, source or f"episode {self.episode_id}")
        tables: dict[tuple[str, str], dict[str, np.ndarray]] = {}
        for entry in self.header.get("arrays", []):
            tables.setdefault((entry["kind"], entry["key"]), {})[entry["name"]] = self._array(entry["member"])
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
        return EpisodeRecord(episode_id=h["episode_id"], steps=steps, env=h.get("env"), renderer=h.get("renderer"),
                             final_maze_state=dec.decode(h.get("final_maze_state")),
                             reset_events=dec.decode(h.get("reset_events", [])), finished=bool(h.get("finished", True)),
                             metadata={"created": h.get("created"), **dec.decode(h.get("metadata", {}))},
                             refused_classes=dict(dec.refused))

    @staticmethod
    def _values(dec: Decoder, sub: dict, kind: str, table: dict[str, np.ndarray] | None) -> Any:
        if kind in sub:  # stored inline (not stackable)
            return dec.decode(sub[kind])
        row = sub["row"]
        return {name: arr[row] for name, arr in (table or {}).items()}

    def _array(self, member: str) -> np.ndarray:
        try:
            return self.arrays[member]
        except KeyError:
            raise NotATrajectoryFileError(f"episode {self.episode_id}: array member {member!r} is missing") from None


def _check_header(header: Any, path: Path) -> None:
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise NotATrajectoryFileError(f"{path} is not a maze-lab trajectory file (format field "
                                      f"{header.get('format') if isinstance(header, dict) else None!r})")
    version = header.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise NotATrajectoryFileError(f"{path} has trajectory format version {version!r}; this maze-lab reads "
                                      f"versions up to {FORMAT_VERSION}")


def load_episode(path: str | Path, allowed_classes: ClassAllowList | Iterable[str | type] | None = None
                 ) -> EpisodeRecord:
    """Load one episode file.

    :param path: a ``.trajectory.zip`` file.
    :param allowed_classes: classes (or dotted paths, or module prefixes ending in ``.``) whose recorded objects
        are rebuilt besides maze-lab's own; objects of other classes load as plain dicts, with a warning.
    """
    path = Path(path)
    record = EpisodeData.read(path).decode(allowed_classes, source=str(path))
    record.path = path
    return record


def read_episode_header(path: str | Path) -> dict[str, Any]:
    """The header of an episode file (ids, summary numbers, metadata) without reading its steps."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as zf:
            header = json.loads(zf.read(HEADER))
    except (zipfile.BadZipFile, KeyError, OSError) as err:
        raise NotATrajectoryFileError(f"{path} is not a maze-lab trajectory file: {err}") from err
    _check_header(header, path)
    return header


def list_episodes(directory: str | Path) -> list[Path]:
    """Episode files under ``directory`` (searched recursively, so a run directory works), oldest first."""
    directory = Path(directory)
    if not directory.is_dir():
        raise NotADirectoryError(f"{directory} is not a directory (give the directory that holds the "
                                 f"*{SUFFIX} files, or a run directory)")
    files = [p for p in directory.rglob(f"*{SUFFIX}") if p.is_file() and not p.name.startswith(".")]
    return sorted(files, key=lambda p: (p.stat().st_mtime_ns, p.name))


def new_header(episode_id: str, **fields: Any) -> dict[str, Any]:
    """The header of a new episode file."""
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "episode_id": episode_id,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"), **fields}
