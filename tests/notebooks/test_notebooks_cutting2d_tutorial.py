"""The first four notebooks of the Cutting-2D tutorial (``notebooks/02`` to ``05``): the core env and its renderer,
the MazeEnv and its conversions, events and KPIs as statistics of episodes and of a training run, and reward
aggregators. Each notebook is executed once with its defaults; the tests assert on what it printed and showed and on
the run directory it wrote, recomputed here where that can be done independently."""

from __future__ import annotations

import numpy as np
import pytest
from notebook_utils import (
    cell_with,
    cells,
    execute_with_summary,
    mime_types,
    parameters_source,
    text_of,
)

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
CORE = "02_cutting2d_core_env.ipynb"
MAZE = "03_cutting2d_maze_env.ipynb"
EVENTS = "04_cutting2d_events_and_kpis.ipynb"
REWARD = "05_cutting2d_reward.ipynb"
EVENT_STATISTICS = [
    ("CuttingEvents", "valid_cut", "mean_episode_total"),
    ("CuttingEvents", "invalid_cut", "mean_episode_total"),
    ("CuttingEvents", "invalid_piece_selected", "mean_episode_total"),
    ("InventoryEvents", "piece_replenished", "mean_episode_total"),
    ("InventoryEvents", "piece_discarded", "mean_episode_total"),
    ("InventoryEvents", "pieces_in_inventory", "step_mean"),
    ("InventoryEvents", "pieces_in_inventory", "step_max"),
    ("BaseEnvEvents", "kpi", "mean/raw_piece_usage_per_step"),
]


def _images(cell: dict) -> int:
    """How many image/png outputs a cell has."""
    return sum("image/png" in out.get("data", {}) for out in cell.get("outputs", []))


def _execute(name: str, factory: pytest.TempPathFactory) -> tuple:
    run_dir, nb, summary = execute_with_summary(name, factory)
    assert "Traceback" not in "".join(text_of(c) for c in cells(nb))
    return run_dir, nb, summary


