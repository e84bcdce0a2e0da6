"""The run cockpit: its curves follow the StatsStore (custom topics included), it opens finished and failed runs,
a drawing error is shown without stopping the polling, it renders in Chromium, and in a real kernel it follows a
live run whose stop button stops it."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import textwrap
import time
from abc import ABC
from pathlib import Path

import numpy as np
import pytest
from run_utils import TINY, stop_if_live, train_tiny_run

from maze_lab.core.log_stats.aggregation import StatKey
from maze_lab.core.log_stats.base_events import BaseEnvEvents, DiscreteActionEvents
from maze_lab.core.log_stats.writers import StatsStore
from maze_lab.train.trainers.bc.events import ImitationEvents
from maze_lab.train.trainers.common.events import ActorCriticEvents

pytest.importorskip("plotly")
pytest.importorskip("ipywidgets")

from maze_lab.widgets.dashboard import TrainingDashboard, discover_charts  # noqa: E402
from maze_lab.widgets.sources import SeriesBook, series_of  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


class InventoryEvents(ABC):
    """A custom env's own topic (the cockpit knows nothing of it)."""

    def pieces_in_inventory(self, value: float):
        """Pieces in the inventory."""

    def piece_replenished(self, value: float):
        """A replenished piece."""


def _store(n_epochs: int = 3) -> StatsStore:
    store = StatsStore()
    for epoch in range(1, n_epochs + 1):
        for prefix, offset in (("train", 0.0), ("eval", 5.0)):
            store.write(prefix, epoch, {
                StatKey(BaseEnvEvents.reward, "mean", None): 10.0 * epoch + offset,
                StatKey(BaseEnvEvents.reward, "min", None): 10.0 * epoch + offset - 2,
                StatKey(BaseEnvEvents.reward, "max", None): 10.0 * epoch + offset + 2,
                StatKey(BaseEnvEvents.reward, "mean_step_count", None): 20.0 * epoch,
                StatKey(BaseEnvEvents.kpi, "mean", ("usage",)): 1.0 / epoch,
                StatKey(DiscreteActionEvents.action, None, (0, "action")): [0, 1, 1, 1],
            })
    return store


def _custom_store(n_epochs: int = 4) -> StatsStore:
    """Rewards, KPIs with bands, a custom topic, actor-critic statistics of two policy keys and BC's validation."""
    rng = np.random.default_rng(3)
    store = StatsStore()
    for epoch in range(1, n_epochs + 1):
        env = {}
        for event in (BaseEnvEvents.reward, InventoryEvents.pieces_in_inventory):
            lo, hi = sorted(rng.normal(size=2))
            env.update({StatKey(event, "mean", None): (lo + hi) / 2, StatKey(event, "min", None): lo,
                        StatKey(event, "max", None): hi, StatKey(event, "std", None): hi - lo})
        env[StatKey(BaseEnvEvents.reward, "mean_step_count", None)] = float(rng.integers(10, 50))
        for stat in ("mean", "min", "max", "std"):
            env[StatKey(BaseEnvEvents.kpi, stat, ("waste",))] = float(rng.normal())
        env[StatKey(InventoryEvents.piece_replenished, "total", None)] = float(epoch * 3)
        trainer = {StatKey(ActorCriticEvents.time_epoch, None, None): float(rng.random())}
        for key in ("cutting", "selection"):
            trainer[StatKey(ActorCriticEvents.policy_loss, None, (key,))] = float(rng.normal())
            trainer[StatKey(ActorCriticEvents.policy_entropy, None, (key,))] = float(rng.random())
        store.begin_epoch(epoch)
        store.write("train", epoch, {**env, **trainer})
        store.write("eval", epoch, env)
        store.write("validation", epoch, {StatKey(ImitationEvents.policy_loss, None, ("cutting",)): 1.0 / epoch,
                                          StatKey(ImitationEvents.discrete_accuracy, None, ("cutting", "piece")):
                                          epoch / 10})
        store.end_epoch(epoch)
    return store


def _assert_curves_match(dash: TrainingDashboard, store: StatsStore, everything: bool = True) -> dict:
    """Every curve the cockpit draws equals the store's statistic (and, with ``everything``, every statistic of the
    store is drawn); returns the curve data."""
    data = dash.curve_data()
    df = store.to_dataframe()
    for (prefix, topic, event, name), part in df.groupby(["prefix", "topic", "event", "name"]):
        label = f"{prefix}/{topic}/{event}/{name}"
        if label not in data:
            assert not everything, f"{label} is not drawn; drawn: {sorted(data)}"
            continue
        epochs, values = data[label]
        part = part.sort_values("epoch")
        assert list(epochs) == part.epoch.tolist(), label
        np.testing.assert_allclose(values, part.value.to_numpy(), err_msg=label)
        assert len(epochs) == part.epoch.nunique(), label  # one point per epoch
    return data


