"""Action and observation distributions of a run, per epoch, policy key and action head / observation key.

The StatsStore keeps, per epoch and prefix (train / eval), the actions of each (policy key, action head) and the
observations of each (policy key, observation key) as flat sample arrays, the original observation of the env and
the one after pre-processing / normalization (the model's input) separately. This view draws them: bars of the
count of each action value for discrete and multi-binary heads, histograms per dimension for continuous heads, and
per observation key one row per dimension with the original and the processed values side by side; an epoch slider
with a play button steps through the training.

Where an observation has many dimensions, a summary of every dimension (mean ± std band, min and max) is shown with
a picker for the dimensions to draw as histograms. The shape of each observation is what the run's model graph says
its input is (the drawings in the run directory), the spaces of a run training in this kernel, or what the caller
gives; from one known shape per policy key the others follow (every observation key of a policy key is recorded
equally often). Where none is known, the values of all dimensions are pooled and the panel says so.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from maze_lab.widgets.model_graph import _natural, _run_of, read_run_graphs
from maze_lab.widgets.theme import themed
from maze_lab.widgets.view import PollingView

ACTION_TOPICS = {"DiscreteActionEvents": "discrete", "ContinuousActionEvents": "continuous",
                 "MultiBinaryActionEvents": "multi-binary"}
OBS_TOPIC = "ObservationEvents"
STAGES = {"observation_original": "original", "observation_processed": "processed"}
MAX_ROWS = 6
"""Observations with at most this many dimensions get a histogram row per dimension; more get a summary + picker."""
N_BINS = 30


@dataclass
class SampleKey:
    """What one sample series is: an action head or an observation key (with its stage) of one policy key."""

    kind: str  # "action" or "observation"
    policy_key: str
    name: str  # head or observation key
    space: str = ""  # discrete / continuous / multi-binary (actions)

    @property
    def label(self) -> str:
        """``policy_key/name`` as the StatsStore names it."""
        return f"{self.policy_key}/{self.name}"


class DistributionData:
    """The distribution samples of a StatsStore indexed by prefix, kind, label and epoch (the numbers behind the
    plots; no widgets).

    :param shapes: known shapes of actions / observations by label (``"0/observation": (4,)``); others are inferred.
    :param ranges: known number of values of discrete action heads by label (``"0/action": 2``).
    :param multi_binary: labels of multi-binary action heads (counted per bit).
    """

    def __init__(self, shapes: dict[str, tuple[int, ...]] | None = None, ranges: dict[str, int] | None = None,
                 multi_binary: set[str] | None = None):
        self.shapes: dict[str, tuple[int, ...]] = dict(shapes or {})
        self.ranges: dict[str, int] = dict(ranges or {})
        self.multi_binary: set[str] = set(multi_binary or ())
        self.max_samples = 20_000
        # (prefix, kind, label, stage) -> {epoch: array}; stage is "" for actions
        self.series: dict[tuple[str, str, str, str], dict[int, np.ndarray]] = defaultdict(dict)
        self.keys: dict[tuple[str, str], SampleKey] = {}  # (kind, label) -> key
        self._n_seen = 0
        self._dims: dict[tuple[str, str], int | None] = {}

    def ingest(self, samples: list[tuple]) -> bool:
        """Index the samples not seen yet (the store's sample list only grows); returns whether any were new."""
        new = samples[self._n_seen:]
        self._n_seen = len(samples)
        for epoch, prefix, topic, event, name, arr in new:
            if topic in ACTION_TOPICS and event == "action":
                kind, stage = "action", ""
            elif topic == OBS_TOPIC and event in STAGES:
                kind, stage = "observation", STAGES[event]
            else:
                continue
            policy_key, _, head = str(name).partition("/")
            if not head:
                policy_key, head = "", str(name)
            label = f"{policy_key}/{head}" if policy_key else head
            space = ACTION_TOPICS.get(topic, "")
            if kind == "action" and label in self.multi_binary:
                space = "multi-binary"
            self.keys.setdefault((kind, label), SampleKey(kind, policy_key, head, space))
            self.series[(prefix, kind, label, stage)][int(epoch)] = np.asarray(arr, dtype=np.float64)
        if new:
            self._dims.clear()
        return bool(new)

    # ---- what there is -------------------------------------------------------------------------------------------
    def prefixes(self) -> list[str]:
        """The prefixes with samples (train first)."""
        have = {p for p, *_ in self.series}
        return sorted(have, key=lambda p: (p != "train", p != "eval", p))

    def labels(self, kind: str) -> list[str]:
        """The action heads / observation keys, as ``policy_key/name``."""
        return sorted((lab for k, lab in self.keys if k == kind), key=_natural)

    def epochs(self, prefix: str | None = None) -> list[int]:
        """The epochs with samples (of one prefix)."""
        return sorted({e for (p, *_), by_epoch in self.series.items() if prefix in (None, p) for e in by_epoch})

    def stages(self, label: str, prefix: str) -> list[str]:
        """original / processed: which versions of an observation were recorded."""
        return [s for s in ("original", "processed") if (prefix, "observation", label, s) in self.series]

    def raw(self, prefix: str, kind: str, label: str, epoch: int, stage: str = "") -> np.ndarray:
        """The flat samples of one epoch (empty where there are none)."""
        return self.series.get((prefix, kind, label, stage), {}).get(int(epoch), np.zeros(0))

    # ---- dimensions ----------------------------------------------------------------------------------------------
    def dim(self, kind: str, label: str, stage: str = "") -> int | None:
        """The number of values per sample of an action head or observation key (None: unknown); pre-processing may
        change an observation's size, so each stage has its own."""
        key = (kind, label, stage)
        if key not in self._dims:
            self._dims.update(self._infer_dims(kind))
        return self._dims.get(key)

    def shape(self, kind: str, label: str, stage: str = "") -> tuple[int, ...] | None:
        """The sample shape where known (else ``(dim,)`` where only the size is known)."""
        d = self.dim(kind, label, stage)
        known = self._known_shape(kind, label, stage)
        if known is not None and d == int(np.prod(known)):
            return tuple(known)
        return None if d is None else (d,)

    def _known_shape(self, kind: str, label: str, stage: str) -> tuple[int, ...] | None:
        """A given shape applies to actions, to processed observations (what the model reads) and to original ones
        that no wrapper processed (nothing else was recorded for them)."""
        if kind == "action" or stage == "processed":
            return self.shapes.get(label)
        if not any(k[1] == "observation" and k[2] == label and k[3] == "processed" for k in self.series):
            return self.shapes.get(label)
        return None

    def _infer_dims(self, kind: str) -> dict[tuple[str, str, str], int | None]:
        """Sizes per sample: known shapes first; then, per policy key, the number of samples N of each epoch found
        from one series of known size gives every other series' size (every key of a policy key, original and
        processed, is recorded once per step). For actions each head has at least one value per step, so the
        smallest array of a step gives N where no head's size is known."""
        dims: dict[tuple[str, str, str], int | None] = {}
        by_policy: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for (_prefix, k, lab, stage) in self.series:
            if k == kind and (lab, stage) not in by_policy[self.keys[(k, lab)].policy_key]:
                by_policy[self.keys[(k, lab)].policy_key].append((lab, stage))
        for entries in by_policy.values():
            known: dict[tuple[str, str], int] = {}
            for lab, stage in entries:
                shape = self._known_shape(kind, lab, stage)
                if shape is not None:
                    known[(lab, stage)] = int(np.prod(shape))
            groups: dict[tuple, dict[tuple[str, str], int]] = defaultdict(dict)
            for (prefix, k, lab, stage), by_epoch in self.series.items():
                if k == kind and (lab, stage) in entries:
                    for epoch, arr in by_epoch.items():
                        groups[(prefix, epoch)][(lab, stage)] = arr.size
            found: dict[tuple[str, str], set[int]] = defaultdict(set)
            for sizes in groups.values():
                whole = {e: n for e, n in sizes.items() if n < self.max_samples}  # not subsampled by the store
                counts = {whole[e] // d for e, d in known.items() if e in whole and d and whole[e] % d == 0}
                if kind == "action" and not counts and len(whole) > 1:
                    counts = {min(whole.values())}
                if len(counts) != 1:
                    continue
                n = counts.pop()
                if n <= 0:
                    continue
                for e, size in whole.items():
                    if size % n == 0:
                        found[e].add(size // n)
            for e in entries:
                if e in known:
                    dims[(kind, *e)] = known[e]
                elif len(found.get(e, ())) == 1:
                    dims[(kind, *e)] = next(iter(found[e]))
                elif kind == "action" and self.keys[("action", e[0])].space == "discrete":
                    dims[(kind, *e)] = 1  # the only head of its policy key: one value per step
                else:
                    dims[(kind, *e)] = None
        return dims

    def action_space(self, label: str) -> str:
        """discrete / multi-binary / continuous: a head recorded as discrete with several values per step is
        multi-binary (what a run directory cannot otherwise tell)."""
        space = self.keys[("action", label)].space
        if space == "discrete" and (self.dim("action", label) or 1) > 1:
            return "multi-binary"
        return space

    def per_dim(self, prefix: str, kind: str, label: str, epoch: int, stage: str = "") -> np.ndarray | None:
        """The samples of one epoch as rows of one sample each (None where the dimensions cannot be told apart:
        size unknown, or the store subsampled the flat values)."""
        arr = self.raw(prefix, kind, label, epoch, stage)
        d = self.dim(kind, label, stage)
        if d is None or arr.size % d or arr.size >= self.max_samples:
            return None
        return arr.reshape(-1, d)

    def dim_name(self, kind: str, label: str, index: int, stage: str = "") -> str:
        """A dimension's index as the shape says it, e.g. ``[12, 1]``."""
        shape = self.shape(kind, label, stage)
        if shape is None or len(shape) <= 1 or index >= int(np.prod(shape)):
            return f"[{index}]"
        return "[" + ", ".join(str(int(i)) for i in np.unravel_index(index, shape)) + "]"

    # ---- the numbers behind the plots ----------------------------------------------------------------------------
    def action_counts(self, prefix: str, label: str, epoch: int) -> dict[Any, int]:
        """Discrete head: ``{value: count}`` with every value of the head's range (zero counts included where the
        range is known). Multi-binary head: ``{bit: number of samples with the bit set}``."""
        key = self.keys.get(("action", label))
        if key is None:
            raise KeyError(f"no action head {label!r}; the run has {self.labels('action')}")
        arr = self.raw(prefix, "action", label, epoch)
        if self.action_space(label) == "multi-binary":
            d = self.dim("action", label, "")
            rows = arr.reshape(-1, d) if d and arr.size % d == 0 else arr.reshape(-1, 1)
            return {i: int(c) for i, c in enumerate((rows > 0.5).sum(axis=0))}
        values = np.rint(arr).astype(np.int64)
        counts: dict[Any, int] = {}
        n = self.ranges.get(label)
        if n is not None:
            counts = {i: 0 for i in range(n)}
        uniq, cnt = np.unique(values, return_counts=True)
        for u, c in zip(uniq.tolist(), cnt.tolist(), strict=True):
            counts[int(u)] = int(c)
        return dict(sorted(counts.items()))

    def edges(self, prefix: str, kind: str, label: str, dim: int | None, stage: str = "") -> np.ndarray:
        """Histogram bin edges for one series over all epochs (the same bins at every epoch, so they compare)."""
        lo, hi = math.inf, -math.inf
        integral = True
        for epoch in self.series.get((prefix, kind, label, stage), {}):
            values = self._values(prefix, kind, label, epoch, dim, stage)
            if values.size:
                lo, hi = min(lo, float(values.min())), max(hi, float(values.max()))
                integral = integral and bool(np.all(values == np.round(values)))
        if not math.isfinite(lo):
            lo, hi = 0.0, 1.0
        if integral and hi - lo <= 2 * N_BINS:  # counts, flags, sizes: one bar per integer, centred on it
            return np.arange(lo - 0.5, hi + 1.0, 1.0)
        if hi - lo < 1e-12:
            lo, hi = lo - 0.5, hi + 0.5
        return np.linspace(lo, hi, N_BINS + 1)

    def _values(self, prefix: str, kind: str, label: str, epoch: int, dim: int | None, stage: str) -> np.ndarray:
        if dim is None:
            return self.raw(prefix, kind, label, epoch, stage)
        rows = self.per_dim(prefix, kind, label, epoch, stage)
        if rows is None or dim >= rows.shape[1]:
            return np.zeros(0)
        values = rows[:, dim]
        return values[np.isfinite(values)]

    def histogram(self, prefix: str, kind: str, label: str, epoch: int, dim: int | None = None,
                  stage: str = "") -> tuple[np.ndarray, np.ndarray]:
        """``(counts, edges)`` of one epoch's values of one dimension (``dim=None``: all values pooled)."""
        edges = self.edges(prefix, kind, label, dim, stage)
        values = self._values(prefix, kind, label, epoch, dim, stage)
        counts, _ = np.histogram(values, bins=edges)
        return counts, edges

    def summary(self, prefix: str, kind: str, label: str, epoch: int, stage: str = "") -> dict[str, np.ndarray]:
        """Per dimension: mean, std, min, max of one epoch (empty where dimensions are unknown)."""
        rows = self.per_dim(prefix, kind, label, epoch, stage)
        if rows is None or rows.shape[0] == 0:
            return {}
        with np.errstate(all="ignore"):
            return {"mean": np.nanmean(rows, axis=0), "std": np.nanstd(rows, axis=0),
                    "min": np.nanmin(rows, axis=0), "max": np.nanmax(rows, axis=0)}


def _graph_shapes(run_dir: Any) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """Observation shapes (the inputs of each policy's graph) and discrete head sizes (its outputs) by label."""
    shapes: dict[str, tuple[int, ...]] = {}
    ranges: dict[str, int] = {}
    if run_dir is None:
        return shapes, ranges
    graphs, _ = read_run_graphs(run_dir)
    for g in sorted(graphs.values(), key=lambda g: g.role != "policy"):
        if g.role not in ("policy", "critic") or not g.key:
            continue
        for name, shape in g.input_tensors().items():
            if shape is not None:
                shapes.setdefault(f"{g.key}/{name}", shape)
        if g.role == "policy":
            for name, shape in g.output_tensors().items():
                if shape is not None and len(shape) == 1:
                    ranges[f"{g.key}/{name}"] = int(shape[0])
    return shapes, ranges


def _live_spaces(run: Any) -> tuple[dict[str, tuple[int, ...]], dict[str, int], set[str]]:
    """Action and processed-observation shapes of a run of this kernel (from its training env's spaces)."""
    import gymnasium as gym

    shapes: dict[str, tuple[int, ...]] = {}
    ranges: dict[str, int] = {}
    multi: set[str] = set()
    env = getattr(run, "train_env", None) if getattr(run, "_trainer", None) is not None else None
    if env is None:
        return shapes, ranges, multi
    for key, space in dict(getattr(env, "action_spaces_dict", {}) or {}).items():
        for head, sub in getattr(space, "spaces", {}).items():
            label = f"{key}/{head}"
            if isinstance(sub, gym.spaces.Discrete):
                ranges[label] = int(sub.n)
                shapes[label] = (1,)
            elif isinstance(sub, gym.spaces.MultiBinary):
                multi.add(label)
                shapes[label] = tuple(np.atleast_1d(sub.shape))
            elif isinstance(sub, gym.spaces.Box):
                shapes[label] = tuple(sub.shape) or (1,)
    for key, space in dict(getattr(env, "observation_spaces_dict", {}) or {}).items():
        for name, sub in getattr(space, "spaces", {}).items():
            if getattr(sub, "shape", None):
                shapes.setdefault(f"{key}/{name}", tuple(sub.shape))
    return shapes, ranges, multi


class DistributionsView(PollingView):
    """Action and observation distributions of a run per epoch, policy key and head / observation key.

    :param source: a RunHandle, RunContext, LoadedRun, StatsStore or run directory (see ``RunSource``).
    :param shapes: known sample shapes by label (``"0/observation": (4,)``), where the run cannot tell them.
    """

    def __init__(self, source: Any, shapes: dict[str, tuple[int, ...]] | None = None):
        import ipywidgets as w
        import plotly.graph_objects as go

        from maze_lab.widgets.plotly_widgets import FigureWidget
        from maze_lab.widgets.sources import RunSource

        self.source = RunSource(source)
        self._origin = source  # the run object of a RunContext / RunHandle: its spaces name the shapes
        self._user_shapes = dict(shapes or {})
        self.data = DistributionData(self._user_shapes)
        self._hints_from: tuple = ()
        self._seen_version: int | None = None
        self._action_layout: tuple | None = None
        self._obs_layout: tuple | None = None
        self.error: str | None = None
        self._quiet = False

        self.header = w.HTML()
        self.prefix_select = w.ToggleButtons(options=[], description="samples of", style={"button_width": "60px"})
        self.epoch_slider = w.IntSlider(description="epoch", min=0, max=0, value=0, continuous_update=True,
                                        layout=w.Layout(width="420px"))
        self.play = w.Play(min=0, max=0, value=0, interval=700, description="play the epochs")
        w.jslink((self.play, "value"), (self.epoch_slider, "value"))
        # the kernel side follows too (jslink acts in the browser only): the same epoch with or without a front-end
        self.play.observe(self._on_play, names="value")
        self.epoch_slider.observe(self._on_slider, names="value")
        self.action_select = w.Dropdown(description="action head", options=[], layout=w.Layout(width="340px"))
        self.obs_select = w.Dropdown(description="observation", options=[], layout=w.Layout(width="340px"))
        self.dim_select = w.SelectMultiple(description="dimensions", options=[], rows=4,
                                           layout=w.Layout(width="260px", display="none"))
        self.action_note = w.HTML()
        self.obs_note = w.HTML()
        self.action_fig = FigureWidget(layout=go.Layout(height=330, margin={"l": 60, "r": 20, "t": 60, "b": 50},
                                                        barmode="overlay"))
        self.obs_fig = FigureWidget(layout=go.Layout(height=330, margin={"l": 60, "r": 20, "t": 70, "b": 50}))
        self.summary_fig = FigureWidget(layout=go.Layout(height=300, margin={"l": 60, "r": 20, "t": 60, "b": 50}))
        self.summary_box = w.VBox([self.summary_fig], layout=w.Layout(display="none"))
        for control in (self.prefix_select, self.epoch_slider):
            control.observe(lambda _: self._redraw(), names="value")
        self.action_select.observe(lambda _: self._redraw(actions=True, observations=False), names="value")
        self.obs_select.observe(lambda _: self._on_obs_key(), names="value")
        self.dim_select.observe(lambda _: self._redraw(actions=False, observations=True), names="value")
        # actions and observations side by side where the screen is wide enough (one column where it is not), so
        # that one epoch's distributions fit a screen; the epoch shown first is the latest
        actions = w.VBox([w.HTML("<h4 style='margin:6px 0 0 0'>Actions</h4>"), self.action_select, self.action_note,
                          self.action_fig], layout=w.Layout(min_width="0"))
        observations = w.VBox([w.HTML("<h4 style='margin:6px 0 0 0'>Observations</h4>"),
                               w.HBox([self.obs_select, self.dim_select]), self.obs_note, self.obs_fig,
                               self.summary_box], layout=w.Layout(min_width="0"))
        self.grid = w.GridBox([actions, observations], layout=w.Layout(
            grid_template_columns="repeat(auto-fit, minmax(460px, 1fr))", grid_gap="4px 16px"))
        self.grid.add_class("maze-lab-distributions-grid")
        self.widget = themed(w.VBox([self.header, w.HBox([self.prefix_select, self.play, self.epoch_slider]),
                                     self.grid]))
        self.update(force=True)

    # ---- test hooks: the numbers behind the plots ----------------------------------------------------------------
    @property
    def prefix(self) -> str:
        """The prefix shown (train / eval)."""
        return self.prefix_select.value or "train"

    def action_counts(self, epoch: int, label: str, prefix: str | None = None) -> dict[Any, int]:
        """``{action value: count}`` of a discrete head (``{bit: count set}`` for multi-binary) in one epoch."""
        return self.data.action_counts(prefix or self.prefix, label, epoch)

    def histogram(self, epoch: int, label: str, dim: int | None = 0, stage: str = "original",
                  prefix: str | None = None, kind: str = "observation") -> tuple[np.ndarray, np.ndarray]:
        """``(counts, edges)`` of one dimension of an observation (``stage`` original / processed) or of a continuous
        action head (``kind="action"``, ``stage`` ignored) in one epoch; ``dim=None`` pools all dimensions."""
        return self.data.histogram(prefix or self.prefix, kind, label, epoch, dim,
                                   stage if kind == "observation" else "")

    def action_heads(self) -> list[str]:
        """Every action head, as ``policy_key/head``."""
        return self.data.labels("action")

    def observation_keys(self) -> list[str]:
        """Every observation key, as ``policy_key/key``."""
        return self.data.labels("observation")

    def panels(self) -> dict[str, list[str]]:
        """The titles of the plots now shown (figure -> subplot titles)."""
        def titles(fig: Any) -> list[str]:
            return [a.text for a in fig.layout.annotations if a.text and a.xref == "paper"] or \
                [fig.layout.title.text or ""]
        out = {"actions": [self.action_fig.layout.title.text or ""], "observations": titles(self.obs_fig)}
        if self.summary_box.layout.display != "none":
            out["summary"] = [self.summary_fig.layout.title.text or ""]
        return out

    # ---- updates ------------------------------------------------------------------------------------------------
    def update(self, force: bool = False) -> bool:
        """Redraw where the run has new samples (cheap otherwise); returns whether it redrew. Never raises: an
        error is shown in the widget."""
        try:
            self.source.refresh()
            version = self.source.version
            if not force and version == self._seen_version:
                self._draw_header()
                return False
            self._seen_version = version
            self._take_hints()
            self.data.ingest(self.source.store.samples())
            self.error = None
            self._sync_controls()
            self._redraw()
            return True
        except Exception as err:  # noqa: BLE001 - a drawing error must not reach the caller (or the run)
            self._show_error(err)
            return False
        finally:
            with _suppress():
                self._draw_header()

    def _take_hints(self) -> None:
        """Shapes and ranges from the model graphs on disk and the live env (once each is there)."""
        run_dir = self.source.run_dir
        has_graphs = run_dir is not None and any((run_dir / "model_graphs").glob("*.svg")) \
            if run_dir is not None and (run_dir / "model_graphs").is_dir() else False
        run = _run_of(self._origin)
        live = getattr(run, "_trainer", None) is not None
        marker = (has_graphs, live)
        if marker == self._hints_from:
            return
        self._hints_from = marker
        shapes, ranges = _graph_shapes(run_dir) if has_graphs else ({}, {})
        live_shapes, live_ranges, multi = _live_spaces(run) if live else ({}, {}, set())
        shapes.update(live_shapes)
        shapes.update(self._user_shapes)
        ranges.update(live_ranges)
        data = self.data
        data.shapes, data.ranges, data.multi_binary = shapes, ranges, multi
        data.max_samples = getattr(self.source.store, "max_samples", data.max_samples)
        data._dims.clear()

    def _sync_controls(self) -> None:
        """Options and ranges of the controls from the data; their change events draw nothing meanwhile (the caller
        draws once afterwards)."""
        self._quiet = True
        try:
            self._sync_controls_now()
        finally:
            self._quiet = False

    def _sync_controls_now(self) -> None:
        d = self.data
        prefixes = d.prefixes()
        if list(self.prefix_select.options) != prefixes:
            current = self.prefix_select.value
            self.prefix_select.options = prefixes
            self.prefix_select.value = current if current in prefixes else (prefixes[0] if prefixes else None)
        epochs = d.epochs()
        if epochs:
            at_end = self.epoch_slider.value >= self.epoch_slider.max or self._seen_version is None
            lo, hi = epochs[0], epochs[-1]
            for ctl in (self.epoch_slider, self.play):
                ctl.max = max(hi, ctl.min)
                ctl.min = lo
                ctl.max = hi
            if at_end or self.epoch_slider.value < lo:
                self.epoch_slider.value = hi
        for select, kind in ((self.action_select, "action"), (self.obs_select, "observation")):
            labels = d.labels(kind)
            options = [(self._option_label(kind, lab), lab) for lab in labels]
            if list(select.options) != options:
                current = select.value
                select.options = options
                select.value = current if current in labels else (labels[0] if labels else None)

    def _option_label(self, kind: str, label: str) -> str:
        key = self.data.keys[(kind, label)]
        where = f"policy {key.policy_key} · " if key.policy_key else ""
        extra = f" ({self.data.action_space(label)})" if kind == "action" else ""
        return f"{where}{key.name}{extra}"

    def _on_play(self, change: Any) -> None:
        if self.epoch_slider.value != change["new"]:
            self.epoch_slider.value = max(self.epoch_slider.min, min(self.epoch_slider.max, change["new"]))

    def _on_slider(self, change: Any) -> None:
        if self.play.value != change["new"] and self.play.min <= change["new"] <= self.play.max:
            self.play.value = change["new"]

    def _on_obs_key(self) -> None:
        self._obs_layout = None
        if not self._quiet:
            self._sync_dims()
            self._redraw(actions=False, observations=True)

    def _obs_dim(self, label: str) -> tuple[int | None, str]:
        """The number of dimensions to show for an observation key, and the stage whose shape names them."""
        best: tuple[int | None, str] = (None, "original")
        for stage in self.data.stages(label, self.prefix) or ["original"]:
            n = self.data.dim("observation", label, stage)
            shape = self.data.shape("observation", label, stage) or ()
            if n is not None and (best[0] is None or n > best[0] or (n == best[0] and len(shape) > 1)):
                best = (n, stage)
        return best

    def _sync_dims(self) -> None:
        label = self.obs_select.value
        d, stage = self._obs_dim(label) if label else (None, "")
        if d is None or d <= MAX_ROWS:
            self.dim_select.layout.display = "none"
            return
        options = [(self.data.dim_name("observation", label, i, stage), i) for i in range(d)]
        if list(self.dim_select.options) != options:
            self.dim_select.options = options
            self.dim_select.value = (0,)
        self.dim_select.layout.display = ""

    def _redraw(self, actions: bool = True, observations: bool = True) -> None:
        if self._quiet:
            return
        try:
            if actions:
                self._draw_actions()
            if observations:
                self._sync_dims()
                self._draw_observations()
        except Exception as err:  # noqa: BLE001 - shown, never raised into a callback or the poller
            self._show_error(err)

    def _show_error(self, err: Exception) -> None:
        self.error = f"{type(err).__name__}: {err}"
        with _suppress():
            self._draw_header()

    def _draw_header(self) -> None:
        src = self.source
        parts = [f"<b>{html.escape(src.name)}</b> · action and observation distributions · status {src.status}"]
        epochs = self.data.epochs()
        if epochs:
            parts.append(f"epochs {epochs[0]}–{epochs[-1]}")
        elif src.live:
            parts.append("waiting for the first epoch with samples")
        else:
            parts.append("no action or observation samples in this run (the monitoring wrapper records them)")
        text = " · ".join(parts)
        for problem in (src.load_error, src.error and src.error.strip().splitlines()[-1], self.error):
            if problem:
                text += f"<br><span style='color:#b91c1c'>{html.escape(str(problem))}</span>"
        if self.header.value != text:
            self.header.value = text

    # ---- actions ------------------------------------------------------------------------------------------------
    def _draw_actions(self) -> None:
        fig, d = self.action_fig, self.data
        label, prefix, epoch = self.action_select.value, self.prefix, self.epoch_slider.value
        if label is None:
            with fig.batch_update():
                fig.data = []
                fig.layout.title.text = "Actions: no action samples recorded"
            self._action_layout = None
            return
        space = d.action_space(label)
        n = d.raw(prefix, "action", label, epoch).size
        title = f"Actions of {self._option_label('action', label)} — {prefix}, epoch {epoch}"
        if space in ("discrete", "multi-binary"):
            counts = d.action_counts(prefix, label, epoch)
            layout = ("bars", label)
            if self._action_layout != layout:
                fig.data = []
                fig.add_bar(x=[], y=[], name="count", marker={"color": "#2b5797"},
                            hovertemplate="value %{x}: %{y} times<extra></extra>")
                self._action_layout = layout
            total = sum(counts.values()) if space == "discrete" else max(1, n // max(1, len(counts)))
            with fig.batch_update():
                fig.data[0].x = [str(v) for v in counts]
                fig.data[0].y = list(counts.values())
                fig.data[0].text = [f"{100 * c / total:.0f}%" if total and c else "" for c in counts.values()]
                fig.data[0].textposition = "outside"
                fig.layout.title.text = f"{title} ({n} samples)"
                fig.layout.xaxis.title.text = "bit of the action" if space == "multi-binary" else "action value"
                fig.layout.xaxis.type = "category"
                fig.layout.yaxis.title.text = "times set" if space == "multi-binary" else "count"
            note = "" if d.ranges.get(label) or space == "multi-binary" else \
                "the head's range is not known here: values never taken are not shown"
        else:
            dim = d.dim("action", label)
            dims = list(range(dim)) if dim is not None and d.per_dim(prefix, "action", label, epoch) is not None \
                else [None]
            dims = dims[:8]
            layout = ("hist", label, tuple(dims))
            if self._action_layout != layout:
                fig.data = []
                for i in dims:
                    name = "all dimensions" if i is None else f"dimension {d.dim_name('action', label, i)}"
                    fig.add_bar(x=[], y=[], name=name, opacity=0.6 if len(dims) > 1 else 1.0)
                self._action_layout = layout
            with fig.batch_update():
                for trace, i in zip(fig.data, dims, strict=True):
                    counts, edges = d.histogram(prefix, "action", label, epoch, i)
                    trace.x = ((edges[:-1] + edges[1:]) / 2).tolist()
                    trace.y = counts.tolist()
                    trace.width = 0.94 * float(edges[1] - edges[0])  # a hairline between bins
                fig.layout.title.text = f"{title} ({n} values)"
                fig.layout.xaxis.title.text = "action value"
                fig.layout.xaxis.type = "linear"
                fig.layout.yaxis.title.text = "count"
                fig.layout.showlegend = len(dims) > 1
            note = "dimensions pooled: the head's shape is not known here" if dims == [None] else ""
        self.action_note.value = f"<span style='color:#6b7280'>{note}</span>" if note else ""

    # ---- observations -------------------------------------------------------------------------------------------
    def _shown_dims(self, label: str, prefix: str, epoch: int) -> tuple[list[int | None], str]:
        d = self.data
        dim, _ = self._obs_dim(label)
        splittable = dim is not None and any(d.per_dim(prefix, "observation", label, epoch, s) is not None
                                             for s in d.stages(label, prefix))
        if not splittable:
            reason = "the observation's shape is not known here" if dim is None else \
                "the store kept a subsample of the values, so the dimensions cannot be told apart"
            return [None], f"all dimensions pooled: {reason}"
        if dim <= MAX_ROWS:
            return list(range(dim)), ""
        picked = list(self.dim_select.value or (0,))[:MAX_ROWS]
        return picked, f"{dim} dimensions: the summary below shows each; pick dimensions for histograms"

    def _draw_observations(self) -> None:
        from plotly.subplots import make_subplots

        d, fig = self.data, self.obs_fig
        label, prefix, epoch = self.obs_select.value, self.prefix, self.epoch_slider.value
        if label is None:
            with fig.batch_update():
                fig.data = []
                fig.layout.annotations = []
                fig.layout.title.text = "Observations: no observation samples recorded"
            self._obs_layout = None
            self.summary_box.layout.display = "none"
            return
        stages = d.stages(label, prefix) or ["original"]
        dims, note = self._shown_dims(label, prefix, epoch)
        _, naming = self._obs_dim(label)
        layout = (label, prefix, tuple(stages), tuple(dims))
        name = self._option_label("observation", label)
        if self._obs_layout != layout:
            titles = []
            for i in dims:
                where = "all dimensions" if i is None else f"dimension {d.dim_name('observation', label, i, naming)}"
                titles += [f"{where}, {s}" + (" (after pre-processing)" if s == "processed" else " (from the env)")
                           for s in stages]
            row_px, gap_px = 200, 90  # room below each row for its tick labels, axis title and the next row's title
            plot_px = len(dims) * row_px + (len(dims) - 1) * gap_px
            template = make_subplots(rows=len(dims), cols=len(stages), subplot_titles=titles,
                                     horizontal_spacing=0.1, vertical_spacing=gap_px / plot_px if len(dims) > 1 else 0)
            with fig.batch_update():
                fig.data = []
                fig.layout = template.layout
                for r, _ in enumerate(dims):
                    for c, s in enumerate(stages):
                        idx = r * len(stages) + c + 1  # make_subplots numbers the axes row by row from the top left
                        suffix = "" if idx == 1 else str(idx)
                        fig.add_bar(x=[], y=[], xaxis=f"x{suffix}", yaxis=f"y{suffix}", showlegend=False,
                                    marker={"color": "#2b5797" if s == "original" else "#c9453b"},
                                    hovertemplate="%{x:.3g}: %{y}<extra></extra>")
                        fig.layout[f"xaxis{suffix}"].title.text = "value" if s == "original" else "processed value"
                        if c == 0:
                            fig.layout[f"yaxis{suffix}"].title.text = "count"
                fig.layout.height = plot_px + 80 + 60
                fig.layout.margin = {"l": 60, "r": 20, "t": 80, "b": 60}
                fig.layout.bargap = 0.02
            self._obs_layout = layout
        with fig.batch_update():
            k = 0
            for i in dims:
                for s in stages:
                    counts, edges = d.histogram(prefix, "observation", label, epoch, i, s)
                    trace = fig.data[k]
                    trace.x = ((edges[:-1] + edges[1:]) / 2).tolist()
                    trace.y = counts.tolist()
                    trace.width = 0.94 * float(edges[1] - edges[0])  # a hairline between bins
                    k += 1
            n = d.raw(prefix, "observation", label, epoch, stages[0]).size
            per = d.dim("observation", label, stages[0])
            count = f"{n // per} observations" if per and n % per == 0 else f"{n} values"
            fig.layout.title.text = f"Observation {name} — {prefix}, epoch {epoch} ({count})"
        self.obs_note.value = f"<span style='color:#6b7280'>{html.escape(note)}</span>" if note else ""
        self._draw_summary(label, prefix, epoch, stages)

    def _draw_summary(self, label: str, prefix: str, epoch: int, stages: list[str]) -> None:
        d, fig = self.data, self.summary_fig
        dim, naming = self._obs_dim(label)
        if dim is None or dim <= 1 or not any(d.summary(prefix, "observation", label, epoch, s) for s in stages):
            self.summary_box.layout.display = "none"
            return
        self.summary_box.layout.display = ""
        wanted = [(s, part) for s in ("original", "processed") for part in ("band", "mean", "range")]
        if len(fig.data) != len(wanted):
            with fig.batch_update():
                fig.data = []
                for s, part in wanted:
                    color = "43,87,151" if s == "original" else "201,69,59"
                    if part == "band":
                        fig.add_scatter(x=[], y=[], fill="toself", fillcolor=f"rgba({color},0.18)", mode="lines",
                                        line={"width": 0}, name=f"{s}: mean ± std", hoverinfo="skip")
                    elif part == "mean":
                        fig.add_scatter(x=[], y=[], mode="lines+markers", line={"color": f"rgb({color})"},
                                        marker={"size": 4}, name=f"{s}: mean")
                    else:
                        fig.add_scatter(x=[], y=[], mode="lines", line={"color": f"rgba({color},0.5)", "dash": "dot",
                                                                        "width": 1}, name=f"{s}: min / max")
                fig.layout.xaxis.title.text = "dimension (flat index)"
                fig.layout.yaxis.title.text = "value"
        with fig.batch_update():
            fig.layout.xaxis.dtick = max(1, (dim or 1) // 20)
            for trace, (s, part) in zip(fig.data, wanted, strict=True):
                stats = d.summary(prefix, "observation", label, epoch, s) if s in stages else {}
                if not stats:
                    trace.x, trace.y, trace.visible = [], [], False
                    continue
                trace.visible = True
                x = list(range(len(stats["mean"])))
                if part == "band":
                    lo, hi = stats["mean"] - stats["std"], stats["mean"] + stats["std"]
                    trace.x, trace.y = x + x[::-1], hi.tolist() + lo[::-1].tolist()
                elif part == "mean":
                    trace.x, trace.y = x, stats["mean"].tolist()
                    trace.customdata = [d.dim_name("observation", label, i, s) for i in x]
                    trace.hovertemplate = "dimension %{customdata}: mean %{y:.3g}<extra>" + s + "</extra>"
                else:
                    trace.x = x + [None] + x
                    trace.y = stats["min"].tolist() + [None] + stats["max"].tolist()
            fig.layout.title.text = (f"Every dimension of {self._option_label('observation', label)} — {prefix}, "
                                     f"epoch {epoch}: mean ± std, min and max")

class _suppress:
    """Swallow any error (drawing a header must not raise from a finally)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return True
