"""The raw event logs of a run or a rollout as pandas DataFrames, and a widget to look at them episode by episode.

Training writes one TSV file per event type and env into ``<run>/event_logs/<prefix>_<index>/`` (``train_0``,
``eval_0``, ...), with the columns ``episode_id``, ``step`` and the event's attributes (see
``maze_lab.core.log_stats.event_log.TSVEventLogWriter``); a rollout whose env has a ``TSVEventLogWriter`` writes the
same files into its folder. Reading them is bounded (a file over ``max_bytes`` is refused with a message naming it)
and executes nothing: cells are numbers, booleans, text, or JSON lists and mappings decoded as data.
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import ipywidgets as w
import numpy as np
import plotly.graph_objects as go

from maze_lab.widgets.plotly_widgets import FigureWidget
from maze_lab.widgets.theme import themed
from maze_lab.widgets.view import PollingView

MAX_EVENT_LOG_BYTES = 64 * 1024**2
"""Largest event log file read by default: about two million events, read in a few seconds (pass ``max_bytes``
for more)."""

COUNT = "count per step"
"""The attribute choice that plots how often the event happened in each step."""

_KEY_COLUMNS = ("episode_id", "step")


class EventLogError(ValueError):
    """An event log file that is not read: too large, not UTF-8, or not a maze-lab event log."""


def _cell(text: str) -> Any:
    """One cell as data: JSON lists and mappings are decoded, ``None`` is None, the rest stays text."""
    if text == "None":
        return None
    if text[:1] in ("[", "{"):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _column(values: Any) -> Any:
    """A typed column from its cells (text): booleans, numbers (None as NaN), JSON lists and mappings decoded as
    data, else text (None for ``None``)."""
    import pandas as pd

    cells = pd.Series(values, dtype="object")
    none = cells == "None"
    present = cells[~none]
    if len(present) and present.isin(("True", "False")).all():
        flags = cells.map({"True": True, "False": False, "None": None})
        return flags.astype(bool) if not none.any() else flags
    try:
        return pd.to_numeric(cells.where(~none, np.nan), errors="raise")
    except (ValueError, TypeError):
        pass
    if len(present) and present.str[:1].isin(("[", "{")).all():
        try:  # one decode for the whole column: much faster than one per cell
            decoded = json.loads("[" + ",".join(present) + "]")
        except ValueError:
            decoded = None
        if decoded is not None and len(decoded) == len(present):
            out = pd.Series([None] * len(cells), dtype="object")
            out[~none.to_numpy()] = pd.Series(decoded, dtype="object").to_numpy()
            return out
    return pd.Series([_cell(v) for v in cells], dtype="object")


def _split_rows(body: bytes, header: list[str]) -> tuple[Any, int]:
    """The cells of the rows (as text) and the number of rows skipped for a wrong number of cells."""
    import pandas as pd

    n = len(header)
    if not body:
        return pd.DataFrame({h: pd.Series([], dtype="object") for h in header}), 0
    if b'"' in body:  # quoted cells (text with tabs or quotes): the csv module reads them exactly
        rows = list(csv.reader(io.StringIO(body.decode("utf-8")), delimiter="\t"))
        good = [r for r in rows if len(r) == n]
        frame = pd.DataFrame(good, columns=header, dtype="object") if good else \
            pd.DataFrame({h: pd.Series([], dtype="object") for h in header})
        return frame, len(rows) - len(good)
    buf = np.frombuffer(body, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10)
    # cells per line from where the tabs fall between the line ends (no copy of the buffer per byte)
    per_line = np.bincount(np.searchsorted(ends, np.flatnonzero(buf == 9)), minlength=len(ends))[: len(ends)]
    bad = per_line != n - 1
    skipped = int(bad.sum())
    if skipped:
        lines = body.split(b"\n")[: len(ends)]
        body = b"".join(line + b"\n" for line, b in zip(lines, bad, strict=True) if not b)
        if not body:
            return pd.DataFrame({h: pd.Series([], dtype="object") for h in header}), skipped
    # the C parser types plain number and boolean columns itself; the others are typed by _column
    frame = pd.read_csv(io.BytesIO(body), sep="\t", header=None, names=header, na_filter=False,
                        quoting=csv.QUOTE_NONE, engine="c", low_memory=False)
    return frame, skipped


def read_event_log(path: str | Path, max_bytes: int = MAX_EVENT_LOG_BYTES, base: str | Path | None = None) -> Any:
    """One event log file as a DataFrame (columns ``episode_id``, ``step`` and the event's attributes).

    A last line still being written (no line end yet) is left for the next read; rows whose number of cells does
    not match the header are skipped and counted in ``df.attrs["skipped_rows"]``.

    :param max_bytes: a larger file is refused (:class:`EventLogError` naming it) before anything is read.
    :param base: the directory the file must lie in (a symlink leading out of it is refused); None: no such check.
        A FIFO, a device or a socket is refused in any case, without blocking.
    """
    import pandas as pd

    from maze_lab.core.utils.safe_files import UnsafeFileError, open_regular, read_at_most

    path = Path(path)
    try:
        with open_regular(path, base, what="event log") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > max_bytes:
                raise EventLogError(f"{path} is {size:,} bytes, more than the {max_bytes:,} bytes an event log may "
                                    f"have here; it was not read (pass a larger max_bytes to read it)")
            data = read_at_most(fh, max_bytes)  # a file growing meanwhile: its first max_bytes
    except UnsafeFileError as err:
        raise EventLogError(str(err)) from None
    end = data.rfind(b"\n")
    data = data[: end + 1] if end >= 0 else b""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise EventLogError(f"{path} is not UTF-8 text ({err}); maze-lab writes event logs as UTF-8 TSV") from None
    if not data:
        df = pd.DataFrame(columns=list(_KEY_COLUMNS))
        df.attrs["skipped_rows"] = 0
        return df
    first, _, body = data.partition(b"\n")
    header = next(csv.reader([first.decode("utf-8")], delimiter="\t"), [])
    if tuple(header[:2]) != _KEY_COLUMNS:
        raise EventLogError(f"{path} is not a maze-lab event log: its header {header[:6]} does not start with "
                            f"episode_id, step")
    cells, skipped = _split_rows(body, header)
    out: dict[str, Any] = {}
    for name in header:
        values = cells[name]
        if name == "step":
            out[name] = pd.to_numeric(values, errors="coerce").astype("Int64")
        elif name == "episode_id":
            numbers = pd.to_numeric(values, errors="coerce")
            out[name] = numbers.astype("Int64") if len(values) and numbers.notna().all() and \
                (numbers % 1 == 0).all() else values.astype(str).astype("object")
        elif values.dtype.kind in "biuf":
            out[name] = values
        else:
            out[name] = _column(values.astype(str).to_numpy(dtype=object))
    df = pd.DataFrame(out, columns=header).reset_index(drop=True)
    df.attrs["skipped_rows"] = skipped
    return df


TRAJECTORIES = "trajectories"
"""The log made of a run's (or a folder's) recorded episodes: the events each step of them recorded."""


def _plain(value: Any) -> Any:
    """A recorded (encoded) value as plain data; nothing is imported or rebuilt: objects give their data, arrays
    stored outside the JSON give a placeholder."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if not isinstance(value, dict):
        return value
    tag = value.get("__t__")
    if tag is None:
        return {str(k): _plain(v) for k, v in value.items()}
    if tag in ("tuple", "list"):
        return [_plain(v) for v in value.get("items", [])]
    if tag in ("ndarray", "ndarray_str"):
        data, shape = value.get("data", []), value.get("shape", [])
        try:
            return np.asarray(data).reshape(shape).tolist() if len(shape) > 1 else data
        except (ValueError, TypeError):
            return data
    if tag == "scalar":
        return value.get("value")
    if tag == "dict":
        return {str(_plain(k)): _plain(v) for k, v in value.get("items", [])}
    if tag in ("object", "dataclass"):
        return _plain(value.get("data"))
    if tag == "enum":
        return value.get("name")
    if tag == "repr":
        return value.get("repr")
    if tag == "npy":
        return f"<array {value.get('member')}>"
    return {str(k): _plain(v) for k, v in value.items()}