# ---- curves ------------------------------------------------------------------------------------------------------
def test_every_statistic_of_custom_topics_shows_and_matches_the_store():
    store = _custom_store(4)
    dash = TrainingDashboard(store)
    keys = list(dash.charts)
    # discovered from the data, BaseEnvEvents first, the custom topic and BC's statistics included
    assert keys[0] == "BaseEnvEvents / reward (mean, min–max)"
    assert "InventoryEvents / pieces_in_inventory (mean, min–max)" in keys
    assert "InventoryEvents / piece_replenished / total" in keys
    assert "BaseEnvEvents / kpi / waste (mean, min–max)" in keys
    assert "ImitationEvents / discrete_accuracy / cutting/piece" in keys
    assert {"ActorCriticEvents / policy_loss / cutting", "ActorCriticEvents / policy_loss / selection"} <= set(keys)
    # mean/min/max of a band are one chart, not three
    assert not any(k.endswith("/ min") or k.endswith("/ max") for k in keys)
    # defaults: rewards, episode length, KPIs, losses, accuracies, entropies (not the timings)
    assert dash.shown == ["BaseEnvEvents / reward (mean, min–max)", "BaseEnvEvents / reward / mean_step_count",
                          "BaseEnvEvents / kpi / waste (mean, min–max)", "ActorCriticEvents / policy_loss / cutting",
                          "ActorCriticEvents / policy_loss / selection", "ActorCriticEvents / policy_entropy / cutting",
                          "ActorCriticEvents / policy_entropy / selection", "ImitationEvents / policy_loss / cutting",
                          "ImitationEvents / discrete_accuracy / cutting/piece"]
    _assert_curves_match(dash, store, everything=False)
    dash.show(dash.charts)
    data = _assert_curves_match(dash, store)
    assert all(len(epochs) == 4 for epochs, _ in data.values())  # every statistic of every epoch
    # the band itself: max forward, min backward, per prefix
    fig = dash.figures()["InventoryEvents / pieces_in_inventory (mean, min–max)"]
    band = next(t for t in fig.data if t.name == "eval min–max")
    lo = store.series("InventoryEvents", "pieces_in_inventory", "min", prefix="eval").to_numpy()
    hi = store.series("InventoryEvents", "pieces_in_inventory", "max", prefix="eval").to_numpy()
    assert list(band.x) == [1, 2, 3, 4, 4, 3, 2, 1]
    np.testing.assert_allclose(band.y, np.concatenate([hi, lo[::-1]]))
    # the figures are laid out by topic
    titles = [c.value for c in dash.curves.children[::2]]
    assert [t.split(">")[1].split("<")[0] for t in titles] == ["BaseEnvEvents", "InventoryEvents",
                                                               "ActorCriticEvents", "ImitationEvents"]


def test_traces_are_updated_in_place_and_new_statistics_appear():
    store = _store(3)
    dash = TrainingDashboard(store)
    means = [t for t in dash.rewards.data if t.name == "train mean"]
    assert list(means[0].x) == [1, 2, 3] and list(means[0].y) == [10.0, 20.0, 30.0]
    assert dash.shown == ["BaseEnvEvents / reward (mean, min–max)", "BaseEnvEvents / reward / mean_step_count",
                          "BaseEnvEvents / kpi / mean/usage"]
    traces = {key: list(fig.data) for key, fig in dash.figures().items()}
    assert not dash.refresh()  # nothing new
    store.write("train", 4, {StatKey(BaseEnvEvents.reward, "mean", None): 99.0,
                             StatKey(BaseEnvEvents.reward, "min", None): 90.0,
                             StatKey(BaseEnvEvents.reward, "max", None): 100.0,
                             StatKey(InventoryEvents.pieces_in_inventory, "mean", None): 7.0,
                             StatKey(ActorCriticEvents.critic_value_loss, None, (0,)): 0.5})
    assert dash.refresh()
    for key, before in traces.items():  # the same trace objects, new values
        assert all(a is b for a, b in zip(before, dash.figures()[key].data, strict=False)), key
    means = [t for t in dash.rewards.data if t.name == "train mean"]
    assert list(means[0].y)[-1] == 99.0
    # the new topic's statistic is offered; the new loss is shown (a default)
    assert "InventoryEvents / pieces_in_inventory / mean" in dash.charts
    assert "ActorCriticEvents / critic_value_loss / 0" in dash.shown
    assert "InventoryEvents / pieces_in_inventory / mean" in dash.picker.options
    _assert_curves_match(dash, store, everything=False)


def _assert_same_series(book_series: dict, store: StatsStore) -> None:
    want = series_of(store.to_dataframe())
    assert list(book_series) == list(want)  # the same statistics, in the order they were first logged
    for key, (epochs, values) in want.items():
        np.testing.assert_array_equal(book_series[key][0], epochs, err_msg=str(key))
        np.testing.assert_array_equal(book_series[key][1], values, err_msg=str(key))


def test_the_series_book_takes_in_only_new_rows_and_matches_a_full_read():
    store = _custom_store(3)
    book = SeriesBook()
    assert book.update(store) == set(series_of(store.to_dataframe()))  # the first read: every statistic
    _assert_same_series(book.series, store)
    assert book.update(store) == set()  # nothing new
    reward = ("train", "BaseEnvEvents", "reward", "mean")
    kept = book.series[("eval", "BaseEnvEvents", "reward", "mean")]
    store.write("train", 4, {StatKey(BaseEnvEvents.reward, "mean", None): 4.0,
                             StatKey(InventoryEvents.piece_replenished, "count", None): 1.0})
    assert book.update(store) == {reward, ("train", "InventoryEvents", "piece_replenished", "count")}
    assert book.series[("eval", "BaseEnvEvents", "reward", "mean")] is kept  # untouched statistics stay as they are
    _assert_same_series(book.series, store)
    # a resumed run logs epochs 3 and 4 again, then 5: ascending epochs, the last value of each
    for epoch, value in ((3, 30.0), (4, 40.0), (5, 50.0)):
        store.write("train", epoch, {StatKey(BaseEnvEvents.reward, "mean", None): value})
    assert book.update(store) == {reward}
    assert list(book.series[reward][0]) == [1, 2, 3, 4, 5] and list(book.series[reward][1])[2:] == [30, 40, 50]
    _assert_same_series(book.series, store)
    # a large batch and a new store are read whole
    book.WHOLE_ROWS = 2
    store.write("eval", 6, {StatKey(BaseEnvEvents.reward, "mean", None): 6.0,
                            StatKey(BaseEnvEvents.reward, "max", None): 7.0})
    assert book.update(store) == set(book.series)
    _assert_same_series(book.series, store)
    other = _store(2)
    book.update(other)
    _assert_same_series(book.series, other)
    assert book.update(StatsStore()) == set() and book.series == {}


