"""Cutting-2D core env: the seed's test-script output, cutting geometry, inventory management, seeding."""

from __future__ import annotations

import json

import numpy as np
import pytest

from maze_lab.examples.cutting2d import (
    Cutting2DCoreEnvironment,
    Cutting2DMazeAction,
    Cutting2DMazeState,
    CuttingEvents,
    InventoryEvents,
)


def _events(env: Cutting2DCoreEnvironment) -> list[str]:
    return [e.interface_method.__name__ for e in env.get_step_events() if e.interface_method.__name__
            != "pieces_in_inventory"]


def test_seed_test_script_output() -> None:
    """Piece 0 of a 100x100 stock, order 30x15: raw piece first (reward -1), then the remains (reward 0)."""
    env = Cutting2DCoreEnvironment(max_pieces_in_inventory=200, raw_piece_size=[100, 100], static_demand=(30, 15))
    env.reset()
    lines = []
    for _ in range(3):
        env.context.event_service.clear_step()
        _, reward, terminated, truncated, info = env.step(Cutting2DMazeAction(0, rotate=False,
                                                                               reverse_cutting_order=False))
        lines.append(f"reward {reward:g} | done {terminated or truncated} | info {info}")
    assert lines == [
        "reward -1 | done False | info {'msg': 'valid_cut'}",
        "reward 0 | done False | info {'msg': 'valid_cut'}",
        "reward 0 | done False | info {'msg': 'valid_cut'}",
    ]


def test_cut_x_first_stores_right_strip_then_top_of_left_strip() -> None:
    """x first: remains (W - w) x H, then w x (H - h); the raw piece is replenished after them."""
    env = Cutting2DCoreEnvironment(raw_piece_size=(100, 100), static_demand=(30, 15))
    env.reset()
    state, *_ = env.step(Cutting2DMazeAction(0, False, False))
    assert state.pieces == [(70, 100), (30, 85), (100, 100)]


def test_cut_y_first_and_rotation() -> None:
    """y first: W x (H - h), then (W - w) x h; rotation swaps the order's x and y."""
    env = Cutting2DCoreEnvironment(raw_piece_size=(100, 100), static_demand=(30, 15))
    env.reset()
    state, *_ = env.step(Cutting2DMazeAction(0, False, True))
    assert state.pieces == [(100, 85), (70, 15), (100, 100)]
    env.reset()
    state, *_ = env.step(Cutting2DMazeAction(0, True, False))  # the order is cut as 15 x 30
    assert state.pieces == [(85, 100), (15, 70), (100, 100)]


def test_exact_fit_leaves_no_remains_and_zero_sized_remains_are_dropped() -> None:
    """Remains with a zero side are not stored."""
    env = Cutting2DCoreEnvironment(raw_piece_size=(4, 3), static_demand=[(4, 1), (2, 2)])
    env.reset()
    state, *_ = env.step(Cutting2DMazeAction(0, False, False))  # 4x1 from 4x3: only 4x2 remains
    assert state.pieces == [(4, 2), (4, 3)]
    state, *_ = env.step(Cutting2DMazeAction(0, False, True))  # 2x2 from 4x2, y first: only 2x2 remains
    assert state.pieces == [(4, 3), (2, 2)]


def test_invalid_actions_are_events_and_penalties_not_exceptions() -> None:
    """A piece id past the inventory and an order that does not fit: -2 each, the inventory is unchanged."""
    env = Cutting2DCoreEnvironment(max_pieces_in_inventory=10, raw_piece_size=(100, 100), static_demand=(30, 15))
    env.reset(options={"inventory": [(20, 10), (100, 100)]})
    for action, error, event in [(Cutting2DMazeAction(7), "piece_id_out_of_bounds", "invalid_piece_selected"),
                                 (Cutting2DMazeAction(-1), "piece_id_out_of_bounds", "invalid_piece_selected"),
                                 (Cutting2DMazeAction(0, rotate=True), "invalid_cut", "invalid_cut")]:
        env.context.event_service.clear_step()
        state, reward, terminated, truncated, info = env.step(action)
        assert (reward, info, _events(env)) == (-2.0, {"error": error}, [event])
        assert state.pieces == [(20, 10), (100, 100)]


def test_full_inventory_discards_oldest_and_keeps_a_raw_piece() -> None:
    """A full inventory drops its oldest piece; a discarded raw piece is replaced at once."""
    env = Cutting2DCoreEnvironment(max_pieces_in_inventory=3, raw_piece_size=(10, 10), static_demand=(2, 3))
    env.reset(options={"inventory": [(10, 10), (5, 5), (6, 6)]})
    env.context.event_service.clear_step()
    state, reward, *_ = env.step(Cutting2DMazeAction(2, False, False))  # 6x6 -> remains 4x6 and 2x3
    # popping 6x6 leaves [10x10, 5x5]; 4x6 still fits; storing 2x3 discards the raw piece (oldest); as no raw
    # piece is left, a fresh one is replenished, which discards 5x5
    assert state.pieces == [(4, 6), (2, 3), (10, 10)]
    assert _events(env) == ["piece_discarded", "valid_cut", "piece_discarded", "piece_replenished"]
    discarded = [e.attributes["piece"] for e in env.get_step_events()
                 if e.interface_method is InventoryEvents.piece_discarded]
    assert discarded == [(10, 10), (5, 5)]
    assert reward == -1.0


