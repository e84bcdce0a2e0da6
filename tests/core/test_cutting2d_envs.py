"""Cutting-2D MazeEnvs: the flat env, the structured env's alternating spaces, the masked env's masks."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from maze_lab.core.env.space_checks import SpaceMismatchError
from maze_lab.core.wrappers.gym_maze_env import GymnasiumEnvAdapter
from maze_lab.examples.cutting2d import (
    SIMPLE_PROBLEM,
    Cutting2DMazeAction,
    Cutting2DMazeState,
    make_masked_env,
    make_struct_env,
    maze_env_factory,
)

SEED_SETTING = {"max_pieces_in_inventory": 200, "raw_piece_size": (100, 100), "static_demand": [(30, 15)]}


def _shapes(space: gym.spaces.Dict) -> dict[str, object]:
    return {k: (s.shape if isinstance(s, gym.spaces.Box) else s) for k, s in space.spaces.items()}


def test_flat_env_spaces_and_observation() -> None:
    """Dict spaces as in the seed: inventory (200, 2), inventory_size (1,), ordered_piece (2,)."""
    env = maze_env_factory(**SEED_SETTING)
    obs, info = env.reset()
    assert _shapes(env.observation_space) == {"inventory": (200, 2), "inventory_size": (1,), "ordered_piece": (2,)}
    assert _shapes(env.action_space) == {"cut_order": gym.spaces.Discrete(2), "cut_rotation": gym.spaces.Discrete(2),
                                         "piece_idx": gym.spaces.Discrete(200)}
    assert info == {}
    assert obs["inventory"][0].tolist() == [100.0, 100.0] and not obs["inventory"][1:].any()
    assert obs["inventory_size"].tolist() == [1.0] and obs["ordered_piece"].tolist() == [30.0, 15.0]
    assert all(env.observation_space[k].contains(v) for k, v in obs.items())
    obs, reward, terminated, truncated, info = env.step({"piece_idx": 0, "cut_rotation": 0, "cut_order": 0})
    assert (reward, terminated, truncated, info) == (-1.0, False, False, {"msg": "valid_cut"})
    assert obs["inventory_size"].tolist() == [3.0]
    assert env.get_maze_action() == Cutting2DMazeAction(0, False, False)


def test_conversions_invert() -> None:
    """Observation and action conversions round-trip."""
    env = maze_env_factory(**SEED_SETTING)
    env.reset()
    env.step({"piece_idx": 0, "cut_rotation": 1, "cut_order": 1})
    state = env.get_maze_state()
    obs_conv, act_conv = env.observation_conversion, env.action_conversion
    assert obs_conv.space_to_maze(obs_conv.maze_to_space(state)) == state
    action = {"piece_idx": 4, "cut_rotation": 1, "cut_order": 0}
    assert act_conv.maze_to_space(act_conv.space_to_maze(action, state)) == action


def test_malformed_actions_raise_clear_errors() -> None:
    """Missing or unknown keys and values outside the space are errors; an absent piece is only an event."""
    env = maze_env_factory(**SEED_SETTING)
    env.reset()
    with pytest.raises(SpaceMismatchError, match=r"missing keys \['cut_order', 'cut_rotation'\]"):
        env.step({"piece_idx": 0})
    with pytest.raises(SpaceMismatchError, match="unknown keys"):
        env.step({"piece_idx": 0, "cut_rotation": 0, "cut_order": 0, "speed": 1})
    with pytest.raises(SpaceMismatchError, match="piece_idx"):
        env.step({"piece_idx": 200, "cut_rotation": 0, "cut_order": 0})
    _, reward, _, _, info = env.step({"piece_idx": 150, "cut_rotation": 0, "cut_order": 0})
    assert (reward, info) == (-2.0, {"error": "piece_id_out_of_bounds"})

    struct = make_struct_env(**SEED_SETTING)
    with pytest.raises(RuntimeError, match="before reset"):
        struct.step({"piece_idx": 0})
    struct.reset()
    with pytest.raises(SpaceMismatchError, match="policy key 0"):
        struct.step({"piece_idx": 0, "cut_order": 1})
    struct.step({"piece_idx": 0})
    with pytest.raises(SpaceMismatchError, match="policy key 1"):
        struct.step({"piece_idx": 0})


def test_structured_env_alternates_spaces() -> None:
    """The seed's structured test script: spaces and observations alternate between the two sub-steps."""
    env = make_struct_env(**SEED_SETTING)
    obs, _ = env.reset()
    assert env.actor_id() == (0, 0) and env.agent_counts_dict == {0: 1, 1: 1} and not env.is_flat
    assert _shapes(env.action_space) == {"piece_idx": gym.spaces.Discrete(200)}
    assert _shapes(env.observation_space) == {"inventory": (200, 2), "inventory_size": (1,), "ordered_piece": (2,)}
    assert list(obs) == ["inventory", "inventory_size", "ordered_piece"]

    obs, reward, terminated, truncated, info = env.step({"piece_idx": 0})
    assert env.actor_id() == (1, 0)
    assert _shapes(env.action_space) == {"cut_order": gym.spaces.Discrete(2), "cut_rotation": gym.spaces.Discrete(2)}
    assert _shapes(env.observation_space) == {"ordered_piece": (2,), "selected_piece": (2,)}
    assert list(obs) == ["selected_piece", "ordered_piece"]
    assert obs["selected_piece"].tolist() == [100.0, 100.0]
    assert (reward, terminated, truncated, info) == (0.0, False, False, {})
    assert env.get_actor_rewards() is None
    assert env.get_env_time() == 0  # the flat env has not stepped yet

    obs, reward, *_ = env.step({"cut_rotation": 0, "cut_order": 0})
    assert env.actor_id() == (0, 0) and list(obs) == ["inventory", "inventory_size", "ordered_piece"]
    assert reward == -1.0 and env.get_env_time() == 1
    assert env.get_actor_rewards().tolist() == [-0.5, -0.5]