def test_a_redraw_takes_in_the_new_epoch_only(monkeypatch):
    """A live run's new epoch redraws the figures of the statistics it logged, without reading every epoch again."""
    store = _store(3)
    dash = TrainingDashboard(store)
    dash.show(dash.charts)
    monkeypatch.setattr(store, "to_dataframe", lambda: pytest.fail("the cockpit read every epoch again"))
    updated = []
    draw = dash._update_figure
    monkeypatch.setattr(dash, "_update_figure", lambda chart: (updated.append(chart.key), draw(chart)))
    store.write("train", 4, {StatKey(BaseEnvEvents.reward, "mean", None): 99.0,
                             StatKey(BaseEnvEvents.reward, "min", None): 90.0,
                             StatKey(BaseEnvEvents.reward, "max", None): 100.0})
    assert dash.refresh()
    assert updated == ["BaseEnvEvents / reward (mean, min–max)"]  # the other charts have nothing new
    monkeypatch.undo()
    _assert_curves_match(dash, store)


def test_a_followed_directory_without_an_epoch_in_its_summary_shows_its_last_epoch(tmp_path: Path):
    """A run of another process whose summary has no epoch yet: the cockpit's progress is the statistics' last epoch,
    and it follows the epochs as they are appended."""
    from maze_lab.run.run_dir import RunDirectory

    run_dir = tmp_path / "exp" / "run"
    run_dir.mkdir(parents=True)
    RunDirectory(run_dir).write_summary(status="running", experiment="exp", seed=0)
    writer = StatsStore(directory=run_dir)
    for epoch, value in enumerate((3.0, 1.0, 2.0), start=1):
        writer.write("train", epoch, {StatKey(BaseEnvEvents.reward, "mean", None): value})
    writer.flush()
    dash = TrainingDashboard(run_dir)
    assert "epoch 3" in dash.progress_html.value
    writer.write("train", 4, {StatKey(BaseEnvEvents.reward, "mean", None): 5.0})
    writer.close()
    dash.refresh()
    assert "epoch 4" in dash.progress_html.value
    dash.show(dash.charts)
    assert list(dash.curve_data()["train/BaseEnvEvents/reward/mean"][1]) == [3.0, 1.0, 2.0, 5.0]
    dash.close()


def test_the_picker_filters_and_chooses_the_charts():
    dash = TrainingDashboard(_custom_store(2))
    n = len(dash.charts)
    dash.filter_text.value = "inventory"
    assert set(dash.picker.options) == {"InventoryEvents / pieces_in_inventory (mean, min–max)",
                                        "InventoryEvents / pieces_in_inventory / std",
                                        "InventoryEvents / piece_replenished / total"}
    dash.picker.value = ("InventoryEvents / piece_replenished / total",)
    assert "InventoryEvents / piece_replenished / total" in dash.shown
    assert "BaseEnvEvents / reward (mean, min–max)" in dash.shown  # hidden by the filter, still shown
    dash.filter_text.value = "policy loss"  # every word must match
    assert set(dash.picker.options) == {"ActorCriticEvents / policy_loss / cutting",
                                        "ActorCriticEvents / policy_loss / selection",
                                        "ImitationEvents / policy_loss / cutting"}
    assert set(dash.picker.value) == set(dash.picker.options)
    dash.picker.value = ()
    assert not any("policy_loss" in k for k in dash.shown)
    dash.filter_text.value = ""
    assert len(dash.picker.options) == n
    dash._pick_matching(True)
    assert len(dash.shown) == len(dash.figures()) == n
    assert f"{n} of {n}" in dash.picker_count.value
    dash._pick_defaults()
    assert "InventoryEvents / piece_replenished / total" not in dash.shown
    with pytest.raises(KeyError, match="the run has"):
        dash.show(["no such chart"])


def test_band_charts_need_mean_min_and_max():
    charts = discover_charts([("T", "e", "mean"), ("T", "e", "max"), ("T", "e", "mean/a"), ("T", "e", "min/a"),
                              ("T", "e", "max/a"), ("T", "f", ""), ("BaseEnvEvents", "reward", "std")])
    assert [c.key for c in charts] == ["BaseEnvEvents / reward / std", "T / e / mean", "T / e / max",
                                       "T / e / a (mean, min–max)", "T / f"]


# ---- finished and failed runs ------------------------------------------------------------------------------------
def test_a_finished_run_directory(tmp_path: Path):
    run_dir = train_tiny_run(tmp_path)
    dash = TrainingDashboard(run_dir)
    assert "done" in dash.status_html.value and run_dir.name in dash.status_html.value
    assert "epoch 1 / 1" in dash.progress_html.value and "last eval reward" in dash.progress_html.value
    assert dash.progress_bar.value == 1.0 and dash.progress_bar.bar_style == "success"
    assert dash.controls.layout.display == "none"  # nothing to control in a run directory
    assert dash.error_html.layout.display == "none"
    assert "ActorCriticEvents / policy_loss / 0" in dash.shown
    store = StatsStore.load(run_dir)
    _assert_curves_match(dash, store, everything=False)
    dash.show(dash.charts)
    _assert_curves_match(dash, store)
    html_page = dash.to_html(tmp_path / "cockpit.html").read_text()
    assert "episode reward" in html_page and "done" in html_page
    # the distributions and the model graph are tabs, built when first selected
    titles = [dash.tabs.get_title(i) for i in range(len(dash.tabs.children))]
    assert titles == ["Curves", "Distributions", "Model", "Config", "Console"] and dash.views == {}
    dists = dash.open_tab("Distributions")
    assert dash.tabs.children[1].children == (dists.widget,)
    samples = store.samples(topic="DiscreteActionEvents", epoch=1)
    train = next(s for s in samples if s[1] == "train")
    counts = dists.action_counts(1, train[4], prefix="train")
    assert sum(counts.values()) == len(train[5]) and counts[0] == int(np.sum(train[5] == 0))
    model = dash.open_tab("Model")
    assert set(model.graphs) == {"policy_0", "critic_0"}
    dash.close()


