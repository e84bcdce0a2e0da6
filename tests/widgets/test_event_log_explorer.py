"""EventLogExplorer on real event logs: a tiny CartPole run's training and evaluation logs against its statistics,
a Cutting-2D rollout's custom events, and files that are too large, still being written or not event logs."""

from __future__ import annotations

import asyncio
import csv
from pathlib import Path

import numpy as np
import pytest
from run_utils import TINY

from maze_lab.core.log_stats.event_log import TSVEventLogWriter
from maze_lab.core.rollout import SequentialRolloutRunner
from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.core.wrappers.monitoring_wrapper import MazeEnvMonitoringWrapper
from maze_lab.examples.cutting2d import SIMPLE_PROBLEM, GreedyPolicy, maze_env_factory
from maze_lab.run.run_context import RunContext
from maze_lab.widgets.event_logs import COUNT, EventLogError, EventLogExplorer, read_event_log

GREEDY_RAW_PIECES = 31  # raw pieces the greedy policy takes per episode of the simple problem (180 steps)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunContext:
    """A finished two-epoch CartPole run (one training and one evaluation env)."""
    rc = RunContext(overrides={**TINY, "n_epochs": 2, "log_base_dir": str(tmp_path_factory.mktemp("runs"))},
                    silent=True)
    rc.train()
    rc.close()
    return rc


def _stat(df: object, prefix: str, name: str) -> list[float]:
    sel = df[(df.prefix == prefix) & (df.topic == "BaseEnvEvents") & (df.event == "reward") & (df.name == name)]
    return list(sel.sort_values("epoch").value)


@pytest.mark.parametrize("as_object", [False, True])
def test_run_event_logs_match_the_statistics(run: RunContext, as_object: bool) -> None:
    """Per log (train_0, eval_0): one reward row per env step, one episode id per episode; each epoch's single
    episode has the length and return the statistics say."""
    explorer = EventLogExplorer(run if as_object else run.run_dir)
    try:
        assert explorer.root == run.run_dir / "event_logs"
        assert explorer.logs()[:2] == ["train_0", "eval_0"]
        stats = run.stats
        for log, prefix in (("train_0", "train"), ("eval_0", "eval")):
            frames = explorer.dataframes(log)
            assert "BaseEnvEvents.reward" in frames
            df = frames["BaseEnvEvents.reward"]
            assert list(df.columns) == ["episode_id", "step", "value"]
            assert len(df) == _stat(stats, prefix, "total_step_count")[-1]
            assert df.episode_id.nunique() == _stat(stats, prefix, "total_episode_count")[-1]
            assert _stat(stats, prefix, "episode_count") == [1.0, 1.0]  # so episode i is epoch i's only episode
            episodes = explorer.episodes("BaseEnvEvents.reward", log)
            lengths = [int((df.episode_id == e).sum()) for e in episodes]
            returns = [float(df.value[df.episode_id == e].sum()) for e in episodes]
            assert lengths == _stat(stats, prefix, "mean_step_count")
            assert returns == _stat(stats, prefix, "mean")
            steps, values = explorer.per_step("BaseEnvEvents.reward", episodes[0], "value", log)
            np.testing.assert_array_equal(steps, np.arange(lengths[0]))
            assert values.sum() == returns[0]
        # the widget shows the first training episode's rewards
        assert explorer.log_picker.value == "train_0" and explorer.event_picker.value == "BaseEnvEvents.reward"
        assert explorer.attribute_picker.value == "value"
        scatter = explorer.figure.data[0]
        assert scatter.visible and len(scatter.x) == _stat(stats, "train", "mean_step_count")[0]
        explorer.log_picker.value = "eval_0"
        explorer.episode_picker.value = 1
        assert len(explorer.figure.data[0].x) == _stat(stats, "eval", "mean_step_count")[1]
        assert explorer.message.value == ""
        assert explorer.update() is False
    finally:
        explorer.close()