@pytest.fixture(scope="module")
def core_nb(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """02 executed with its defaults: (run directory, executed notebook, summary)."""
    return _execute(CORE, tmp_path_factory)


@pytest.fixture(scope="module")
def maze_nb(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """03 executed with its defaults."""
    return _execute(MAZE, tmp_path_factory)


@pytest.fixture(scope="module")
def events_nb(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """04 executed with its defaults (it trains for a few epochs)."""
    return _execute(EVENTS, tmp_path_factory)


@pytest.fixture(scope="module")
def reward_nb(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """05 executed with its defaults."""
    return _execute(REWARD, tmp_path_factory)


# --- committed form ---

@pytest.mark.parametrize("name", [CORE, MAZE, EVENTS, REWARD])
def test_committed_notebook_is_clean_and_parameterised(name: str) -> None:
    src = parameters_source(name)
    for parameter in ("seed =", "run_dir ="):
        assert parameter in src
    if name == EVENTS:  # the notebook that trains writes a run
        assert "log_base_dir =" in src and "n_epochs =" in src


# --- the library fix the core env notebook needs ---

# --- 02: core env, MazeState / MazeAction, renderer ---

@pytest.mark.slow
def test_02_steps_by_hand_through_the_perfect_cycle(core_nb: tuple) -> None:
    from maze_lab.examples.cutting2d import SIMPLE_PROBLEM, Cutting2DCoreEnvironment, Cutting2DMazeAction

    _, nb, summary = core_nb
    assert summary["steps"] == 6
    # only the first order is cut from the raw piece; the six orders use it up exactly
    assert summary["rewards"] == [-1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert summary["infos"] == ["valid_cut"] * 6
    assert summary["cycle_end_stock"] == [[4, 3]]
    assert summary["env_time"] == 6
    # the stock after each step, replayed here on a fresh core env with the notebook's plan
    core = Cutting2DCoreEnvironment(**SIMPLE_PROBLEM)
    core.reset(seed=0)
    plan = [Cutting2DMazeAction(0), Cutting2DMazeAction(0), Cutting2DMazeAction(0), Cutting2DMazeAction(1),
            Cutting2DMazeAction(2, rotate=True), Cutting2DMazeAction(1)]
    assert summary["stock"] == [len(core.step(a)[0].pieces) for a in plan]
    text = text_of(cell_with(nb, "plan = ["))
    # each step prints its own events (step 1 cuts the raw piece: a new one is replenished)
    assert "events: ['valid_cut', 'piece_replenished', 'pieces_in_inventory']" in text
    assert text.count("events: ['valid_cut', 'pieces_in_inventory']") == 5
    round_trip = text_of(cell_with(nb, "Cutting2DMazeState.from_dict("))
    assert "round trip:      True" in round_trip


@pytest.mark.slow
def test_02_renders_a_picture_of_every_step(core_nb: tuple) -> None:
    _, nb, summary = core_nb
    assert _images(cell_with(nb, "plan = [")) == summary["steps"] == 6
    assert _images(cell_with(nb, "invalid = [")) == len(summary["invalid"]) == 2


@pytest.mark.slow
def test_02_invalid_actions_change_nothing_and_cost(core_nb: tuple) -> None:
    _, nb, summary = core_nb
    assert summary["invalid"] == ["piece_id_out_of_bounds", "invalid_cut"]
    assert summary["invalid_rewards"] == [-2.0, -2.0]
    assert summary["invalid_unchanged"] is True
    assert text_of(cell_with(nb, "invalid = [")).count("inventory unchanged: True") == 2


# --- 03: MazeEnv, conversions, spaces, random rollout, Gymnasium ---

@pytest.mark.slow
def test_03_spaces_and_conversions_round_trip(maze_nb: tuple) -> None:
    _, nb, summary = maze_nb
    assert summary["observation_keys"] == ["inventory", "inventory_size", "ordered_piece"]
    assert summary["action_keys"] == ["cut_order", "cut_rotation", "piece_idx"]
    assert summary["inventory_shape"] == [50, 2]
    assert summary["observation_round_trip"] is True
    assert summary["actions"] == 50 * 2 * 2 == summary["action_round_trips"]
    assert "the same as reset returned: True" in text_of(cell_with(nb, "maze_to_space(state)"))
    # both malformed actions are refused with the space's own words, and the env did not step
    assert summary["refused"] == 2
    refused = text_of(cell_with(nb, "SpaceMismatchError"))
    assert "is not in Discrete(50)" in refused and "missing keys ['cut_order']" in refused
    assert "env time unchanged by refused actions: 1" in refused


@pytest.mark.slow
def test_03_random_rollout_against_the_greedy_heuristic(maze_nb: tuple) -> None:
    _, nb, summary = maze_nb
    assert summary["random_steps"] == summary["greedy_steps"] == 180
    outcomes = summary["random_outcomes"]
    assert sum(outcomes.values()) == 180
    # random piece ids mostly point past the inventory: -2 each, so the return is at most -2 per invalid action
    assert outcomes["piece_id_out_of_bounds"] > 150
    invalid = outcomes["piece_id_out_of_bounds"] + outcomes.get("invalid_cut", 0)
    assert summary["random_return"] <= -2 * invalid
    # the greedy heuristic is optimal on this problem: 30 replenished raw pieces
    assert summary["greedy_return"] == -30.0
    assert "image/png" in mime_types(cell_with(nb, "env.render()"))
    assert _images(cell_with(nb, "np.cumsum(")) == 1


@pytest.mark.slow
def test_03_gymnasium_view(maze_nb: tuple) -> None:
    _, nb, summary = maze_nb
    assert "gymnasium check_env: passed" in text_of(cell_with(nb, "check_env("))
    assert summary["checker_warnings"] == 0
    assert summary["flat_observation_shape"] == [50 * 2 + 1 + 2]
    assert summary["flat_action_nvec"] == [2, 2, 50]


# --- 04: events, KPIs, LogStatsWrapper, training run in the dashboard ---

@pytest.mark.slow
def test_04_declared_event_statistics(events_nb: tuple) -> None:
    _, nb, summary = events_nb
    assert summary["declared_events"] == ["invalid_cut", "invalid_piece_selected", "piece_discarded",
                                          "piece_replenished", "pieces_in_inventory", "valid_cut"]
    declarations = text_of(cell_with(nb, "get_event_stats("))
    assert "mean_episode_total" in declarations and "step_max" in declarations


@pytest.mark.slow
def test_04_episode_statistics_match_the_envs_own_counts(events_nb: tuple) -> None:
    _, _, summary = events_nb
    assert summary["statistics_agree"] is True
    for policy in ("random", "greedy"):
        episodes = summary["own_outcomes"][policy]
        returns = summary["episode_returns"][policy]
        stats = summary["statistics"][policy]
        assert len(episodes) == len(returns) == 3
        # every step fires exactly one cutting event
        assert stats["valid_cut"] + stats["invalid_cut"] + stats["invalid_piece_selected"] == pytest.approx(180)
        # recomputed here from the info messages and returns the notebook counted itself
        assert stats["valid_cut"] == pytest.approx(np.mean([e.get("valid_cut", 0) for e in episodes]))
        assert stats["invalid_piece_selected"] == pytest.approx(
            np.mean([e.get("piece_id_out_of_bounds", 0) for e in episodes]))
        raw = [-(r + 2 * (e.get("invalid_cut", 0) + e.get("piece_id_out_of_bounds", 0))) + 1
               for r, e in zip(returns, episodes, strict=True)]
        assert stats["piece_replenished"] == pytest.approx(np.mean(raw))
        assert stats["kpi"] == pytest.approx(np.mean(raw) / 180)
    assert summary["statistics"]["greedy"]["piece_replenished"] == 31.0  # the optimum of the simple problem
    assert summary["statistics"]["greedy"]["kpi"] == pytest.approx(31 / 180)
    assert summary["statistics"]["random"]["invalid_piece_selected"] > 150


@pytest.mark.slow
def test_04_training_run_logs_the_event_statistics_every_epoch(events_nb: tuple) -> None:
    from maze_lab.core.log_stats.writers import StatsStore

    run_dir, _, summary = events_nb
    assert summary["status"] == "done" and summary["epochs"] == 5
    assert summary["run_dir"] == str(run_dir)
    stats = StatsStore.load(run_dir).to_dataframe()
    for prefix in ("train", "eval"):
        for topic, event, name in EVENT_STATISTICS:
            rows = stats[(stats.prefix == prefix) & (stats.topic == topic) & (stats.event == event)
                         & (stats.name == name)]
            assert sorted(rows.epoch.unique()) == [1, 2, 3, 4, 5], (prefix, topic, event, name)
        # one cutting event per step of the 180-step episodes, in every epoch
        cutting = stats[(stats.prefix == prefix) & (stats.topic == "CuttingEvents")]
        per_epoch = cutting.groupby("epoch").value.sum()
        assert np.allclose(per_epoch.to_numpy(), 180.0), per_epoch
    for topic, event, name in EVENT_STATISTICS:
        assert summary["epochs_with"][f"{topic}/{event}/{name}"] == [1, 2, 3, 4, 5]


@pytest.mark.slow
def test_04_dashboard_shows_the_event_curves(events_nb: tuple) -> None:
    _, nb, summary = events_nb
    assert WIDGET_VIEW in mime_types(cell_with(nb, "TrainingDashboard(handle)"))
    assert WIDGET_VIEW in mime_types(cell_with(nb, "events_view = TrainingDashboard("))
    assert "run done after 5 epochs" in text_of(cell_with(nb, "await handle.wait_async()"))
    shown = summary["event_charts"]
    for key in ("CuttingEvents / valid_cut / mean_episode_total",
                "CuttingEvents / invalid_piece_selected / mean_episode_total",
                "InventoryEvents / piece_replenished / mean_episode_total",
                "BaseEnvEvents / kpi / raw_piece_usage_per_step (mean, min–max)"):
        assert key in shown
        assert key in text_of(cell_with(nb, "events_view = TrainingDashboard("))
    table = text_of(cell_with(nb, "StatsStore.load(rc.run_dir)"))
    assert "5 epochs" in table and "invalid_piece_selected" in table


# --- 05: reward aggregators ---

@pytest.mark.slow
def test_05_custom_aggregator_differs_exactly_where_the_events_say(reward_nb: tuple) -> None:
    _, nb, summary = reward_nb
    penalty, bonus = summary["parameters"]["invalid_penalty"], summary["parameters"]["reuse_bonus"]
    assert summary["same_actions"] is True
    assert summary["mismatch"] == 0
    assert summary["differ"] == summary["event_steps"] > 0
    first = summary["first_episode"]
    assert len(first["default"]) == len(first["thrifty"]) == len(first["events"]) == 180
    # both reward streams recomputed from the step events alone
    for r_default, r_thrifty, (replenished, invalid, reused) in zip(first["default"], first["thrifty"],
                                                                    first["events"], strict=True):
        assert r_default == pytest.approx(-1.0 * replenished - 2.0 * invalid)
        assert r_thrifty == pytest.approx(-1.0 * replenished + penalty * invalid + bonus * reused)
    assert sum(e[1] for e in first["events"]) > 0  # the fixed policy made invalid actions to disagree about
    assert summary["returns"]["default"][0] == pytest.approx(sum(first["default"]))
    assert summary["returns"]["thrifty"][0] == pytest.approx(sum(first["thrifty"]))
    assert summary["configured_reward"] == penalty
    assert _images(cell_with(nb, "ax_diff.bar(")) == 1
    assert "default" in text_of(cell_with(nb, "same_actions =")) and "same actions with both aggregators: True" in \
        text_of(cell_with(nb, "same_actions ="))