def test_demand_list_is_issued_in_turn_and_episode_truncates() -> None:
    """Orders cycle through the list; the step reaching max_steps is truncated, never terminated."""
    env = Cutting2DCoreEnvironment(raw_piece_size=(4, 3), static_demand=[[1, 2], [1, 1], [2, 2]], max_steps=5)
    state = env.reset()
    seen, flags = [state.current_demand], []
    for _ in range(5):
        state, _, terminated, truncated, _ = env.step(Cutting2DMazeAction(0))
        seen.append(state.current_demand)
        flags.append((terminated, truncated))
    assert seen == [(1, 2), (1, 1), (2, 2), (1, 2), (1, 1), (2, 2)]
    assert flags == [(False, False)] * 4 + [(False, True)]
    assert env.reset().current_demand == (1, 2) and env.step_count == 0


def test_random_demand_is_seeded() -> None:
    """random_demand draws orders from the env's generator: same seed, same orders."""
    def orders(seed: int | None, via_seed_method: bool = False) -> list[tuple[int, int]]:
        env = Cutting2DCoreEnvironment(raw_piece_size=(100, 100), static_demand=[(10, 20), (30, 15), (5, 5)],
                                       random_demand=True)
        if via_seed_method:
            env.seed(seed)
            state = env.reset()
        else:
            state = env.reset(seed=seed)
        out = [state.current_demand]
        for _ in range(30):
            state, *_ = env.step(Cutting2DMazeAction(0))
            out.append(state.current_demand)
        return out

    assert orders(3) == orders(3) == orders(3, via_seed_method=True)
    assert orders(3) != orders(4)
    assert len(set(orders(3))) == 3


def test_maze_state_and_action_round_trip_through_json() -> None:
    """to_dict() is JSON-safe and from_dict() restores equal objects; snapshots do not change later."""
    env = Cutting2DCoreEnvironment(raw_piece_size=(100, 100), static_demand=(30, 15))
    first = env.reset()
    state, *_ = env.step(Cutting2DMazeAction(0, True, True))
    assert first.pieces == [(100, 100)]  # the earlier snapshot is unaffected by the step
    restored = Cutting2DMazeState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert restored == state and restored is not state
    assert restored.inventory.dtype == np.int64
    action = Cutting2DMazeAction(3, True, False)
    assert Cutting2DMazeAction.from_dict(json.loads(json.dumps(action.to_dict()))) == action
    with pytest.raises(KeyError, match="missing keys"):
        Cutting2DMazeState.from_dict({"inventory": []})


def test_configuration_errors_are_clear() -> None:
    """Impossible orders, bad sizes and unknown reset options are rejected with the reason."""
    with pytest.raises(ValueError, match="does not fit into the raw piece"):
        Cutting2DCoreEnvironment(raw_piece_size=(4, 3), static_demand=(5, 5))
    with pytest.raises(ValueError, match="positive"):
        Cutting2DCoreEnvironment(raw_piece_size=(0, 3), static_demand=(1, 1))
    with pytest.raises(ValueError, match="static_demand"):
        Cutting2DCoreEnvironment(static_demand=[])
    env = Cutting2DCoreEnvironment(max_pieces_in_inventory=2)
    with pytest.raises(ValueError, match="valid options"):
        env.reset(options={"inventroy": []})
    with pytest.raises(ValueError, match="do not fit into an inventory"):
        env.reset(options={"inventory": [(1, 1)] * 3})


def test_event_topics_are_registered_for_statistics() -> None:
    """Both topics are known to the event service (needed to zero-fill counts of steps without events)."""
    env = Cutting2DCoreEnvironment()
    assert {CuttingEvents, InventoryEvents} <= set(env.context.event_service.topics)


def test_core_env_stepped_by_hand_reports_only_this_steps_events() -> None:
    """A CoreEnv stepped without a MazeEnv (as notebook 02 and the seed's test script do) hands out the events of the
    last step only: neither the constructor's, the reset's nor the previous step's events leak into it."""
    from maze_lab.examples.cutting2d import SIMPLE_PROBLEM, Cutting2DCoreEnvironment, Cutting2DMazeAction

    core = Cutting2DCoreEnvironment(**SIMPLE_PROBLEM)
    core.reset(seed=0)
    assert [e.interface_method.__name__ for e in core.get_step_events()] == ["piece_replenished"]
    core.step(Cutting2DMazeAction(0))
    assert [e.interface_method.__name__ for e in core.get_step_events()] == [
        "valid_cut", "piece_replenished", "pieces_in_inventory"]
    core.step(Cutting2DMazeAction(9))
    assert [e.interface_method.__name__ for e in core.get_step_events()] == [
        "invalid_piece_selected", "pieces_in_inventory"]
    core.reset(seed=0)
    assert [e.interface_method.__name__ for e in core.get_step_events()] == ["piece_replenished"]
