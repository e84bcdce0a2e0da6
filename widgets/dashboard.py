"""A live training dashboard for notebooks: rewards, KPIs, trainer statistics, action and observation
distributions, read from a run's StatsStore on the kernel's own event loop (never in the training thread)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import ipywidgets as w
import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from maze_lab.core.log_stats.writers import StatsStore

_COLORS = {"train": "#1f77b4", "eval": "#d62728"}


def _store_of(source: Any) -> tuple[StatsStore, Any]:
    """(store, handle-or-None) from a RunHandle, RunContext, StatsStore or run directory."""
    if isinstance(source, StatsStore):
        return source, None
    if hasattr(source, "store") and hasattr(source, "progress"):  # RunHandle
        return source.store, source
    if hasattr(source, "_single"):  # RunContext
        return source._single().store, None
    if isinstance(source, str | Path):
        from maze_lab.run.runs import load_run

        return load_run(source).stats, None
    raise TypeError(f"TrainingDashboard needs a RunHandle, RunContext, StatsStore or run directory, got "
                    f"{type(source).__name__}")


class TrainingDashboard:
    """Plots of a (running or finished) training run that redraw when new epochs arrive.

    :param source: a RunHandle (live), a RunContext, a StatsStore or a run directory.
    :param refresh_seconds: how often the kernel's event loop checks for new statistics.
    """

    def __init__(self, source: Any, refresh_seconds: float = 1.0):
        self.store, self.handle = _store_of(source)
        self.refresh_seconds = refresh_seconds
        self._seen_version = -1
        self._task: asyncio.Task | None = None
        self.header = w.HTML()
        self.rewards = go.FigureWidget(make_subplots(rows=1, cols=2,
                                                     subplot_titles=("episode reward", "episode length")))
        self.kpis = go.FigureWidget(layout={"title": "KPIs (epoch mean)", "height": 320})
        self.trainer = go.FigureWidget(make_subplots(rows=1, cols=3, subplot_titles=("losses", "entropy",
                                                                                        "gradient norms")))
        self.actions = go.FigureWidget(layout={"title": "action distribution", "height": 320, "barmode": "overlay"})
        self.observations = go.FigureWidget(layout={"title": "observation distribution", "height": 320,
                                                    "barmode": "overlay"})
        for fig in (self.rewards, self.trainer):
            fig.update_layout(height=320, margin={"t": 40, "b": 30, "l": 40, "r": 10})
        self.epoch_slider = w.IntSlider(description="epoch", min=0, max=0, continuous_update=False)
        self.epoch_slider.observe(lambda _: self._draw_distributions(), names="value")
        self.tabs = w.Tab(children=[self.rewards, self.kpis, self.trainer,
                                    w.VBox([self.epoch_slider, self.actions, self.observations])])
        for i, title in enumerate(("Rewards", "KPIs", "Trainer", "Distributions")):
            self.tabs.set_title(i, title)
        self.widget = w.VBox([self.header, self.tabs])
        self.refresh(force=True)

    # ---- display and live updates --------------------------------------------------------------------------
    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
        if self.handle is not None and self._task is None:
            self.start()

    def start(self) -> None:
        """Redraw on the kernel's event loop every ``refresh_seconds`` while the run is going."""
        loop = asyncio.get_event_loop()
        self._task = loop.create_task(self._poll())

    def stop(self) -> None:
        """Stop the live updates."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _poll(self) -> None:
        while True:
            try:
                self.refresh()
            except Exception as err:  # noqa: BLE001 - a broken plot must never disturb the run
                self.header.value = f"<b>dashboard error:</b> {err}"
            if self.handle is not None and not self.handle.running:
                self.refresh(force=True)
                return
            await asyncio.sleep(self.refresh_seconds)

    # ---- drawing -------------------------------------------------------------------------------------------
    def refresh(self, force: bool = False) -> bool:
        """Redraw where the store has new statistics; returns whether anything was redrawn."""
        self._draw_header()
        if not force and self.store.version == self._seen_version:
            return False
        self._seen_version = self.store.version
        df = self.store.to_dataframe()
        self._draw_rewards(df)
        self._draw_kpis(df)
        self._draw_trainer(df)
        epochs = sorted({s[0] for s in self.store.samples()})
        if epochs:
            at_end = self.epoch_slider.value in (self.epoch_slider.max, 0)
            self.epoch_slider.max = max(epochs[-1], self.epoch_slider.min)  # max first: min may not pass max
            self.epoch_slider.min = epochs[0]
            self.epoch_slider.max = epochs[-1]
            if at_end:
                self.epoch_slider.value = epochs[-1]
        self._draw_distributions()
        return True

    def _draw_header(self) -> None:
        if self.handle is None:
            self.header.value = "<b>run statistics</b>"
            return
        p = self.handle.progress
        reward = p.get("last_eval_reward")
        reward = "–" if reward is None else f"{reward:.2f}"
        self.header.value = (f"<b>{p['status']}</b> · epoch {p.get('epoch')}/{p.get('n_epochs') or '∞'} · "
                             f"{p.get('env_steps', 0):,} env steps · last eval reward {reward} · "
                             f"<code>{self.handle.run_dir}</code>")

    @staticmethod
    def _series(df: Any, prefix: str, topic: str, event: str, name: str) -> tuple[list, list]:
        sel = df[(df.prefix == prefix) & (df.topic == topic) & (df.event == event) & (df.name == name)]
        return sel.epoch.tolist(), sel.value.tolist()

    def _draw_rewards(self, df: Any) -> None:
        traces = []
        for prefix in ("train", "eval"):
            x, mean = self._series(df, prefix, "BaseEnvEvents", "reward", "mean")
            if not x:
                continue
            _, lo = self._series(df, prefix, "BaseEnvEvents", "reward", "min")
            _, hi = self._series(df, prefix, "BaseEnvEvents", "reward", "max")
            _, length = self._series(df, prefix, "BaseEnvEvents", "reward", "mean_step_count")
            color = _COLORS[prefix]
            traces.append((go.Scatter(x=x + x[::-1], y=hi + lo[::-1], fill="toself", line={"width": 0},
                                      fillcolor=color, opacity=0.15, name=f"{prefix} min–max", showlegend=False,
                                      hoverinfo="skip"), 1))
            traces.append((go.Scatter(x=x, y=mean, mode="lines+markers", name=f"{prefix} mean",
                                      line={"color": color}), 1))
            traces.append((go.Scatter(x=x, y=length, mode="lines", name=f"{prefix} length",
                                      line={"color": color, "dash": "dot"}), 2))
        with self.rewards.batch_update():
            self.rewards.data = []
            for trace, col in traces:
                self.rewards.add_trace(trace, row=1, col=col)
            self.rewards.update_xaxes(title_text="epoch")

    def _draw_kpis(self, df: Any) -> None:
        kpis = df[(df.topic == "BaseEnvEvents") & (df.event == "kpi") & df.name.str.startswith("mean/")]
        with self.kpis.batch_update():
            self.kpis.data = []
            self.kpis.layout.annotations = [] if not kpis.empty else [
                {"text": "this env defines no KPIs (CoreEnv.get_kpi_calculator)", "showarrow": False,
                 "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}]
            for (prefix, name), part in kpis.groupby(["prefix", "name"]):
                self.kpis.add_scatter(x=part.epoch, y=part.value, mode="lines+markers",
                                      name=f"{prefix} {name.split('/', 1)[1]}")

    def _draw_trainer(self, df: Any) -> None:
        tr = df[df.topic == "ActorCriticEvents"]
        panels = {"policy_loss": 1, "critic_value_loss": 1, "policy_entropy": 2, "policy_grad_norm": 3,
                  "critic_grad_norm": 3}
        with self.trainer.batch_update():
            self.trainer.data = []
            for (event, name), part in tr[tr.event.isin(list(panels))].groupby(["event", "name"]):
                label = event + (f" [{name}]" if name else "")
                self.trainer.add_trace(go.Scatter(x=part.epoch, y=part.value, mode="lines", name=label),
                                       row=1, col=panels[event])

    def _draw_distributions(self) -> None:
        epoch = self.epoch_slider.value
        samples = self.store.samples(epoch=epoch)
        with self.actions.batch_update():
            self.actions.data = []
            for _, prefix, topic, _, name, values in samples:
                if topic in ("DiscreteActionEvents", "ContinuousActionEvents") and prefix == "train":
                    self._add_hist(self.actions, values, name, discrete=topic == "DiscreteActionEvents")
        with self.observations.batch_update():
            self.observations.data = []
            for _, prefix, topic, event, name, values in samples:
                if topic == "ObservationEvents" and prefix == "train" and event == "observation_original":
                    self._add_hist(self.observations, values, name, discrete=False)

    @staticmethod
    def _add_hist(fig: go.FigureWidget, values: np.ndarray, name: str, discrete: bool) -> None:
        if discrete:
            uniq, counts = np.unique(values, return_counts=True)
            fig.add_bar(x=uniq, y=counts / counts.sum(), name=name, opacity=0.7)
        else:
            fig.add_histogram(x=values, name=name, histnorm="probability", opacity=0.6, nbinsx=40)

    # ---- export --------------------------------------------------------------------------------------------
    def figures(self) -> dict[str, go.FigureWidget]:
        """The dashboard's figures by tab name."""
        return {"rewards": self.rewards, "kpis": self.kpis, "trainer": self.trainer, "actions": self.actions,
                "observations": self.observations}

    def to_html(self, path: str | Path) -> Path:
        """A static HTML page with every figure (for sharing a run; needs no kernel)."""
        import plotly.io as pio

        parts = [f"<h3>{name}</h3>" + pio.to_html(go.Figure(fig), include_plotlyjs=(i == 0), full_html=False)
                 for i, (name, fig) in enumerate(self.figures().items())]
        path = Path(path)
        path.write_text(f"<html><head><meta charset='utf-8'></head><body>{self.header.value}{''.join(parts)}"
                        f"</body></html>")
        return path