def _exploding_factory(at: int):
    """An env factory whose first env raises at its ``at``-th step (the others work)."""
    from maze_lab.core.wrappers.gym_maze_env import make_gym_maze_env
    from maze_lab.core.wrappers.wrapper import Wrapper

    class Exploding(Wrapper):
        def __init__(self, env, explode: bool):
            super().__init__(env)
            self.n, self.explode = 0, explode

        def step(self, action):
            self.n += 1
            if self.explode and self.n >= at:
                raise RuntimeError(f"the env exploded at step {self.n}")
            return self.env.step(action)

    made = itertools.count()
    return lambda: Exploding(make_gym_maze_env("CartPole-v1"), explode=next(made) == 0)


def test_a_failed_run_shows_its_error_and_its_curves_up_to_the_failure(tmp_path: Path):
    from maze_lab.run.run_context import RunContext, RunFailedError

    rc = RunContext(env=_exploding_factory(40), overrides={**TINY, "n_epochs": 10, "log_base_dir": str(tmp_path)},
                    silent=True)
    handle = rc.train_async()
    with pytest.raises(RunFailedError):
        handle.wait(300)
    for source in (handle, handle.run_dir):
        dash = TrainingDashboard(source)
        assert "failed" in dash.status_html.value
        assert dash.error_html.layout.display is None
        text = dash.error_html.value
        assert "the env exploded at step 40" in text and "Traceback" in text and "<details>" in text
        assert dash.controls.layout.display == "none"
        assert dash.progress_bar.bar_style == "danger"
        store = handle.store if source is handle else StatsStore.load(handle.run_dir)
        assert store.to_dataframe().epoch.nunique() >= 1  # the epochs before the failure
        dash.show(dash.charts)
        _assert_curves_match(dash, store)
    rc.close()


# ---- runs of other processes: detached, died, ended with a reason --------------------------------------------------
# a CartPole run of many tiny epochs: it goes on until it is stopped
LIVE_OVERRIDES = {"n_epochs": 1000, "runner.concurrency": 1, "runner.eval_concurrency": 1, "algorithm.epoch_length": 1,
                  "algorithm.n_rollout_steps": 16, "algorithm.eval_repeats": 1, "algorithm.patience": 0}


def _refreshed_until(dash: TrainingDashboard, condition, what: str, timeout: float = 120.0):
    """Refresh the cockpit (what its polling does) until ``condition()`` holds; returns its value."""
    deadline = time.monotonic() + timeout
    while True:
        dash.refresh()
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"still not true after {timeout} s: {what}; errors {dash.errors}; " \
                                            f"status {dash.status_html.value}; request {dash.control_html.value}"
        time.sleep(0.1)


def test_the_cockpit_of_a_detached_run_controls_it_through_its_directory(tmp_path: Path):
    """``TrainingDashboard(attached_run)`` follows a run of its own process: progress and curves grow, and pause,
    resume, checkpoint and stop reach it through its directory without waiting; the cockpit shows each request
    until the run acknowledged it, then the acknowledgement."""
    from maze_lab.run.run_context import RunContext
    from maze_lab.run.run_dir import RunDirectory

    run = RunContext(silent=True, overrides={**LIVE_OVERRIDES, "log_base_dir": str(tmp_path)}).train_async(detach=True)
    try:
        dash = TrainingDashboard(run, refresh_seconds=0.2)
        assert dash.source.handle is None and dash.source.run_dir == run.run_dir  # followed through its directory
        _refreshed_until(dash, lambda: dash.source.status == "running" and len(dash.source.store) >= 2,
                         "two epochs of the detached run")
        assert dash.controls.layout.display is None and dash.source.controllable
        assert not dash.pause_button.disabled and dash.resume_button.disabled
        assert not dash.stop_button.disabled and not dash.checkpoint_button.disabled
        first = len(dash.curve_data()["train/BaseEnvEvents/reward/mean"][0])
        _refreshed_until(dash, lambda: len(dash.curve_data()["train/BaseEnvEvents/reward/mean"][0]) > first,
                         "the reward curve to grow")
        assert "epoch" in dash.progress_html.value and "/ 1000" in dash.progress_html.value

        dash.pause_button.click()  # the click only writes the request: pending until the run acknowledges it
        assert "data-state='pending'" in dash.control_html.value and "pause requested" in dash.control_html.value
        _refreshed_until(dash, lambda: "pause acknowledged" in dash.control_html.value, "the pause acknowledged")
        _refreshed_until(dash, lambda: "paused" in dash.status_html.value, "the status paused")
        assert dash.pause_button.disabled and not dash.resume_button.disabled
        paused_at = RunDirectory(run.run_dir).read_summary().get("epoch")
        dash.resume_button.click()
        _refreshed_until(dash, lambda: "resume acknowledged" in dash.control_html.value, "the resume acknowledged")
        _refreshed_until(dash, lambda: (RunDirectory(run.run_dir).read_summary().get("epoch") or 0) > paused_at,
                         "epochs after the resume")

        dash.checkpoint_button.click()
        written = _refreshed_until(dash, lambda: "checkpoint written" in dash.control_html.value and
                                   dash.source.summary(max_age=0)["control"].get("checkpoint"),
                                   "the checkpoint written")
        assert Path(written).is_file() and Path(written).name in dash.control_html.value
        assert run.running  # a checkpoint leaves the run going

        dash.stop_button.click()
        _refreshed_until(dash, lambda: "stop acknowledged" in dash.control_html.value, "the stop acknowledged")
        _refreshed_until(dash, lambda: dash.source.status == "stopped", "the status stopped")
        assert dash.controls.layout.display == "none" and not dash.source.live
        assert dash.reason_html.layout.display is None and "stopped on request" in dash.reason_html.value
        assert RunDirectory(run.run_dir).last_checkpoint.exists()
        assert run.wait(60) == "stopped"
        dash.close()
    finally:
        stop_if_live(run.run_dir)