def test_cutting2d_rollout_custom_events(tmp_path: Path) -> None:
    """A Cutting-2D rollout's own events (CuttingEvents, InventoryEvents) and KPIs come out as DataFrames with
    their attributes; list attributes are decoded as data and plotted element by element."""
    out = tmp_path / "rollout_events"

    def env_with_event_logs() -> object:
        env = MazeEnvMonitoringWrapper.wrap(maze_env_factory(**SIMPLE_PROBLEM))
        return LogStatsWrapper.wrap(env, event_log_writers=[TSVEventLogWriter(out)])

    result = SequentialRolloutRunner(env_with_event_logs, GreedyPolicy(), 2, trajectory_dir=out / "trajectories",
                                     writers=[], seed=0).run()
    explorer = EventLogExplorer(out)
    try:
        assert explorer.logs() == [".", "trajectories"]
        # the recorded episodes hold the same events as the TSV logs (the KPIs are computed after recording)
        recorded = explorer.dataframes("trajectories")
        assert set(recorded) == set(explorer.events(".")) - {"BaseEnvEvents.kpi"}
        for event, df in recorded.items():
            tsv = explorer.dataframe(event, ".")
            assert df.episode_id.nunique() == tsv.episode_id.nunique() == 2
            assert df.drop(columns="episode_id").to_dict("records") == tsv.drop(columns="episode_id").to_dict(
                "records"), event
        events = explorer.events(".")
        for event in ("CuttingEvents.valid_cut", "InventoryEvents.piece_replenished",
                      "InventoryEvents.pieces_in_inventory", "BaseEnvEvents.kpi", "BaseEnvEvents.reward"):
            assert event in events
        frames = explorer.dataframes(".")
        cuts = frames["CuttingEvents.valid_cut"]
        assert list(cuts.columns) == ["episode_id", "step", "current_demand", "piece_to_cut", "raw_piece_size",
                                      "cutting_area"]
        assert cuts.raw_piece_size.iloc[0] == [4, 3]  # a JSON list, decoded as data
        assert len(cuts) == sum(result.episode_lengths) == 360  # the greedy policy cuts once per step
        rewards = frames["BaseEnvEvents.reward"]
        assert rewards.groupby("episode_id").size().tolist() == result.episode_lengths
        assert rewards.groupby("episode_id").value.sum().tolist() == result.episode_rewards
        replenished = frames["InventoryEvents.piece_replenished"].groupby("episode_id").size()
        assert replenished.tolist() == [GREEDY_RAW_PIECES, GREEDY_RAW_PIECES]
        kpis = frames["BaseEnvEvents.kpi"]
        assert list(kpis.name) == ["raw_piece_usage_per_step"] * 2
        assert kpis.value.tolist() == pytest.approx([GREEDY_RAW_PIECES / 180] * 2)
        # the widget: the custom event, its attributes, one episode's values and counts per step
        explorer.event_picker.value = "CuttingEvents.valid_cut"
        assert explorer.attribute_picker.options == ("cutting_area", "current_demand[0]", "current_demand[1]",
                                                     "piece_to_cut[0]", "piece_to_cut[1]", "raw_piece_size[0]",
                                                     "raw_piece_size[1]", COUNT)
        np.testing.assert_array_equal(explorer.figure.data[0].y, cuts[cuts.episode_id == 1].cutting_area)
        explorer.attribute_picker.value = "current_demand[1]"
        assert list(explorer.figure.data[0].y[:2]) == [c[1] for c in cuts.current_demand[:2]]
        explorer.event_picker.value = "InventoryEvents.piece_replenished"
        assert explorer.attribute_picker.value == COUNT
        bars = explorer.figure.data[1]
        assert bars.visible and sum(bars.y) == GREEDY_RAW_PIECES
        assert explorer.message.value == ""
    finally:
        explorer.close()


def test_rollout_of_a_run_is_read_from_its_recorded_episodes(run: RunContext) -> None:
    """RunContext.rollout writes no TSV logs, only episodes into <run>/trajectories: their events and step rewards
    make the log ``trajectories``; an episode over the byte budget is left out with a note naming it."""
    result = run.rollout(n_episodes=2, seed=3)
    explorer = EventLogExplorer(run.run_dir)
    try:
        assert explorer.logs() == ["train_0", "eval_0", "trajectories"]
        assert explorer.trajectory_dir == run.run_dir / "trajectories"
        rewards = explorer.dataframe("BaseEnvEvents.reward", "trajectories")
        assert rewards.groupby("episode_id", sort=False).size().tolist() == result.episode_lengths
        assert rewards.groupby("episode_id", sort=False).value.sum().tolist() == result.episode_rewards
        assert "2 recorded episodes" in explorer.header.value
        explorer.log_picker.value = "trajectories"
        assert len(explorer.figure.data[0].x) == result.episode_lengths[0]
    finally:
        explorer.close()
    sizes = sorted(p.stat().st_size for p in result.trajectory_paths)
    small = EventLogExplorer(run.run_dir, max_bytes=sizes[-1])  # room for one episode only
    assert len(small.episodes("BaseEnvEvents.reward", "trajectories")) == 1
    assert len(small.skipped) == 1 and "was not read" in small.header.value
    small.close()


