"""Cutting-2D greedy heuristic on the simple problem, the renderer, and the example's config files."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from maze_lab.core.log_stats.base_events import BaseEnvEvents
from maze_lab.core.utils.factory import Factory
from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.core.wrappers.wrapper import wrap_env
from maze_lab.examples.cutting2d import (
    CONF_DIR,
    SIMPLE_PROBLEM,
    SIMPLE_PROBLEM_OPTIMUM,
    Cutting2DMazeAction,
    Cutting2DMazeState,
    GreedyPolicy,
    InventoryEvents,
    MaskedStructuredCutting2DEnvironment,
    StructuredCutting2DEnvironment,
    make_masked_env,
    make_struct_env,
    maze_env_factory,
)

GREEDY_RAW_PIECES = 31  # measured: greedy reaches the known optimum of the simple problem


@pytest.mark.parametrize("make", [maze_env_factory, make_struct_env, make_masked_env])
def test_greedy_on_the_simple_problem(make: object) -> None:
    """Greedy uses 31 raw pieces in 180 steps (30 cut + the initial one), with no invalid action."""
    env = LogStatsWrapper(make(**SIMPLE_PROBLEM))
    policy = GreedyPolicy()
    policy.seed(0)
    policy.reset()
    assert not policy.needs_state()
    obs, _ = env.reset(seed=0)
    total, sub_steps = 0.0, 0
    while True:
        obs, reward, terminated, truncated, _ = env.step(policy.compute_action(obs, env.actor_id(), env=env))
        total += reward
        sub_steps += 1
        if terminated or truncated:
            break
    env.reset()
    assert not terminated
    assert sub_steps == 180 * (1 if make is maze_env_factory else 2)
    raw_pieces = env.get_stats_value(InventoryEvents.piece_replenished, "episode")
    assert raw_pieces == GREEDY_RAW_PIECES == SIMPLE_PROBLEM_OPTIMUM
    assert total == -(GREEDY_RAW_PIECES - 1)  # the raw piece stocked at reset is not a step's penalty
    kpi = env.get_stats_value(BaseEnvEvents.kpi, "episode", None, ("raw_piece_usage_per_step",))
    assert kpi == [pytest.approx(31 / 180)]


def test_greedy_choices() -> None:
    """Smallest fitting piece (oldest on ties), as ordered where possible, rotated otherwise."""
    obs = {"inventory": np.array([[5, 5], [2, 4], [4, 2], [3, 3], [0, 0]], np.float32),
           "inventory_size": np.array([4], np.float32), "ordered_piece": np.array([2, 3], np.float32)}
    assert GreedyPolicy().compute_action(obs) == {"piece_idx": 1, "cut_rotation": 0, "cut_order": 0}
    obs["ordered_piece"] = np.array([3, 2], np.float32)
    assert GreedyPolicy().compute_action(obs) == {"piece_idx": 1, "cut_rotation": 1, "cut_order": 0}
    assert GreedyPolicy(structured=True).compute_action(obs) == {"piece_idx": 1}
    struct = make_struct_env(max_pieces_in_inventory=5, raw_piece_size=(5, 5), static_demand=(3, 2))
    assert GreedyPolicy().compute_action(obs, 0, env=struct) == {"piece_idx": 1}
    assert GreedyPolicy().compute_action(obs, 0, env=maze_env_factory(max_pieces_in_inventory=5)) \
        == {"piece_idx": 1, "cut_rotation": 1, "cut_order": 0}
    cut_obs = {"selected_piece": np.array([2, 4], np.float32), "ordered_piece": np.array([3, 2], np.float32)}
    assert GreedyPolicy().compute_action(cut_obs) == {"cut_rotation": 1, "cut_order": 0}


def test_renderer_draws_a_recorded_step(tmp_path: Path) -> None:
    """A recorded (state, action) pair, after a JSON round trip, renders to a PNG without pyplot state."""
    env = maze_env_factory(max_pieces_in_inventory=50, raw_piece_size=(100, 100),
                           static_demand=[(30, 15), (20, 45), (60, 25)])
    policy = GreedyPolicy()
    obs, _ = env.reset()
    records = []
    for _ in range(6):
        state = env.get_maze_state()
        obs, *_ = env.step(policy.compute_action(obs))
        records.append((state.to_dict(), env.get_maze_action().to_dict(), list(env.get_step_events())))
    state_dict, action_dict, events = records[-1]
    state, action = Cutting2DMazeState.from_dict(state_dict), Cutting2DMazeAction.from_dict(action_dict)
    renderer = env.get_renderer()
    fig = renderer.render(state, action, events=events, title="Cutting 2D: step 6")
    assert isinstance(fig, Figure)
    path = renderer.render_to_png(str(tmp_path / "step.png"), state, action)
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    for other in (None, Cutting2DMazeAction(40), Cutting2DMazeAction(0, rotate=True)):
        assert isinstance(renderer.render(state, other), Figure)
    assert renderer.render_rgb(state, action).shape[2] == 3
    if "matplotlib.pyplot" in sys.modules:
        assert sys.modules["matplotlib.pyplot"].get_fignums() == []


@pytest.mark.parametrize("name, env_type", [("cutting2d_flat", "Cutting2DEnvironment"),
                                            ("cutting2d_struct", StructuredCutting2DEnvironment.__name__),
                                            ("cutting2d_struct_masked", MaskedStructuredCutting2DEnvironment.__name__)])
def test_env_configs_instantiate(name: str, env_type: str) -> None:
    """Each env config builds its env (the simple problem, 180 steps) and takes the wrapper config."""
    from omegaconf import OmegaConf

    env = Factory().instantiate(OmegaConf.load(CONF_DIR / "env" / f"{name}.yaml"))
    assert type(env).__name__ == env_type
    env = wrap_env(env, OmegaConf.to_container(OmegaConf.load(CONF_DIR / "wrappers" / "cutting2d.yaml")))
    core = env.unwrapped.core_env
    assert (core.max_steps, core.raw_piece_size, core.max_pieces_in_inventory) == (180, (4, 3), 50)
    policy = Factory().instantiate(OmegaConf.load(CONF_DIR / "policy" / "cutting2d_greedy.yaml"))
    obs, _ = env.reset()
    env.step(policy.compute_action(obs, env.actor_id(), env=env))


def test_model_configs_cover_every_observation() -> None:
    """Every observation key of every policy key has a modality in the model config of its env."""
    from omegaconf import OmegaConf

    for name, make in (("cutting2d_flat", maze_env_factory), ("cutting2d_struct", make_struct_env),
                       ("cutting2d_struct_masked", make_masked_env)):
        cfg = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml"))
        mapping = cfg["model_builder"]["observation_modality_mapping"]
        env = make(**SIMPLE_PROBLEM)
        for space in env.observation_spaces_dict.values():
            assert set(space.spaces) <= set(mapping), (name, set(space.spaces) - set(mapping))
        assert set(mapping.values()) <= set(cfg["model_builder"]["modality_config"])