def _ended_copy(finished: Path, base: Path, name: str, **summary: object) -> Path:
    from maze_lab.run.run_dir import RunDirectory

    run_dir = base / "exp" / name
    shutil.copytree(finished, run_dir)
    RunDirectory(run_dir).write_summary(**summary)
    return run_dir


def test_each_ending_is_shown_with_its_reason_and_a_run_whose_process_is_gone_died(tmp_path: Path):
    import json
    import subprocess
    import sys

    from maze_lab.run.run_status import OWNER_FILE, owner_record

    finished = train_tiny_run(tmp_path / "finished")
    early = _ended_copy(finished, tmp_path, "early", status="early-stopped",
                        reason="early stopping: no improvement for 3 epochs")
    dash = TrainingDashboard(early)
    assert "early-stopped" in dash.status_html.value and dash.controls.layout.display == "none"
    assert "early stopping: no improvement for 3 epochs" in dash.reason_html.value
    assert dash.reason_html.layout.display is None and dash.progress_bar.bar_style == "success"
    dash.close()

    # a run that says it trains, owned by a process that has ended without saying how the run ended
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    record = owner_record(gone.pid, mode="detached")
    gone.wait()
    record["heartbeat"] = time.mktime((2024, 5, 6, 7, 8, 9, 0, 0, -1))
    died = _ended_copy(finished, tmp_path, "died", status="running", reason=None)
    (died / OWNER_FILE).write_text(json.dumps(record))
    dash = TrainingDashboard(died)
    assert "died" in dash.status_html.value and dash.progress_bar.bar_style == "danger"
    assert dash.controls.layout.display == "none" and not dash.source.live and not dash.source.controllable
    assert "last seen 2024-05-06T07:08:09" in dash.reason_html.value and "data-status='died'" in dash.reason_html.value
    with pytest.raises(Exception, match="not training"):
        dash.source.request("stop")
    dash.close()

    from maze_lab.widgets.comparison import RunComparison

    comparison = RunComparison([str(early), str(died), str(finished)])
    table = comparison.table().set_index("run")
    statuses = dict(zip(table.run_dir.map(lambda p: Path(p).name), table.status, strict=True))
    assert statuses == {"early": "early-stopped", "died": "died", finished.name: "done"}
    assert "last seen 2024-05-06T07:08:09" in table.loc[table.status == "died", "error"].iloc[0]
    assert not comparison.live  # every run has ended: nothing to poll
    comparison.close()