def episode_events(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """The events of one recorded episode (``*.trajectory.zip``) as rows ``{episode_id, step, attributes...}``
    per ``Topic.event``, with the step rewards as ``BaseEnvEvents.reward`` (as the TSV logs have them); events of
    the reset count towards step 0. The file is read within the trajectory reader's limits; no class it names is
    imported."""
    from maze_lab.core.trajectory.files import EpisodeData

    data = EpisodeData.read(path)
    episode = data.header.get("episode_id", Path(path).name)
    rows: dict[str, list[dict[str, Any]]] = {}

    def add(event: Any, step: int) -> None:
        if not isinstance(event, dict):
            return
        attributes = event.get("attributes") if isinstance(event.get("attributes"), dict) else {}
        rows.setdefault(f"{event.get('topic')}.{event.get('event')}", []).append(
            {"episode_id": episode, "step": step, **{str(k): _plain(v) for k, v in attributes.items()}})

    for event in data.header.get("reset_events") or []:
        add(event, 0)
    for position, step in enumerate(data.steps):
        index = step.get("index", position) if isinstance(step, dict) else position
        substeps = step.get("substeps", []) if isinstance(step, dict) else []
        reward = sum(float(sub.get("reward") or 0.0) for sub in substeps if isinstance(sub, dict))
        rows.setdefault("BaseEnvEvents.reward", []).append({"episode_id": episode, "step": index, "value": reward})
        for sub in substeps:
            for event in (sub.get("events") or []) if isinstance(sub, dict) else []:
                add(event, index)
    return rows


def _root_of(source: Any) -> tuple[Path, Any]:
    """The folder of event logs of a run directory, run object or plain folder, and the run (a RunSource, to know
    whether more may come; None for a plain folder)."""
    from maze_lab.run.run_dir import MARKER
    from maze_lab.widgets.sources import RunSource

    if isinstance(source, str | Path):
        path = Path(source).expanduser()
        if (path / MARKER).is_file():
            return path / "event_logs", RunSource(path)
        if path.name == "event_logs" and (path.parent / MARKER).is_file():
            return path, RunSource(path.parent)
        return path, None
    run = RunSource(source)
    if run.run_dir is None:
        raise TypeError(f"{type(source).__name__} has no run directory; give a run directory, a RunHandle, "
                        f"a RunContext, a LoadedRun or a folder of event logs (*.tsv)")
    return run.run_dir / "event_logs", run


class EventLogExplorer(PollingView):
    """The raw event logs of a run (``<run>/event_logs/<env>/``), a rollout or a plain folder of TSV files.

    Each folder holding ``*.tsv`` files is one log (``train_0``, ``eval_0``, ``rollout_0``, or ``.`` for files
    directly in the folder given); each file is one event (``Topic.event``). Recorded episodes
    (``*.trajectory.zip``: what ``RunContext.rollout``, ``LoadedRun.rollout`` and ``maze-lab rollout`` write into
    ``<run>/trajectories/``, which write no TSV logs) make one more log, ``trajectories``, with the same columns.

    :param source: a run directory, a folder of event logs (or of such folders), one ``.tsv`` file, or a
        RunHandle / RunContext / LoadedRun / RunSource (its run directory's ``event_logs``).
    :param max_bytes: the largest file read; a larger one is refused with a message naming it.
    :param refresh_seconds: how often the kernel's event loop looks for new events once the widget is shown (only
        while the run is going).
    """

    def __init__(self, source: Any, max_bytes: int = MAX_EVENT_LOG_BYTES, refresh_seconds: float = 2.0):
        self.max_bytes = int(max_bytes)
        self.refresh_seconds = refresh_seconds
        given = Path(source) if isinstance(source, str | Path) else None
        self._single_file = given if given is not None and given.is_file() else None
        if self._single_file is not None:
            self.root, self.run = self._single_file.parent, None
        else:
            self.root, self.run = _root_of(source)
        self._files: dict[str, dict[str, Path]] = {}
        self._cache: dict[Path, tuple[tuple[int, int], Any]] = {}
        self._syncing = False
        self._drawn: Any = None
        self._attributes_of: Any = None
        self._stamps: dict[Path, tuple[int, int]] = {}
        self._version = 0
        self.trajectory_dir = self._trajectory_dir()
        self._episodes: dict[Path, tuple[tuple[int, int], dict[str, list[dict[str, Any]]]]] = {}
        self._episode_files: list[Path] = []
        self._episode_frames: dict[str, tuple[Any, Any]] = {}
        self.skipped: dict[str, str] = {}
        """Recorded episodes that were not read, with the reason (too large, not a trajectory file)."""
        self._build_widgets()
        self.update(force=True)

    # ---- data ------------------------------------------------------------------------------------------------
    def _trajectory_dir(self) -> Path | None:
        """Where recorded episodes are: the run's ``trajectories/``, or the folder given where it holds some."""
        if self._single_file is not None:
            return None
        if self.run is not None and self.run.run_dir is not None:
            return self.run.run_dir / "trajectories"
        return self.root

    def _scan(self) -> dict[str, dict[str, Path]]:
        if self._single_file is not None:
            return {".": {self._single_file.stem: self._single_file}} if self._single_file.exists() else {}
        logs: dict[str, dict[str, Path]] = {}
        if self.root.is_dir():
            for pattern in ("*.tsv", "*/*.tsv"):
                for path in sorted(self.root.glob(pattern)):
                    if path.is_file():
                        log = path.parent.relative_to(self.root).as_posix()
                        logs.setdefault(log, {})[path.stem] = path
        logs = dict(sorted(logs.items(), key=lambda kv: (kv[0] != "train_0", kv[0])))
        events = self._scan_episodes()
        if events:
            logs[TRAJECTORIES] = dict.fromkeys(sorted(events), self.trajectory_dir)
        return logs

    def _scan_episodes(self) -> set[str]:
        """Read new or changed episode files (newest first, within ``max_bytes`` together); returns their events."""
        from maze_lab.core.trajectory.files import SUFFIX
        from maze_lab.core.utils.safe_files import UnsafeFileError, check_inside

        directory = self.trajectory_dir
        if directory is None or not directory.is_dir():
            self._episode_files = []
            return set()
        found = [p for pattern in (f"*{SUFFIX}", f"*/*{SUFFIX}") for p in directory.glob(pattern)
                 if p.is_file() and not p.name.startswith(".")]
        budget, keep, skipped = self.max_bytes, [], {}
        inside = self.run.run_dir if self.run is not None and self.run.run_dir is not None else directory
        for path in list(found):  # an episode (or trajectories/ itself) leading out of the run is not read
            try:
                check_inside(path, inside, what="trajectory file")
            except UnsafeFileError as err:
                skipped[str(path)] = f"{path} was not read: {err}"
                found.remove(path)
        stamped = sorted(((p.stat().st_mtime_ns, p.stat().st_size, p) for p in found), key=lambda t: (t[0], t[2]))
        for mtime, size, path in reversed(stamped):  # the newest episodes first
            if size > budget:
                skipped[str(path)] = (f"{path} ({size:,} bytes) was not read: the recorded episodes read here may "
                                      f"take {self.max_bytes:,} bytes together (pass a larger max_bytes)")
                continue
            cached = self._episodes.get(path)
            if cached is None or cached[0] != (mtime, size):
                try:
                    self._episodes[path] = cached = ((mtime, size), episode_events(path))
                except (OSError, ValueError, KeyError, TypeError) as err:  # e.g. NotATrajectoryFileError
                    skipped[str(path)] = f"{path} was not read: {type(err).__name__}: {err}"
                    continue
            budget -= size
            keep.append(path)
        self._episode_files, self.skipped = list(reversed(keep)), skipped
        kept = set(keep)
        self._episodes = {p: v for p, v in self._episodes.items() if p in kept}  # forget deleted episodes
        return {event for path in keep for event in self._episodes[path][1]}

    def logs(self) -> list[str]:
        """The logs found (one per env and use: ``train_0``, ``eval_0``, ...; ``.`` for files in the root)."""
        return list(self._files)

    def _log(self, log: str | None) -> str:
        if log is None:
            log = self.log_picker.value if self.log_picker.value in self._files else next(iter(self._files), None)
        if log not in self._files:
            raise KeyError(f"no event log '{log}' in {self.root}; found: {self.logs() or 'none'}")
        return log

    def events(self, log: str | None = None) -> list[str]:
        """The events (``Topic.event``) of one log (default: the one picked in the widget, else the first)."""
        if not self._files:
            return []
        return sorted(self._files[self._log(log)])

    def path(self, event: str, log: str | None = None) -> Path:
        """The file of one event."""
        files = self._files[self._log(log)]
        if event not in files:
            raise KeyError(f"no event '{event}' in log '{self._log(log)}' of {self.root}; found: {sorted(files)}")
        return files[event]

    def dataframe(self, event: str, log: str | None = None) -> Any:
        """One event's rows (``episode_id``, ``step``, attributes); re-read only when the file changed. A file over
        ``max_bytes`` raises :class:`EventLogError` naming it."""
        path = self.path(event, log)
        if self._log(log) == TRAJECTORIES:
            return self._episode_frame(event)
        st = path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
        cached = self._cache.get(path)
        if cached is None or cached[0] != stamp:
            base = None if self._single_file is not None else self.root
            self._cache[path] = cached = (stamp, read_event_log(path, self.max_bytes, base))
        return cached[1]

    def _episode_frame(self, event: str) -> Any:
        """One event's rows over the recorded episodes read (oldest first)."""
        import pandas as pd

        stamp = tuple((p, self._episodes[p][0]) for p in self._episode_files)
        cached = self._episode_frames.get(event)
        if cached is None or cached[0] != stamp:
            rows = [row for p in self._episode_files for row in self._episodes[p][1].get(event, [])]
            df = pd.DataFrame.from_records(rows) if rows else pd.DataFrame(columns=list(_KEY_COLUMNS))
            df.attrs["skipped_rows"] = 0
            self._episode_frames[event] = cached = (stamp, df)
        return cached[1]

    def dataframes(self, log: str | None = None) -> dict[str, Any]:
        """Every event of one log as ``{Topic.event: DataFrame}``."""
        return {event: self.dataframe(event, log) for event in self.events(log)}

    def episodes(self, event: str, log: str | None = None) -> list[Any]:
        """The episode ids with at least one such event, in the order they appear."""
        df = self.dataframe(event, log)
        return list(dict.fromkeys(df["episode_id"].tolist()))

    def attributes(self, event: str, log: str | None = None) -> list[str]:
        """What can be plotted over the steps: numeric attributes, elements of numeric lists of one length
        (``name[i]``), and :data:`COUNT`."""
        df = self.dataframe(event, log)
        out = [str(name) for name in df.columns[2:] if df[name].dtype.kind in "biuf"]
        for name in df.columns[2:]:
            column = df[name]
            if column.dtype == object:
                sample = column.dropna().head(1000)  # a sample decides: the column may have millions of cells
                lengths = {len(v) if isinstance(v, list) and all(_is_number(x) for x in v) else -1 for v in sample}
                if len(lengths) == 1 and (n := lengths.pop()) > 0 and n <= 16:
                    out.extend(f"{name}[{i}]" for i in range(n))
        return [*out, COUNT]

    def per_step(self, event: str, episode: Any, attribute: str = COUNT, log: str | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """``(steps, values)`` of one episode: an attribute's value at each event, or with :data:`COUNT` the number
        of events in each step that had any."""
        df = self.dataframe(event, log)
        part = df[df["episode_id"] == episode]
        steps = part["step"].to_numpy(dtype=np.int64, na_value=-1)
        if attribute == COUNT:
            uniq, counts = np.unique(steps, return_counts=True)
            return uniq, counts.astype(np.float64)
        if attribute.endswith("]") and "[" in attribute and attribute not in df.columns:
            name, index = attribute[:-1].rsplit("[", 1)
            values = [v[int(index)] if isinstance(v, list) and len(v) > int(index) else np.nan for v in part[name]]
            return steps, np.asarray(values, dtype=np.float64)
        if attribute not in df.columns:
            raise KeyError(f"event {event} has no attribute '{attribute}'; plottable: {self.attributes(event, log)}")
        return steps, part[attribute].to_numpy(dtype=np.float64, na_value=np.nan)

    # ---- the widget ------------------------------------------------------------------------------------------
    def _build_widgets(self) -> None:
        self.header = w.HTML()
        self.message = w.HTML()
        self.log_picker = w.Dropdown(description="log", options=[])
        self.event_picker = w.Dropdown(description="event", options=[], layout=w.Layout(width="420px"))
        self.attribute_picker = w.Dropdown(description="plot", options=[COUNT], value=COUNT)
        self.episode_picker = w.IntSlider(description="episode #", min=0, max=0, continuous_update=False)
        self.episode_label = w.HTML()
        for picker in (self.log_picker, self.event_picker, self.attribute_picker, self.episode_picker):
            picker.observe(self._on_pick, names="value")
        self.figure = FigureWidget(
            data=[go.Scatter(x=[], y=[], mode="lines+markers", name="value", visible=False),
                  go.Bar(x=[], y=[], name="events", visible=False)],
            layout={"height": 320, "margin": {"t": 40, "b": 40, "l": 50, "r": 10}, "xaxis": {"title": "step"},
                    "showlegend": False})
        self.table_html = w.HTML()
        self.widget = themed(w.VBox([self.header, self.message, w.HBox([self.log_picker, self.event_picker]),
                                     w.HBox([self.attribute_picker, self.episode_picker, self.episode_label]),
                                     self.figure, self.table_html]))

    def _on_pick(self, _: Any) -> None:
        if not self._syncing:
            self._redraw()

    def update(self, force: bool = False) -> bool:
        """Look for new and grown files and redraw what changed; returns whether anything changed. Never raises:
        a failure is shown in the widget."""
        if self._closed:
            return False
        try:
            files = self._scan()
            stamps = {p: (p.stat().st_mtime_ns, p.stat().st_size) for f in files.values() for p in f.values()
                      if p.exists() and p.is_file()}
            stamps.update({p: self._episodes[p][0] for p in self._episode_files})
        except OSError as err:
            self.message.value = _error_html(f"reading {self.root}: {err}")
            return False
        changed = force or files != self._files or stamps != self._stamps
        if changed:
            self._version += 1
        self._files, self._stamps = files, stamps
        if changed:
            self._redraw()
        return changed

    def _redraw(self) -> None:
        """Sync the pickers with the files, then draw the picked event and episode."""
        self._syncing = True
        try:
            errors: list[str] = []
            _set_options(self.log_picker, self.logs())
            events = self.events() if self._files else []
            _set_options(self.event_picker, events, prefer="BaseEnvEvents.reward")
            event, log = self.event_picker.value, self.log_picker.value
            df = None
            if event is not None:
                try:
                    df = self.dataframe(event, log)
                except (OSError, ValueError, KeyError) as err:
                    errors.append(str(err))
            if df is not None:
                attributes = self.attributes(event, log)
                if (log, event) != self._attributes_of:  # a new event: its first attribute, not the last choice
                    self.attribute_picker.options = attributes
                    self.attribute_picker.value = attributes[0]
                    self._attributes_of = (log, event)
                else:
                    _set_options(self.attribute_picker, attributes)
                episodes = self.episodes(event, log)
                self.episode_picker.max = max(len(episodes) - 1, 0)
            else:
                _set_options(self.attribute_picker, [COUNT])
                self._attributes_of = None
                episodes = []
                self.episode_picker.max = 0
        finally:
            self._syncing = False
        self._draw_header(df, event, log)
        try:
            self._draw_episode(df, episodes, event, log)
        except Exception as err:  # noqa: BLE001 - a drawing error is shown, never raised into the notebook
            errors.append(f"drawing: {type(err).__name__}: {err}")
        self.message.value = "".join(_error_html(e) for e in errors)

    def _draw_header(self, df: Any, event: str | None, log: str | None) -> None:
        if not self._files:
            self.header.value = (f"<b>No event logs</b> in <code>{html.escape(str(self.root))}</code> (training "
                                 f"writes them into &lt;run&gt;/event_logs/&lt;env&gt;/*.tsv; recorded episodes "
                                 f"(*.trajectory.zip) hold the events of rollouts)")
            self.header.value += "".join(f"<div style='color:#a04000'>{html.escape(r)}</div>"
                                         for r in self.skipped.values())
            return
        n_files = sum(len(f) for name, f in self._files.items() if name != TRAJECTORIES)
        n_logs = len(self._files) - (TRAJECTORIES in self._files)
        parts = []
        if n_files:
            parts.append(f"<b>{_count(n_files, 'event log file')}</b> in {_count(n_logs, 'log')} under "
                         f"<code>{html.escape(str(self.root))}</code>")
        if self._episode_files:
            parts.append(f"<b>{_count(len(self._episode_files), 'recorded episode')}</b> in "
                         f"<code>{html.escape(str(self.trajectory_dir))}</code> (log <i>{TRAJECTORIES}</i>)")
        text = "; ".join(parts)
        if self.skipped:
            text += "".join(f"<div style='color:#a04000'>{html.escape(r)}</div>" for r in self.skipped.values())
        if df is not None and event is not None:
            skipped = df.attrs.get("skipped_rows", 0)
            text += (f"<br><code>{html.escape(log or '')}/{html.escape(event)}</code>: {_count(len(df), 'event')} in "
                     f"{_count(df['episode_id'].nunique(), 'episode')}"
                     + (f", {skipped} malformed rows skipped" if skipped else ""))
        self.header.value = text

    def _draw_episode(self, df: Any, episodes: list[Any], event: str | None, log: str | None) -> None:
        scatter, bars = self.figure.data
        if df is None or not episodes:
            with self.figure.batch_update():
                scatter.visible = bars.visible = False
                self.figure.layout.title = None
            self.episode_label.value = ""
            self.table_html.value = ""
            self._drawn = None
            return
        episode = episodes[min(self.episode_picker.value, len(episodes) - 1)]
        attribute = self.attribute_picker.value or COUNT
        self.episode_label.value = f"id <b>{html.escape(str(episode))}</b> of {len(episodes)}"
        state = (log, event, episode, attribute, self._version)
        if state == self._drawn:
            return
        steps, values = self.per_step(event, episode, attribute, log)
        with self.figure.batch_update():
            if attribute == COUNT:
                bars.x, bars.y, bars.visible, scatter.visible = steps, values, True, False
                self.figure.layout.yaxis.title = "events"
            else:
                scatter.x, scatter.y, scatter.visible, bars.visible = steps, values, True, False
                self.figure.layout.yaxis.title = attribute
            self.figure.layout.title = f"{event}: {attribute}, episode {episode}"
        part = df[df["episode_id"] == episode]
        shown = part.head(200)
        more = f"<i>first 200 of {len(part):,} events</i>" if len(part) > 200 else ""
        self.table_html.value = _TABLE_CSS + more + shown.to_html(index=False, border=0, na_rep="", max_cols=30,
                                                                   classes="maze-lab-events")
        self._drawn = state

    @property
    def live(self) -> bool:
        """Whether the run may still write events (a run directory or run object whose run is going)."""
        return self.run is not None and self.run.live


_TABLE_CSS = ("<style>.maze-lab-events{border-collapse:collapse}.maze-lab-events td,.maze-lab-events th{"
              "padding:2px 9px;font-family:system-ui,sans-serif;font-size:13px;text-align:right;"
              "border-bottom:1px solid var(--jp-border-color2,#e5e8e8)}"
              ".maze-lab-events th{background:var(--jp-layout-color2,#f2f3f4)}</style>")


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _error_html(text: str) -> str:
    return f"<div style='color:#a93226;font-family:monospace;white-space:pre-wrap'>{html.escape(text)}</div>"


def _set_options(picker: Any, options: Iterable[Any], prefer: Any = None) -> None:
    """Set a dropdown's options only where they changed, keeping its value where it is still one (else
    ``prefer`` where it is one, else the first)."""
    options = list(options)
    if list(picker.options) == options:
        return
    keep = picker.value if picker.value in options else (prefer if prefer in options else
                                                         (options[0] if options else None))
    picker.options = options
    if options:
        picker.value = keep
