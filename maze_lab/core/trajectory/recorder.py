"""TrajectoryRecordingWrapper: records every sub-step of every episode and writes one file per episode."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from maze_lab.core.env.structured_env import ActorID
from maze_lab.core.trajectory.files import EpisodeData, new_header
from maze_lab.core.trajectory.frames import encode_png, frame_member, renderer_redraws_states, rgb_frame_source
from maze_lab.core.trajectory.records import EpisodeRecord
from maze_lab.core.trajectory.serialization import ClassAllowList, Encoder, class_path
from maze_lab.core.wrappers.wrapper import Wrapper


def event_to_dict(event: Any) -> dict[str, Any]:
    """A live event (EventRecord) as a plain dict ``{"topic", "event", "attributes"}``."""
    topic = getattr(event, "interface_class", None)
    method = getattr(event, "interface_method", None)
    return {"topic": getattr(topic, "__name__", str(topic)), "event": getattr(method, "__name__", str(method)),
            "attributes": dict(getattr(event, "attributes", {}) or {})}


def _copy_values(values: Any) -> Any:
    """Own copies of an observation or action (envs and policies may reuse their buffers)."""
    if isinstance(values, dict):
        return {k: np.array(v, copy=True) if _arrayish(v) else v for k, v in values.items()}
    return values


def _arrayish(v: Any) -> bool:
    return isinstance(v, np.ndarray | np.generic | int | float | bool) or (hasattr(v, "__array__")
                                                                          and not isinstance(v, dict))


class EpisodeBuilder:
    """Collects one episode in its stored form while it runs (states and actions are encoded on arrival)."""

    def __init__(self, episode_id: str, header: dict[str, Any]):
        self.episode_id = episode_id
        self.header = header
        self.steps: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._big: dict[str, np.ndarray] = {}
        self.encoder = Encoder(self._store_big)
        # rows of observations and actions per (kind, policy key as JSON)
        self._rows: dict[tuple[str, str], list[Any]] = {}
        self.frames: dict[str, bytes] = {}
        """PNG frames by member name."""
        self.frame_shape: tuple[int, ...] | None = None
        self.frames_dropped = 0
        self.frames_error: str | None = None

    def _store_big(self, arr: np.ndarray) -> str:
        name = f"arrays/x{len(self._big)}.npy"
        self._big[name] = arr.copy()
        return name

    @property
    def step_open(self) -> bool:
        """Whether a step has started and not ended yet."""
        return self._open is not None

    @property
    def n_substeps(self) -> int:
        """Sub-steps recorded so far."""
        return sum(len(s["substeps"]) for s in self.steps) + (len(self._open["substeps"]) if self._open else 0)

    def begin_step(self, maze_state: Any, components: dict[str, Any] | None) -> None:
        """Start an env step in the given state."""
        self._open = {"index": len(self.steps), "maze_state": self.encoder.encode(maze_state),
                      "maze_action": None, "components": self.encoder.encode(components or {}), "substeps": []}

    def add_frame(self, frame: Any, max_frames: int) -> None:
        """Keep the env's picture (an RGB array) as the open step's frame, PNG-encoded; after ``max_frames``
        frames (or after a frame failed) the rest are counted as dropped."""
        assert self._open is not None, "begin_step() first"
        if self.frames_error is not None or len(self.frames) >= max_frames:
            self.frames_dropped += 1
            return
        try:
            if frame is None:
                raise ValueError("the env's render() returned no image (None)")
            arr = np.asarray(frame)
            if arr.ndim == 2:
                arr = arr[:, :, None]
            if self.frame_shape is not None and arr.shape != self.frame_shape:
                raise ValueError(f"frame of shape {arr.shape} after frames of shape {self.frame_shape}")
            png = encode_png(arr)
        except Exception as err:  # noqa: BLE001 - a frame that cannot be kept must not stop the rollout
            self.frames_error = f"{type(err).__name__}: {err}"
            self.frames_dropped += 1
            return
        self.frame_shape = arr.shape
        member = frame_member(self._open["index"])
        self.frames[member] = png
        self._open["frame"] = member

    def add_substep(self, actor: ActorID, observation: Any, action: Any, reward: Any, terminated: bool,
                    truncated: bool, info: Any, events: list[Any]) -> None:
        """Record one actor's turn of the open step."""
        assert self._open is not None, "begin_step() first"
        enc = self.encoder.encode
        key = enc(actor[0])
        table_key = json.dumps(key)
        sub: dict[str, Any] = {"actor": [key, int(actor[1])],
                               "reward": float(reward) if np.ndim(reward) == 0 else enc(np.asarray(reward)),
                               "terminated": bool(terminated), "truncated": bool(truncated),
                               "info": enc(info or {}), "events": [enc(event_to_dict(e)) for e in events]}
        obs_rows = self._rows.setdefault(("observation", table_key), [])
        sub["row"] = len(obs_rows)
        obs_rows.append(observation)
        self._rows.setdefault(("action", table_key), []).append(action)
        self._open["substeps"].append(sub)

    def end_step(self, maze_action: Any) -> None:
        """Close the open step with the MazeAction the env applied (None if it did not act)."""
        if self._open is None:
            return
        self._open["maze_action"] = self.encoder.encode(maze_action)
        self.steps.append(self._open)
        self._open = None

    def finish(self, final_maze_state: Any, finished: bool) -> EpisodeData:
        """The episode in stored form (closes an open step)."""
        self.end_step(None)
        arrays: dict[str, np.ndarray] = {}
        table: list[dict[str, Any]] = []
        inline: set[str] = set()  # policy keys whose observations or actions cannot be stacked
        keys = list(dict.fromkeys(key for _, key in self._rows))
        for key in keys:
            stacked = [_stack_rows(self._rows[(kind, key)]) for kind in ("observation", "action")]
            if any(s is None for s in stacked):
                inline.add(key)
                continue
            for kind, per_name in zip(("observation", "action"), stacked, strict=True):
                for name, arr in per_name.items():
                    member = f"arrays/{len(table)}.npy"
                    arrays[member] = arr
                    table.append({"kind": kind, "key": key, "name": name, "member": member})
        steps = []
        for s in self.steps:
            subs = []
            for sub in s["substeps"]:
                key = json.dumps(sub["actor"][0])
                if key in inline:
                    sub = {**sub, "observation": self.encoder.encode(self._rows[("observation", key)][sub["row"]]),
                           "action": self.encoder.encode(self._rows[("action", key)][sub["row"]])}
                subs.append(sub)
            steps.append({**s, "substeps": subs})
        final = self.encoder.encode(final_maze_state)
        arrays.update(self._big)  # after all encoding: inline rows and the final state may add large arrays
        rewards = [sub["reward"] for s in steps for sub in s["substeps"]]
        total = float(sum(r for r in rewards if isinstance(r, float | int)))
        header = {**self.header, "finished": bool(finished), "n_steps": len(steps),
                  "n_substeps": sum(len(s["substeps"]) for s in steps), "total_reward": total,
                  "final_maze_state": final, "arrays": table}
        if self.frames or self.frames_dropped:
            shape = list(self.frame_shape) if self.frame_shape is not None else [1, 1, 3]
            header["frames"] = {"format": "png", "count": len(self.frames), "shape": shape,
                                "dropped": self.frames_dropped}
            if self.frames_error:
                header["frames"]["error"] = self.frames_error
        return EpisodeData(header, steps, arrays, dict(self.frames))


