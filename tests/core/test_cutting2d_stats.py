"""Cutting-2D events, KPIs and rewards through the statistics stack, on an episode computed by hand."""

from __future__ import annotations

import io

import pytest

from maze_lab.core.log_stats.base_events import BaseEnvEvents
from maze_lab.core.log_stats.writers import ConsoleWriter, StatsStore
from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.core.wrappers.monitoring_wrapper import MazeEnvMonitoringWrapper
from maze_lab.examples.cutting2d import (
    CuttingEvents,
    DefaultRewardAggregator,
    InventoryEvents,
    RawPieceUsageRewardAggregator,
    make_struct_env,
    maze_env_factory,
)

# Raw piece 4x3, room for 3 pieces, orders (1,2), (1,1), (2,2) in turn, 8 steps. R = raw piece 4x3.
#   reset  stock [R]                                                       replenished 1
#   1 (1,2)  piece 0 R, x first -> 3x3, 1x1; R replenished      [3x3, 1x1, R]  valid          r -1
#   2 (1,1)  piece 1 1x1: exact fit                             [3x3, R]       valid          r  0
#   3 (2,2)  piece 2: only 2 pieces in stock                    unchanged      invalid piece  r -2
#   4 (1,2)  piece 0 3x3, x first -> 2x3, 1x1                   [R, 2x3, 1x1]  valid          r  0
#   5 (1,1)  piece 1 2x3, x first -> 1x3, then 1x2 discards R;  [1x3, 1x2, R]  valid, 2 discards, r -1
#            no raw piece left: R replenished, discards 1x1
#   6 (2,2)  piece 0 1x3: fits in no orientation                unchanged      invalid cut    r -2
#   7 (1,2)  piece 1 1x2: exact fit                             [1x3, R]       valid          r  0
#   8 (1,1)  piece 1 R rotated, y first -> 4x2, 3x1;            [4x2, 3x1, R]  valid, 1 discard r -1
#            R replenished, discards 1x3
# pieces in stock after each step: 3 2 2 3 3 3 2 3 (mean 2.625, max 3); reward -7; raw pieces 4 in 8 steps.
SCRIPT = [(0, 0, 0), (1, 0, 0), (2, 0, 0), (0, 0, 0), (1, 0, 0), (0, 0, 0), (1, 0, 0), (1, 1, 1)]
SETTING = {"max_pieces_in_inventory": 3, "raw_piece_size": (4, 3), "static_demand": [(1, 2), (1, 1), (2, 2)],
           "max_steps": 8}
EXPECTED = {
    (CuttingEvents.valid_cut, "mean_episode_total"): 6.0,
    (CuttingEvents.invalid_cut, "mean_episode_total"): 1.0,
    (CuttingEvents.invalid_piece_selected, "mean_episode_total"): 1.0,
    (InventoryEvents.piece_replenished, "mean_episode_total"): 4.0,
    (InventoryEvents.piece_discarded, "mean_episode_total"): 3.0,
    (InventoryEvents.pieces_in_inventory, "step_mean"): 2.625,
    (InventoryEvents.pieces_in_inventory, "step_max"): 3.0,
    (BaseEnvEvents.reward, "mean"): -7.0,
    (BaseEnvEvents.reward, "mean_step_count"): 8.0,
}


def _run_script(structured: bool, episodes: int = 1) -> tuple[LogStatsWrapper, StatsStore, str, list[float]]:
    env = make_struct_env(**SETTING) if structured else maze_env_factory(**SETTING)
    store, text = StatsStore(), io.StringIO()
    env = LogStatsWrapper(MazeEnvMonitoringWrapper(env), logging_prefix="main",
                          writers=[ConsoleWriter(stream=text), store])
    rewards = []
    for _ in range(episodes):
        env.reset(seed=0)
        for piece_idx, rotation, order in SCRIPT:
            if structured:
                _, r0, *_ = env.step({"piece_idx": piece_idx})
                _, reward, terminated, truncated, info = env.step({"cut_rotation": rotation, "cut_order": order})
                assert r0 == 0.0
            else:
                _, reward, terminated, truncated, info = env.step(
                    {"piece_idx": piece_idx, "cut_rotation": rotation, "cut_order": order})
            rewards.append(reward)
        assert truncated and not terminated
    env.write_epoch_stats()
    return env, store, text.getvalue(), rewards


@pytest.mark.parametrize("structured", [False, True])
def test_scripted_episode_statistics(structured: bool) -> None:
    """Epoch statistics of the hand-computed episode, for the flat and the structured env."""
    env, store, table, rewards = _run_script(structured, episodes=2)
    assert rewards == [-1.0, 0.0, -2.0, 0.0, -1.0, -2.0, 0.0, -1.0] * 2
    for (event, name), value in EXPECTED.items():
        assert env.get_stats_value(event, "epoch", name) == pytest.approx(value), (event.__name__, name)
    assert env.get_stats_value(BaseEnvEvents.reward, "epoch", "total_episode_count") == 2
    assert env.get_stats_value(BaseEnvEvents.kpi, "epoch", "mean", ("raw_piece_usage_per_step",)) \
        == pytest.approx(4 / 8)

    # the console table and the StatsStore carry the same numbers
    assert "main CuttingEvents valid_cut mean_episode_total" in table
    line = next(row for row in table.splitlines() if "InventoryEvents piece_discarded mean_episode_total" in row)
    assert line.split("|")[-1].strip() == "3.000"
    line = next(row for row in table.splitlines() if "BaseEnvEvents reward mean " in row)
    assert line.split("|")[-1].strip() == "-7.000"
    df = store.to_dataframe()
    replenished = df[(df.topic == "InventoryEvents") & (df.event == "piece_replenished")]
    assert replenished.value.tolist() == [4.0]
    assert set(df.topic) >= {"CuttingEvents", "InventoryEvents", "BaseEnvEvents"}


def test_steps_without_events_count_as_zero() -> None:
    """Counting statistics are zero-filled: an episode without invalid cuts reports 0, not nothing."""
    env = LogStatsWrapper(maze_env_factory(**SETTING))
    env.reset()
    for _ in range(8):
        env.step({"piece_idx": 2, "cut_rotation": 0, "cut_order": 0})
    env.reset()
    assert env.get_stats_value(CuttingEvents.invalid_cut, "episode") == 0
    assert env.get_stats_value(CuttingEvents.invalid_piece_selected, "episode") == 8
    assert env.get_stats_value(InventoryEvents.piece_replenished, "episode") == 1


def test_reward_aggregators_are_configurable() -> None:
    """Penalties come from the aggregator: instances and _target_ configs both work."""
    penalties = {"_target_": "maze_lab.examples.cutting2d.reward.DefaultRewardAggregator",
                 "invalid_action_penalty": -5, "raw_piece_usage_penalty": -10, "invalid_piece_penalty": -0.5}
    custom = maze_env_factory(**SETTING, reward_aggregator=penalties)
    only_raw = maze_env_factory(**SETTING, reward_aggregator=RawPieceUsageRewardAggregator(reward_scale=2.0))
    for env, expected in ((custom, [-10, 0, -0.5, 0, -10, -5, 0, -10]), (only_raw, [-2, 0, 0, 0, -2, 0, 0, -2])):
        env.reset()
        got = [env.step({"piece_idx": p, "cut_rotation": r, "cut_order": o})[1] for p, r, o in SCRIPT]
        assert got == expected
    assert isinstance(custom.core_env.reward_aggregator, DefaultRewardAggregator)
