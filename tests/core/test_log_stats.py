"""Event -> step -> episode -> epoch aggregation checked against hand-computed numbers; writers."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest
from scripted_env import ScriptEvents, make_script_env

from maze_lab.core.log_stats.aggregation import StatKey
from maze_lab.core.log_stats.base_events import BaseEnvEvents, DiscreteActionEvents, RewardEvents
from maze_lab.core.log_stats.event_log import TSVEventLogWriter
from maze_lab.core.log_stats.writers import ConsoleWriter, StatsStore, TensorBoardWriter
from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.core.wrappers.monitoring_wrapper import MazeEnvMonitoringWrapper

# two episodes of three steps: actions are the number of hits per step (= the reward of the step)
EPISODES = [[2, 0, 1], [3, 3, 0]]


def run_script(writers=(), event_log_writers=(), monitoring: bool = True) -> LogStatsWrapper:
    env = make_script_env(3)
    if monitoring:
        env = MazeEnvMonitoringWrapper.wrap(env)
    env = LogStatsWrapper.wrap(env, logging_prefix="test", writers=list(writers),
                               event_log_writers=list(event_log_writers))
    for actions in EPISODES:
        env.reset()
        for a in actions:
            env.step({"n": a})
    return env


def test_episode_stats_by_hand():
    env = make_script_env(3)
    env = LogStatsWrapper.wrap(env)
    env.reset()
    for a in EPISODES[0]:
        env.step({"n": a})
    ep = env.get_stats("episode")
    assert ep[StatKey(ScriptEvents.hit, None, None)] == 3  # 2 + 0 + 1 hits
    assert ep[StatKey(ScriptEvents.level, "step_mean", None)] == pytest.approx(20.0)  # mean(10, 20, 30)
    assert ep[StatKey(ScriptEvents.level, "step_max", None)] == 30
    assert ep[StatKey(ScriptEvents.never, None, None)] == 0  # zero-filled, not missing
    assert ep[StatKey(BaseEnvEvents.reward, None, None)] == 3.0
    assert ep[StatKey(BaseEnvEvents.reward, "step_count", None)] == 3
    assert ep[StatKey(BaseEnvEvents.kpi, None, ("hits_per_step",))] == [pytest.approx(1.0)]


def test_epoch_stats_by_hand():
    env = run_script()
    stats = env.write_epoch_stats()
    value = env.get_stats_value
    # episode totals of hits: 3 and 6 -> mean 4.5
    assert value(ScriptEvents.hit, name="mean_episode_total") == pytest.approx(4.5)
    assert value(ScriptEvents.never, name="mean_episode_total") == 0
    assert value(ScriptEvents.level, name="step_mean") == pytest.approx(20.0)
    assert value(ScriptEvents.level, name="step_max") == 30
    # rewards: episode returns 3 and 6
    assert value(BaseEnvEvents.reward, name="mean") == pytest.approx(4.5)
    assert value(BaseEnvEvents.reward, name="std") == pytest.approx(1.5)
    assert value(BaseEnvEvents.reward, name="min") == 3.0
    assert value(BaseEnvEvents.reward, name="max") == 6.0
    assert value(BaseEnvEvents.reward, name="episode_count") == 2
    assert value(BaseEnvEvents.reward, name="total_step_count") == 6
    assert value(BaseEnvEvents.reward, name="mean_step_count") == 3
    assert value(BaseEnvEvents.reward, name="median_step_count") == 3
    # KPI hits per step: 1.0 and 2.0
    assert value(BaseEnvEvents.kpi, name="mean", group=("hits_per_step",)) == pytest.approx(1.5)
    assert value(BaseEnvEvents.kpi, name="max", group=("hits_per_step",)) == pytest.approx(2.0)
    # monitoring: every action, every reward
    actions = stats[StatKey(DiscreteActionEvents.action, None, (0, "n"))]
    assert sorted(actions) == sorted(a for ep in EPISODES for a in ep)
    assert sorted(stats[StatKey(RewardEvents.step_reward, None, None)]) == sorted(
        float(a) for ep in EPISODES for a in ep)


def test_cumulative_counts_over_epochs():
    env = run_script()
    env.write_epoch_stats()
    env.reset()
    for a in [1, 1, 1]:
        env.step({"n": a})
    env.write_epoch_stats()
    assert env.get_stats_value(BaseEnvEvents.reward, name="episode_count") == 1
    assert env.get_stats_value(BaseEnvEvents.reward, name="total_episode_count") == 3
    assert env.get_stats_value(BaseEnvEvents.reward, name="total_step_count") == 9


def test_partial_episode_counts_on_reset():
    env = LogStatsWrapper.wrap(make_script_env(10))
    env.reset()
    env.step({"n": 1})
    env.step({"n": 2})
    env.reset()  # closes the unfinished episode
    env.write_epoch_stats()
    assert env.get_stats_value(BaseEnvEvents.reward, name="mean") == 3.0
    assert env.get_stats_value(BaseEnvEvents.reward, name="mean_step_count") == 2


def test_missing_statistic_lists_available():
    env = run_script()
    env.write_epoch_stats()
    with pytest.raises(KeyError, match="available"):
        env.get_stats_value(BaseEnvEvents.reward, name="average")


def test_console_table_format():
    buf = io.StringIO()
    env = run_script(writers=[ConsoleWriter(buf)])
    env.write_epoch_stats()
    lines = buf.getvalue().splitlines()
    assert lines[0].split("|") == [" step", "path".ljust(76), "value".rjust(20)]
    assert lines[1] == "=====|" + "=" * 76 + "|" + "=" * 20
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in lines[2:]}
    assert all(line.split("|")[0] == "    1" for line in lines[2:])
    assert rows["test BaseEnvEvents reward mean"] == "4.500"
    assert rows["test BaseEnvEvents reward total_step_count"] == "6.000"
    assert rows["test ScriptEvents hit mean_episode_total"] == "4.500"
    assert rows["test DiscreteActionEvents action 0/n"] == "[len:6, μ:1.5]"
    assert rows["test BaseEnvEvents kpi mean/hits_per_step"] == "1.500"
    assert all(len(line) == 5 + 1 + 76 + 1 + 20 for line in lines)


def test_console_truncates_long_paths():
    writer = ConsoleWriter()
    key = StatKey(BaseEnvEvents.kpi, "mean", ("a_very_long_kpi_name_that_does_not_fit_into_the_path_column",))
    table = writer.format_table("train", 3, {key: 0.25})
    row = table.splitlines()[2]
    assert row.split("|")[1].endswith("..")
    assert row.endswith("0.250")


def test_tensorboard_events_readable(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    writer = TensorBoardWriter(tmp_path)
    env = run_script(writers=[writer])
    env.write_epoch_stats()
    env.reset()
    for a in [1, 1, 1]:
        env.step({"n": a})
    env.write_epoch_stats()
    writer.close()
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    tags = acc.Tags()
    assert "test_BaseEnvEvents/reward/mean" in tags["scalars"]
    mean = acc.Scalars("test_BaseEnvEvents/reward/mean")
    assert [e.step for e in mean] == [1, 2]
    assert mean[0].value == pytest.approx(4.5)
    assert mean[1].value == pytest.approx(3.0)
    assert "test_DiscreteActionEvents/action/0/n" in tags["histograms"]
    hist = acc.Histograms("test_DiscreteActionEvents/action/0/n")[0]
    assert hist.histogram_value.num == 6


def test_stats_store_dataframe_and_roundtrip(tmp_path):
    store = StatsStore()
    env = run_script(writers=[store])
    env.write_epoch_stats()
    df = store.to_dataframe()
    assert list(df.columns) == ["epoch", "prefix", "topic", "event", "name", "value"]
    row = df[(df.topic == "BaseEnvEvents") & (df.event == "reward") & (df.name == "mean")]
    assert row.value.tolist() == [4.5]
    assert store.series("ScriptEvents", "hit", "mean_episode_total").tolist() == [4.5]
    wide = store.wide("test")
    assert wide.loc[1, "test/BaseEnvEvents/reward/max"] == 6.0
    samples = store.samples(topic="DiscreteActionEvents")
    assert len(samples) == 1 and sorted(samples[0][5].tolist()) == [0, 0, 1, 2, 3, 3]
    store.save(tmp_path)
    loaded = StatsStore.load(tmp_path)
    assert loaded.to_dataframe().equals(df)
    assert np.array_equal(loaded.samples(topic="DiscreteActionEvents")[0][5], samples[0][5])


def test_stats_store_concurrent_writers_and_readers():
    store = StatsStore()
    key = StatKey(BaseEnvEvents.reward, "mean", None)
    n_writers, n_epochs = 4, 200
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(i: int) -> None:
        for e in range(n_epochs):
            store.write(f"w{i}", e, {key: float(e), StatKey(DiscreteActionEvents.action, None, (0, "a")): [1, 2]})

    def reader() -> None:
        try:
            while not stop.is_set():
                df = store.to_dataframe()
                # append-only: every prefix's epochs seen so far are complete and in order
                for _, part in df.groupby("prefix"):
                    assert part.epoch.tolist() == list(range(len(part)))
                store.samples()
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    readers = [threading.Thread(target=reader) for _ in range(2)]
    writers = [threading.Thread(target=writer, args=(i,)) for i in range(n_writers)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert not errors
    df = store.to_dataframe()
    assert len(df) == n_writers * n_epochs
    assert len(store.samples()) == n_writers * n_epochs


def test_tsv_event_logs(tmp_path):
    env = run_script(event_log_writers=[TSVEventLogWriter(tmp_path)])
    env.close()
    hits = (tmp_path / "ScriptEvents.hit.tsv").read_text().splitlines()
    assert hits[0] == "episode_id\tstep"
    assert len(hits) - 1 == 9  # 3 + 6 hit events
    levels = (tmp_path / "ScriptEvents.level.tsv").read_text().splitlines()
    assert levels[0] == "episode_id\tstep\tvalue"
    assert levels[1:4] == ["1\t0\t10", "1\t1\t20", "1\t2\t30"]
    rewards = (tmp_path / "BaseEnvEvents.reward.tsv").read_text().splitlines()
    assert rewards[1:4] == ["1\t0\t2.0", "1\t1\t0.0", "1\t2\t1.0"]


def test_decorator_rejects_a_non_callable_reducer():
    from maze_lab.core.log_stats.event_decorators import define_stats_grouping, define_step_stats

    with pytest.raises(TypeError, match="define_step_stats takes a reduce function .* got 'sum'"):
        define_step_stats("sum")

    def event(self, value):
        """An event."""

    with pytest.raises(ValueError, match=r"\['name'\] are not arguments; valid: \['value'\]"):
        define_stats_grouping("name")(event)


def test_stats_store_samples_are_copies_and_ragged_lists_still_flatten():
    store = StatsStore()
    action = StatKey(DiscreteActionEvents.action, None, (0, "a"))
    same_shape = [np.array([1.0, 2.0]), np.array([3.0, 4.0])]
    store.write("test", 1, {action: same_shape})
    same_shape[0][0] = 99.0  # the caller reuses its arrays: the store keeps what was written
    store.write("test", 2, {action: [np.array([1.0]), np.array([2.0, 3.0]), 4]})
    assert [s[5].tolist() for s in store.samples()] == [[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]]