def test_a_fresh_kernel_follows_a_detached_run_of_another_process_and_stops_it(tmp_path: Path):
    """``TrainingDashboard(run_dir)`` in a kernel of its own follows a run that ``maze-lab train --detach`` started:
    its polling (on the kernel's loop, between cells) shows the epochs grow, and its stop button stops the run."""
    pytest.importorskip("jupyter_client")
    import re
    import subprocess

    from kernel_utils import Kernel
    from run_utils import maze_lab_command

    from maze_lab.run.attach import attach

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    started = subprocess.run([*maze_lab_command(), "train", "--detach", "--silent", f"log_base_dir={tmp_path / 'runs'}",
                              "algorithm.epoch_length=2", "algorithm.n_rollout_steps=16", "algorithm.n_epochs=200"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stderr
    run_dir = Path(re.search(r"^run directory: (.+)$", started.stdout, re.MULTILINE).group(1).strip())
    kernel = None
    try:
        kernel = Kernel.start(cwd=tmp_path, env=env)
        kernel.ok(textwrap.dedent(f"""
            import re
            from maze_lab.widgets.dashboard import TrainingDashboard

            def shown_epoch():
                found = re.search(r"epoch (\\d+)", dash.progress_html.value)
                return int(found.group(1)) if found else 0

            dash = TrainingDashboard({str(run_dir)!r}, refresh_seconds=0.2)
            dash  # displaying the cockpit of a live run starts its polling
            """))
        assert kernel.value("dash.source.handle is None and dash.source.controllable")
        first = kernel.wait_for("dash.ticks >= 2 and shown_epoch() >= 1 and shown_epoch()", timeout=120)
        kernel.wait_for(f"shown_epoch() >= {first + 2}", timeout=120)  # the polling shows it, no cell refreshes
        kernel.wait_for("len(dash.curve_data().get('train/BaseEnvEvents/reward/mean', ([],))[0]) >= 2", timeout=60)
        assert kernel.value("'running' in dash.status_html.value and dash.controls.layout.display is None")
        kernel.ok("dash.stop_button.click()")
        kernel.wait_for("'stop acknowledged' in dash.control_html.value", timeout=60)
        kernel.wait_for("'stopped' in dash.status_html.value and dash.task.done()", timeout=120)
        assert kernel.value("dash.controls.layout.display") == "none"
        assert kernel.value("'stopped on request' in dash.reason_html.value")
        run = attach(run_dir)
        assert run.status == "stopped" and run.latest_checkpoint is not None
        assert kernel.value("shown_epoch()") == run.progress["epoch"]
    finally:
        if kernel is not None:
            kernel.close()
        stop_if_live(run_dir)


# ---- polling -----------------------------------------------------------------------------------------------------
async def _until(condition, what: str, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"still not true after {timeout} s: {what}"
        await asyncio.sleep(0.02)


def test_a_drawing_error_is_shown_and_polling_goes_on(tmp_path: Path):
    from maze_lab.run.run_context import RunContext

    rc = RunContext(overrides={**TINY, "n_epochs": 4, "log_base_dir": str(tmp_path)}, silent=True)

    async def main() -> TrainingDashboard:
        handle = rc.train_async()
        dash = TrainingDashboard(handle, refresh_seconds=0.05)
        draw, failures = dash._update_figure, []

        def broken(chart):
            if len(failures) < 3:
                failures.append(chart)
                raise ValueError("the figure could not be drawn")
            return draw(chart)

        dash._update_figure = broken
        dash._seen = None  # the next poll redraws
        task = dash.start()
        await _until(lambda: dash.errors, "a drawing error")
        assert "the figure could not be drawn" in dash.draw_error_html.value
        assert dash.draw_error_html.layout.display is None
        ticks = dash.ticks
        await _until(lambda: dash.ticks >= ticks + 3 or task.done(), "more polls after the error")
        await asyncio.wait_for(task, 240)  # the run ended and was drawn once more
        assert handle.status == "done"
        return dash

    dash = asyncio.run(main())
    assert "done" in dash.status_html.value
    _assert_curves_match(dash, dash.source.store, everything=False)
    assert dash.source.store.to_dataframe().epoch.nunique() == 4
    assert all(len(x) == 4 for x, _ in dash.curve_data().values())
    # the run's warnings (e.g. a diverged policy) are shown
    assert dash.warnings_html.layout.display == "none"
    rc.trainer.warnings.append("epoch 3: the policy of key 0 collapsed while its value loss exploded")
    dash.refresh()
    assert dash.warnings_html.layout.display is None and "collapsed" in dash.warnings_html.value
    rc.close()


def test_close_ends_polling_and_tabs(tmp_path: Path):
    import ipywidgets as w

    from maze_lab.run.run_context import RunContext

    class View:
        def __init__(self):
            self.widget, self.updates, self.closed = w.HTML("view"), 0, False

        def update(self):
            self.updates += 1

        def close(self):
            self.closed = True

    rc = RunContext(overrides={**TINY, "n_epochs": 500, "algorithm.patience": 0, "log_base_dir": str(tmp_path)},
                    silent=True)

    async def main():
        handle = rc.train_async()
        try:
            dash = TrainingDashboard(handle, refresh_seconds=0.05)
            view = dash.add_tab("Distributions", View())
            assert dash.tabs.children[-1] is view.widget and dash.tabs.get_title(1) == "Distributions"
            with pytest.raises(TypeError, match="widget"):
                dash.add_tab("bad", object())
            task = dash.start()
            assert dash.start() is task  # one polling task at a time
            await _until(lambda: view.updates >= 3, "the tab updated by the polls")
            assert not task.done()
            dash.widget.close()  # closing the top widget ends the cockpit
            await _until(task.done, "the polling task done")
            assert view.closed and dash.start() is None
            assert handle.running  # closing the cockpit leaves the run going
        finally:
            handle.stop(timeout=120)

    asyncio.run(main())
    rc.close()


# ---- a browser ---------------------------------------------------------------------------------------------------
@pytest.mark.browser
def test_dashboard_renders_in_chromium(tmp_path):
    pytest.importorskip("playwright")
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (bash scripts/setup.sh --dev installs it)")
    from playwright.sync_api import sync_playwright

    page_file = TrainingDashboard(_store(4)).to_html(tmp_path / "dashboard.html")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu",
                                                                    "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(page_file.as_uri())
        page.wait_for_selector(".main-svg")
        # reward band and mean (train, eval), episode length (train, eval), the KPI (train, eval)
        assert page.locator(".scatterlayer .trace").count() == 8
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        browser.close()
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000


@pytest.mark.browser
def test_the_cockpit_of_a_finished_run_renders_in_voila(tmp_path):
    """Voila renders a notebook after it ran: the figures must come up with their curves, not empty axes."""
    from browser_utils import (
        browser_skip_reason,
        chromium_page,
        screenshot,
        start_voila,
        wait_for_plots,
        write_notebook,
    )

    reason = browser_skip_reason()
    if reason:
        pytest.skip(reason)
    run_dir = train_tiny_run(tmp_path / "runs")
    code = f"from maze_lab.widgets.dashboard import TrainingDashboard\nTrainingDashboard({str(run_dir)!r})"
    write_notebook(tmp_path / "cockpit.ipynb", [code])
    expected = TrainingDashboard(run_dir)
    server = start_voila(tmp_path / "cockpit.ipynb", tmp_path)
    try:
        server.wait_ready()
        with chromium_page() as page:
            page.goto(server.url, timeout=120_000)
            shown = wait_for_plots(page, min_plots=len(expected.shown), min_points=1, timeout=120)
            screenshot(page, "cockpit_finished_run")
            for plot in shown:
                assert plot["drawn"] == plot["traces"] > 0, plot  # every trace reached the drawing
            titles = {p["title"] for p in shown}
            assert {"episode reward (mean, min–max)", "episode length (mean steps)"} <= titles, titles
            reward = next(p for p in shown if p["title"].startswith("episode reward"))
            assert reward["pointsByName"]["train mean"] == 1 and reward["pointsByName"]["train min–max"] == 2
    finally:
        server.stop()


# ---- a real kernel -----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_cockpit_follows_a_live_run_in_a_kernel_and_stops_it(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    cells = [
        f"""
        import asyncio, time
        from maze_lab.run.run_context import RunContext
        from maze_lab.widgets.dashboard import TrainingDashboard
        LONG = {{"log_base_dir": {str(tmp_path)!r}, "n_epochs": 500, "runner.concurrency": 1,
                "runner.eval_concurrency": 1, "algorithm.epoch_length": 1, "algorithm.n_rollout_steps": 16,
                "algorithm.eval_repeats": 1, "algorithm.patience": 0}}  # patience 0: no early stop
        rc = RunContext(silent=True, overrides=LONG)

        async def until(condition, what, timeout=240):
            deadline = time.monotonic() + timeout
            while not condition():
                assert time.monotonic() < deadline, (what, dash.ticks, dash.errors, handle.progress,
                                                     dash.task)
                await asyncio.sleep(0.05)

        def points():
            return len(dash.curve_data().get("train/BaseEnvEvents/reward/mean", ([],))[0])

        handle = rc.train_async()
        dash = TrainingDashboard(handle, refresh_seconds=0.2)
        dash  # displaying a live run's cockpit starts its polling
        """,
        # awaiting lets the kernel's event loop run the cockpit's polling task while training goes on
        """
        await until(lambda: points() >= 2, "the first epochs drawn")
        first = points()
        await until(lambda: points() >= first + 2, "more epochs drawn")
        assert dash.task is not None and not dash.task.done()
        assert "running" in dash.status_html.value and not dash.stop_button.disabled
        await until(lambda: "ETA" in dash.progress_html.value and "steps/s" in dash.progress_html.value,
                    "ETA and speed shown")
        assert 0 < dash.progress_bar.value < 1
        dash.pause_button.click()
        await until(lambda: "paused" in dash.status_html.value, "paused shown")
        assert dash.pause_button.disabled and not dash.resume_button.disabled
        dash.resume_button.click()
        await until(lambda: "running" in dash.status_html.value, "running again")
        dash.stop_button.click()
        await until(lambda: not handle.running, "the run stopped")
        await until(dash.task.done, "polling ended after the run")
        assert handle.status == "stopped", handle.status
        assert "stopped" in dash.status_html.value and dash.controls.layout.display == "none"
        assert handle.latest_checkpoint is not None
        n = len(handle.store.series("BaseEnvEvents", "reward", "mean", prefix="train"))  # epochs ending an episode
        assert points() == n, (points(), n, dash.errors)
        print("stopped after", handle.progress["epoch"], "epochs")
        """,
        """
        handle2 = RunContext(silent=True, overrides=LONG).train_async()
        dash2 = TrainingDashboard(handle2, refresh_seconds=0.2)
        dash2
        """,
        """
        await until(lambda: dash2.task is not None and dash2.ticks >= 2, "polling started by display")
        dash2.close()
        await until(dash2.task.done, "polling ended after close")
        assert handle2.running  # closing the cockpit leaves the run going
        handle2.stop(timeout=120)
        print("ok")
        """,
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(textwrap.dedent(c)) for c in cells])
    NotebookClient(nb, kernel_name="python3", timeout=400).execute()
    assert "stopped after" in nb.cells[1].outputs[-1]["text"]
    assert "ok" in nb.cells[3].outputs[-1]["text"]


# ---- curves: x-axis, smoothing, log scale, axis titles, the statistics shown first ------------------------------
@pytest.fixture(scope="module")
def three_epoch_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from maze_lab.run.run_context import RunContext

    rc = RunContext(overrides={**TINY, "n_epochs": 3, "algorithm.epoch_length": 2,
                               "log_base_dir": str(tmp_path_factory.mktemp("curves"))}, silent=True)
    rc.train()
    rc.close()
    return rc.run_dir


def test_curves_are_drawn_over_env_steps_by_default_and_over_wall_time_or_epochs_on_request(three_epoch_run):
    from maze_lab.run.runs import load_run

    df = load_run(three_epoch_run).stats.to_dataframe()
    progress = df[(df.prefix == "train") & (df.topic == "TrainingProgressEvents")]
    steps = progress[progress.event == "env_steps"].set_index("epoch").value
    seconds = progress[progress.event == "time_training"].set_index("epoch").value
    summary = load_run(three_epoch_run).summary
    # the trainer recorded its env steps and training seconds with every epoch
    assert list(steps.index) == [1, 2, 3] and steps.iloc[-1] == summary["env_steps"]
    assert steps.is_monotonic_increasing and seconds.is_monotonic_increasing and seconds.iloc[0] > 0

    dash = TrainingDashboard(three_epoch_run)
    try:
        fig = dash.rewards
        mean = {t.meta["prefix"]: t for t in fig.data if t.meta["role"] == "mean"}
        assert dash.x_axis.value == "env_steps" and fig.layout.xaxis.title.text == "env steps"
        for prefix in ("train", "eval"):  # each epoch at the env steps it ended with (an epoch that ended no
            # episode has no reward)
            epochs = list(mean[prefix].customdata)
            assert epochs and list(mean[prefix].x) == list(steps[epochs].values), prefix
        assert len(mean["eval"].customdata) == 3
        assert fig.layout.yaxis.title.text == "episode reward"
        dash.x_axis.value = "wall_time"
        assert fig.layout.xaxis.title.text == "wall time (s)"
        assert np.allclose(list(mean["eval"].x), seconds.values)
        dash.x_axis.value = "epoch"
        assert list(mean["eval"].x) == [1, 2, 3] and fig.layout.xaxis.title.text == "epoch"
        # the data read back is the run's, whatever the axis
        dash.x_axis.value = "env_steps"
        assert list(dash.curve_data()["eval/BaseEnvEvents/reward/mean"][0]) == [1, 2, 3]
        length = dash.figure("BaseEnvEvents / reward / mean_step_count")
        assert length.layout.yaxis.title.text == "steps"
        assert dash.errors == []
    finally:
        dash.close()


def test_smoothing_draws_an_ema_over_the_faint_raw_curve():
    from maze_lab.widgets.dashboard import ema

    store = StatsStore()
    values = [10.0, 30.0, 20.0, 50.0, 40.0]
    for epoch, value in enumerate(values, start=1):
        store.write("train", epoch, {StatKey(ActorCriticEvents.policy_loss, None, (0,)): value})
    dash = TrainingDashboard(store, tabs=())
    try:
        fig = dash.figure("ActorCriticEvents / policy_loss / 0")
        assert [t.meta["role"] for t in fig.data] == ["line"]  # no smoothing by default
        dash.smoothing.value = 0.6
        raw, smooth = (next(t for t in fig.data if t.meta["role"] == role) for role in ("line", "smooth"))
        assert raw.opacity < 0.5 and smooth.visible and list(raw.y) == values
        # debiased EMA, as TensorBoard smooths: the first point is the first value
        expected, last, weight = [], 0.0, 0.0
        for v in values:
            last, weight = 0.6 * last + 0.4 * v, 0.6 * weight + 0.4
            expected.append(last / weight)
        assert np.allclose(list(smooth.y), expected) and smooth.y[0] == values[0]
        assert np.allclose(ema(np.array(values), 0.6), expected)
        assert dash.curve_data()["train/ActorCriticEvents/policy_loss/0"][1].tolist() == values  # raw read back
        dash.smoothing.value = 0.0
        assert not smooth.visible and raw.opacity == 1.0
    finally:
        dash.close()


def test_values_that_differ_in_their_last_digits_get_a_readable_range():
    """A statistic whose raw and smoothed points differ by a unit in the last place (0.6931104212999344 and
    ...343) made plotly range over that span, one 17-digit tick label spilling into the next figure."""
    store = StatsStore()
    store.write("train", 1, {StatKey(ActorCriticEvents.policy_entropy, None, (0,)): 0.6931104212999344})
    store.write("train", 2, {StatKey(ActorCriticEvents.policy_entropy, None, (0,)): 0.6931104212999343})
    dash = TrainingDashboard(store, tabs=())
    try:
        fig = dash.figure("ActorCriticEvents / policy_entropy / 0")
        lo, hi = fig.layout.yaxis.range
        assert lo < 0.69311 < hi and hi - lo > 0.05  # a range a tick can be read in
        store.write("train", 3, {StatKey(ActorCriticEvents.policy_entropy, None, (0,)): 0.5})
        dash.refresh()
        assert fig.layout.yaxis.range is None and fig.layout.yaxis.autorange is True  # spread out: plotly's own
    finally:
        dash.close()


def test_every_figure_has_a_log_scale_switch_and_keeps_its_title_clear():
    dash = TrainingDashboard(_store(), tabs=())
    try:
        for key, fig in dash.figures().items():
            (menu,) = fig.layout.updatemenus
            assert [(b.label, b.args[0]) for b in menu.buttons] == [("lin", {"yaxis.type": "linear"}),
                                                                     ("log", {"yaxis.type": "log"})], key
            assert fig.layout.modebar.orientation == "v"  # the toolbar runs down the side, not over the title
            assert fig.layout.xaxis.title.text == "env steps" or fig.layout.xaxis.title.text == "epoch"
            assert fig.layout.yaxis.title.text, key
    finally:
        dash.close()


def test_the_statistics_a_practitioner_checks_first_show_by_default(three_epoch_run):
    dash = TrainingDashboard(three_epoch_run, tabs=())
    try:
        shown = set(dash.shown)
        assert {"BaseEnvEvents / reward (mean, min–max)", "BaseEnvEvents / reward / mean_step_count",
                "ActorCriticEvents / policy_loss / 0", "ActorCriticEvents / critic_value_loss / 0",
                "ActorCriticEvents / policy_entropy / 0", "ActorCriticEvents / approx_kl",
                "ActorCriticEvents / clip_fraction"} <= shown, shown
        assert "ActorCriticEvents / time_epoch" not in shown and "TrainingProgressEvents / env_steps" not in shown
    finally:
        dash.close()


def test_the_config_tab_lists_every_value_of_the_run_and_searches_them(three_epoch_run):
    from maze_lab.run.runs import load_run
    from maze_lab.widgets.run_details import flatten

    run = load_run(three_epoch_run)
    dash = TrainingDashboard(three_epoch_run)
    try:
        view = dash.open_tab("Config")
        rows = dict(view.rows)
        config = run.directory.read_config()
        # every leaf of config.yaml, by its dotted key, with the recorded seed and versions
        assert {k for k, _ in flatten(config)} <= set(rows)
        assert rows["algorithm.lr"] == str(config["algorithm"]["lr"]) and rows["env.name"] == "CartPole-v1"
        assert rows["seed (recorded)"] == str(run.summary["seed"]) and "versions.torch" in rows
        view.search.value = "ALGORITHM.lr"  # words of a key, any case
        assert [k for k, _ in view.matching()] == ["algorithm.lr"]
        assert "algorithm.lr" in view.table.value and "env.name" not in view.table.value
        view.search.value = "cartpole"  # or of a value
        assert "env.name" in dict(view.matching())
        view.search.value = "no such key anywhere"
        assert "no value matches" in view.table.value
    finally:
        dash.close()


def test_the_console_tab_shows_the_runs_epoch_lines_and_refuses_a_fifo(three_epoch_run, tmp_path):
    import shutil as sh

    dash = TrainingDashboard(three_epoch_run)
    try:
        view = dash.open_tab("Console")
        lines = [line for line in view.text.splitlines() if line.startswith("epoch ")]
        assert [line.split()[1] for line in lines] == ["1/3", "2/3", "3/3"], view.text  # silent runs log them too
        assert "epoch 3/3" in view.widget.children[0].value
    finally:
        dash.close()
    # a console log that is a FIFO is refused in one line, the cockpit goes on
    copy = tmp_path / "copy"
    sh.copytree(three_epoch_run, copy)
    (copy / "console.log").unlink()
    os.mkfifo(copy / "console.log")
    dash = TrainingDashboard(copy)
    try:
        dash.open_tab("Console")
        assert any("console log" in e and "FIFO" in e for e in dash.errors) or \
            "FIFO" in dash.tabs.children[-1].children[0].value, dash.errors
    finally:
        dash.close()


def test_the_distributions_open_at_the_latest_epoch_in_a_grid_that_fits_a_screen(three_epoch_run):
    dash = TrainingDashboard(three_epoch_run)
    try:
        view = dash.open_tab("Distributions")
        assert view.epoch_slider.value == view.epoch_slider.max == 3
        actions, observations = view.grid.children
        assert "Actions" in actions.children[0].value and "Observations" in observations.children[0].value
        assert "minmax(460px, 1fr)" in view.grid.layout.grid_template_columns  # side by side on a wide screen
    finally:
        dash.close()