def test_oversized_partial_and_foreign_files(tmp_path: Path) -> None:
    """A file over the limit is refused with its name (also in the widget); a line still being written waits for
    the next read, malformed rows are counted, a file that is not an event log is refused; growth is picked up."""
    folder = tmp_path / "logs"
    folder.mkdir()
    big = folder / "MyEvents.big.tsv"
    big.write_text("episode_id\tstep\tvalue\n" + "".join(f"1\t{i}\t{i * 0.5}\n" for i in range(200)))
    small = folder / "MyEvents.small.tsv"
    small.write_text("episode_id\tstep\tvalue\tflag\tnote\n1\t0\t1.5\tTrue\tNone\n1\t1\t2.5\tFalse\thi\n"
                     "1\t2\tbroken\n2\t0\t3.")  # a malformed row, and a last line still being written
    quoted = folder / "MyEvents.quoted.tsv"
    with quoted.open("w", newline="") as fh:  # as TSVEventLogWriter writes text holding tabs or quotes
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        writer.writerows([["episode_id", "step", "names", "text", "value"], ["a", 0, '["x", "y"]', "tab\there", 1],
                          ["a", 1, '["z"]', "plain", None], ["b", 0, "[]"]])
    foreign = folder / "notes.tsv"
    foreign.write_text("a\tb\n1\t2\n")
    explorer = EventLogExplorer(folder, max_bytes=1000)
    try:
        with pytest.raises(EventLogError, match=str(big)):
            explorer.dataframe("MyEvents.big")
        with pytest.raises(EventLogError, match="more than the 1,000 bytes"):
            explorer.dataframes()
        with pytest.raises(EventLogError, match=f"{foreign} is not a maze-lab event log"):
            read_event_log(foreign)
        q = explorer.dataframe("MyEvents.quoted")
        assert q.names.tolist() == [["x", "y"], ["z"]] and q.text.tolist() == ["tab\there", "plain"]
        assert q.episode_id.tolist() == ["a", "a"] and q.attrs["skipped_rows"] == 1
        assert q.value.iloc[0] == 1 and np.isnan(q.value.iloc[1])
        assert explorer.attributes("MyEvents.quoted") == ["value", COUNT]
        df = explorer.dataframe("MyEvents.small")
        assert df.value.tolist() == [1.5, 2.5] and df.flag.tolist() == [True, False]
        assert df.note.tolist() == [None, "hi"] and df.attrs["skipped_rows"] == 1
        explorer.event_picker.value = "MyEvents.big"
        assert str(big) in explorer.message.value and not explorer.figure.data[0].visible
        explorer.event_picker.value = "MyEvents.small"
        assert explorer.message.value == ""
        with small.open("a") as fh:
            fh.write("5\tFalse\tyes\n")  # the partial line completes
        assert explorer.update() is True
        df = explorer.dataframe("MyEvents.small")
        assert df.episode_id.tolist() == [1, 1, 2] and df.value.tolist() == [1.5, 2.5, 3.5]
        assert explorer.episodes("MyEvents.small") == [1, 2]
    finally:
        explorer.close()
    one = EventLogExplorer(small)
    assert one.logs() == ["."] and one.events() == ["MyEvents.small"] and len(one.dataframe("MyEvents.small")) == 3
    empty = EventLogExplorer(tmp_path / "nothing_here")
    assert empty.logs() == [] and "No event logs" in empty.header.value and empty.message.value == ""


def test_polling_follows_a_growing_log_and_stops_on_close(tmp_path: Path) -> None:
    """On the event loop, the explorer takes in rows appended to a log; close() cancels its task."""
    (tmp_path / "MyEvents.x.tsv").write_text("episode_id\tstep\tvalue\n1\t0\t1.0\n")
    explorer = EventLogExplorer(tmp_path, refresh_seconds=0.01)
    assert not explorer.live  # a plain folder: polling only when started by hand

    async def scenario() -> None:
        explorer.start()
        with (tmp_path / "MyEvents.x.tsv").open("a") as fh:
            fh.write("1\t1\t2.0\n")
        while len(explorer.figure.data[0].x) < 2:  # the poll picks the row up; the test's timeout bounds this
            await asyncio.sleep(0.01)
        task = explorer._task
        explorer.close()
        await asyncio.sleep(0)
        assert task.cancelled() or task.done()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert list(explorer.figure.data[0].y) == [1.0, 2.0]