def _stack_rows(rows: list[Any]) -> dict[str, np.ndarray] | None:
    """Stack a list of dict observations/actions per name; None where they cannot be stacked losslessly."""
    if not rows or not all(isinstance(r, dict) for r in rows):
        return None
    names = list(rows[0])
    if any(list(r) != names for r in rows):
        return None
    out = {}
    for name in names:
        try:
            values = [np.asarray(r[name]) for r in rows]
        except Exception:  # noqa: BLE001 - anything numpy cannot take goes inline
            return None
        first = values[0]
        if first.dtype.kind not in "biufc" or any(v.shape != first.shape or v.dtype != first.dtype for v in values):
            return None
        out[name] = np.stack(values)
    return out


class TrajectoryRecordingWrapper(Wrapper):
    """Records every sub-step of every episode; writes ``<uuid>.trajectory.zip`` into a directory when an
    episode ends (an episode cut off by ``reset()`` or ``close()`` is written too, marked unfinished).

    Put it on top of the wrapper stack so that it records what the policy observed and did. Per sub-step it
    keeps actor, observation, action, reward, terminated/truncated, info and events; per env step the MazeState
    the step started in and the MazeAction the env applied; per episode the env's and renderer's class paths.

    :param env: the env to record.
    :param trajectory_dir: where episode files go; None keeps episodes in memory only (see ``keep_episodes``).
    :param keep_episodes: also keep every finished episode as an :class:`EpisodeRecord` in ``self.episodes``.
    :param metadata: extra information stored with every episode (policy name, experiment, ...).
    :param record_frames: keep the env's own picture of every step (``render()`` of a Gymnasium env made with
        ``render_mode="rgb_array"``, GymMazeEnv's default) as a PNG in the episode file, so that a viewer can show
        envs whose renderer cannot redraw a recorded state. None (the default) records them exactly there: the env
        renders RGB frames and its renderer cannot be rebuilt to draw recorded states (plain Gymnasium envs, not
        Cutting-2D). True insists (an env without RGB frames is an error), False never records them. A frame
        costs the env's own render plus a PNG encoding per env step, and a few KB of file.
    :param max_frames: frames kept per episode at most; later steps have none (the header counts them as dropped).
    """

    def __init__(self, env: Any, trajectory_dir: str | Path | None = "trajectory_data", keep_episodes: bool = False,
                 metadata: dict[str, Any] | None = None, record_frames: bool | None = None, max_frames: int = 2000):
        super().__init__(env)
        self.trajectory_dir = None if trajectory_dir is None else Path(trajectory_dir)
        self.keep_episodes = keep_episodes
        self.metadata = dict(metadata or {})
        self.episodes: list[EpisodeRecord] = []
        """Finished episodes (only with ``keep_episodes=True``)."""
        self.written: list[Path] = []
        """Files written, in order."""
        self.n_episodes = 0
        self._builder: EpisodeBuilder | None = None
        self._last_data: EpisodeData | None = None
        self._last_classes: set[str] = set()
        self._obs: Any = None
        self._env_time = 0
        self._ev_list: list | None = None
        self._ev_n = 0
        inner = self.unwrapped
        renderer = self._call("get_renderer")
        self._static_header = {
            "env": class_path(type(inner)),
            "renderer": None if renderer is None else class_path(type(renderer)),
        }
        self._static_metadata: dict[str, Any] = {"wrappers": self._wrapper_names()}
        spec = getattr(getattr(inner, "gym_env", None), "spec", None)
        if spec is not None:
            self._static_metadata["gym_env_id"] = spec.id
        self.max_frames = int(max_frames)
        source = rgb_frame_source(inner)
        if record_frames is None:
            record_frames = source is not None and not renderer_redraws_states(renderer)
        elif record_frames and source is None:
            raise ValueError(f"record_frames=True, but {type(inner).__name__} does not render RGB frames itself; "
                             f"frames come from a Gymnasium env made with render_mode='rgb_array' (e.g. "
                             f"GymMazeEnv('CartPole-v1', render_mode='rgb_array')). Envs with a renderer that "
                             f"draws recorded states (Cutting-2D) need no frames: pass record_frames=None or False.")
        self._frame_source = source if record_frames else None
        """Called before each env step for the picture of the state the step starts in (None: no frames)."""

    def _wrapper_names(self) -> list[str]:
        names, env = [], self.env
        while isinstance(env, Wrapper):
            names.append(type(env).__name__)
            env = env.env
        return names

    def _call(self, name: str, *args: Any) -> Any:
        fn = getattr(self.env, name, None)
        return fn(*args) if callable(fn) else None

    def _time(self) -> int | None:
        return self._call("get_env_time")

    def _new_events(self) -> list[Any]:
        events = self._call("get_step_events")
        if events is None:
            return []
        if events is not self._ev_list:
            self._ev_list, self._ev_n = events, 0
        new = events[self._ev_n:]
        self._ev_n = len(events)
        return list(new)

    # --- env API --------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Write an unfinished episode, reset and start recording a new one."""
        self._end_episode(finished=False)
        obs, info = self.env.reset(seed=seed, options=options)
        self._ev_list = None
        episode_id = str(uuid.uuid4())
        metadata = {**self._static_metadata, **self.metadata, "episode_index": self.n_episodes}
        if seed is not None:
            metadata["seed"] = seed
        builder = EpisodeBuilder(episode_id, {})
        builder.header = new_header(episode_id, **self._static_header,
                                    reset_events=[builder.encoder.encode(event_to_dict(e))
                                                  for e in self._new_events()],
                                    metadata=builder.encoder.encode(metadata))
        self._builder = builder
        self._obs = _copy_values(obs)
        self._env_time = self._time() or 0
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Step and record the sub-step (and the env step, once the env has acted)."""
        b = self._builder
        if b is None:  # not reset through this wrapper: nothing to record into
            return self.env.step(action)
        if not b.step_open:
            b.begin_step(self._call("get_maze_state"), self._call("get_serializable_components"))
            if self._frame_source is not None:
                try:
                    frame = self._frame_source()
                except Exception as err:  # noqa: BLE001 - the rollout goes on without frames
                    b.frames_error, frame = f"{type(err).__name__}: {err}", None
                b.add_frame(frame, self.max_frames)
        actor = self.env.actor_id()
        observation, action_copy = self._obs, _copy_values(action)
        obs, reward, terminated, truncated, info = self.env.step(action)
        b.add_substep(actor, observation, action_copy, reward, terminated, truncated, info, self._new_events())
        now = self._time()
        env_acted = now is None or now != self._env_time
        if env_acted or terminated or truncated:
            b.end_step(self._call("get_maze_action") if env_acted else None)
            self._env_time = now if now is not None else self._env_time + 1
        self._obs = _copy_values(obs)
        if terminated or truncated:
            self._end_episode(finished=True)
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Write an unfinished episode, then close the env."""
        self._end_episode(finished=False)
        self.env.close()

    # --- episodes ---------------------------------------------------------------------------------------------
    def _end_episode(self, finished: bool) -> None:
        b, self._builder = self._builder, None
        if b is None or b.n_substeps == 0:
            return
        data = b.finish(self._call("get_maze_state"), finished)
        self.n_episodes += 1
        self._last_data, self._last_classes = data, set(b.encoder.classes)
        path = None
        if self.trajectory_dir is not None:
            path = data.write(self.trajectory_dir)
            self.written.append(path)
        if self.keep_episodes:
            record = self._decode(data, self._last_classes)
            record.path = path
            self.episodes.append(record)

    @staticmethod
    def _decode(data: EpisodeData, classes: Iterable[str]) -> EpisodeRecord:
        # the classes came from live objects of this process: trusted
        return data.decode(ClassAllowList(classes))

    @property
    def last_episode(self) -> EpisodeRecord | None:
        """The last finished (or cut off) episode as records, or None before the first one ended."""
        if self._last_data is None:
            return None
        record = self._decode(self._last_data, self._last_classes)
        if self.written:
            record.path = self.written[-1]
        return record

    @property
    def records_frames(self) -> bool:
        """Whether this recorder keeps the env's frames (see ``record_frames``)."""
        return self._frame_source is not None

    @property
    def last_episode_path(self) -> Path | None:
        """The file of the last written episode."""
        return self.written[-1] if self.written else None