def test_structured_env_splits_recorded_steps() -> None:
    """A recorded flat state and action become per-sub-step observations and actions."""
    env = make_struct_env(**SEED_SETTING)
    env.reset()
    state = Cutting2DMazeState([(40, 40), (100, 100)], 200, (30, 15), (100, 100))
    obs, act = env.get_observation_and_action_dicts(state, Cutting2DMazeAction(1, True, False))
    assert obs[1]["selected_piece"].tolist() == [100.0, 100.0] and obs[0]["inventory_size"].tolist() == [2.0]
    assert act == {0: {"piece_idx": 1}, 1: {"cut_rotation": 1, "cut_order": 0}}


def test_masked_env_observation_keys_and_spaces() -> None:
    """The seed's masked test script: inventory_mask joins sub-step 0, cutting_mask sub-step 1."""
    env = make_masked_env(**SEED_SETTING)
    obs, _ = env.reset()
    assert list(obs) == ["inventory", "inventory_size", "ordered_piece", "inventory_mask"]
    assert _shapes(env.observation_space) == {"inventory": (200, 2), "inventory_mask": (200,),
                                              "inventory_size": (1,), "ordered_piece": (2,)}
    assert _shapes(env.action_space) == {"piece_idx": gym.spaces.Discrete(200)}
    obs, *_ = env.step(env.action_space.sample())
    assert list(obs) == ["selected_piece", "ordered_piece", "cutting_mask"]
    assert _shapes(env.observation_space) == {"cutting_mask": (2,), "ordered_piece": (2,), "selected_piece": (2,)}
    assert _shapes(env.action_space) == {"cut_order": gym.spaces.Discrete(2), "cut_rotation": gym.spaces.Discrete(2)}
    for space in env.observation_spaces_dict.values():
        assert all(s.dtype == np.float32 for s in space.spaces.values())


def test_masks_on_a_hand_built_inventory() -> None:
    """Order 30x15: a piece fits where its short side >= 15 and its long side >= 30; empty slots are masked."""
    env = make_masked_env(max_pieces_in_inventory=8, raw_piece_size=(100, 100), static_demand=(30, 15))
    inventory = [(20, 40), (10, 10), (15, 30), (100, 100), (30, 10)]
    obs, _ = env.reset(options={"inventory": inventory})
    assert obs["inventory_mask"].tolist() == [1, 0, 1, 1, 0, 0, 0, 0]
    # cutting_mask[r] says whether cut_rotation=r fits: 30x15 as ordered / rotated to 15x30
    expected = {0: [0, 1], 1: [0, 0], 2: [0, 1], 3: [1, 1], 4: [0, 0], 6: [0, 0]}
    for piece_idx, mask in expected.items():
        env.reset(options={"inventory": inventory})
        obs, *_ = env.step({"piece_idx": piece_idx})
        assert obs["cutting_mask"].tolist() == mask, piece_idx
    # rotation chosen by the mask always cuts; an empty slot is an invalid selection
    env.reset(options={"inventory": inventory})
    env.step({"piece_idx": 0})
    _, _, _, _, info = env.step({"cut_rotation": 1, "cut_order": 0})
    assert info == {"msg": "valid_cut"}
    env.step({"piece_idx": 7})
    _, reward, _, _, info = env.step({"cut_rotation": 0, "cut_order": 0})
    assert (reward, info) == (-2.0, {"error": "piece_id_out_of_bounds"})


def test_mask_follows_the_order_and_rotation() -> None:
    """A square order and a rotated piece: masks are symmetric in the piece's orientation."""
    env = make_masked_env(max_pieces_in_inventory=4, raw_piece_size=(4, 3), static_demand=[(2, 2), (1, 3)])
    obs, _ = env.reset(options={"inventory": [(3, 1), (2, 2), (1, 3), (4, 3)]})
    assert obs["inventory_mask"].tolist() == [0, 1, 0, 1]
    env.step({"piece_idx": 1})
    env.step({"cut_rotation": 0, "cut_order": 0})  # 2x2 cut exactly; next order 1x3
    obs, *_ = env.step({"piece_idx": 0})  # the 3x1 piece, order 1x3 fits only rotated
    assert obs["cutting_mask"].tolist() == [0, 1]


@pytest.mark.parametrize("make", [maze_env_factory, make_struct_env, make_masked_env])
@pytest.mark.parametrize("setting", ["simple", "random_demand"])
def test_gymnasium_env_checker(make: object, setting: str) -> None:
    """All three envs pass gymnasium's env checker through the Gymnasium adapter (render included)."""
    kwargs = SIMPLE_PROBLEM if setting == "simple" else {
        "max_pieces_in_inventory": 20, "raw_piece_size": (100, 100), "random_demand": True,
        "static_demand": [(30, 15), (20, 45), (60, 25)]}
    env = make(**kwargs)
    adapter = GymnasiumEnvAdapter(env)
    adapter.render_mode = "rgb_array"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(render fps|alternative render modes).*")
        check_env(adapter)
    frame = adapter.render()
    assert frame.ndim == 3 and frame.shape[2] == 3
