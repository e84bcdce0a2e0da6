"""PPO on the masked structured Cutting-2D env reaches the optimum of the simple problem (31 raw pieces), with the
engineered slot model and with the Maze-like model (raw inputs, dot-product slot scores) under the seed's PPO settings.

The env charges -1 for each raw piece it replenishes; the piece an episode starts with is free, so the optimum
of 31 raw pieces is an episode reward of -30 here (the seed's "-31" counts the starting piece as well).
"""

from __future__ import annotations

import pytest
import torch
from cutting2d_training import OPTIMUM_REWARD, holds_from, masked_ppo, maze_settings_ppo

from maze_lab.examples.cutting2d import SIMPLE_PROBLEM_OPTIMUM
from maze_lab.examples.cutting2d.env.events import InventoryEvents


@pytest.mark.slow
def test_ppo_reaches_the_optimum_on_the_masked_env():
    torch.set_num_threads(1)
    trainer = masked_ppo(seed=0)
    # the untrained deterministic policy of this seed is not optimal: the test shows learning
    start = trainer.evaluator.evaluate(trainer.policy, seed=1_000_000)
    assert start < OPTIMUM_REWARD

    def stop_at_optimum(tr, stats):
        if tr.last_eval_reward >= OPTIMUM_REWARD:
            tr.request_stop()

    trainer.callbacks.append(stop_at_optimum)
    trainer.train()
    assert trainer.last_eval_reward == OPTIMUM_REWARD
    # 31 raw pieces: the starting piece plus 30 replenished ones
    stats = trainer.evaluator.last_stats
    key = next(k for k in stats if k.event is InventoryEvents.piece_replenished)
    assert stats[key] == SIMPLE_PROBLEM_OPTIMUM
    assert trainer.env_steps < 10_000  # this seed: fewer agent actions than the seed system needs


@pytest.mark.slow
def test_maze_like_model_learns_and_holds_the_optimum_with_maze_ppo_settings():
    """The Maze-like model (raw inputs, dot-product slot scores) with the seed system's PPO settings."""
    torch.set_num_threads(1)
    seed, n_updates = 6, 6
    trainer = maze_settings_ppo(seed=seed, model="cutting2d_struct_masked_maze", n_updates=n_updates)
    # the untrained deterministic policy of this seed uses at least twice the optimal number of raw pieces
    rewards = [trainer.evaluator.evaluate(trainer.policy, seed=seed + 1_000_000)]
    assert rewards[0] <= 2 * OPTIMUM_REWARD
    trainer.callbacks.append(lambda tr, _stats: rewards.append(tr.last_eval_reward))
    trainer.train()
    assert trainer.env_steps == n_updates * 8 * 200  # 1,600 sub-steps per update
    assert len(rewards) == n_updates + 1
    # optimal within two updates (3,200 sub-steps; the seed system holds it from 4,000-6,000) and ever after
    held = holds_from(rewards)
    assert held is not None and held <= 2, rewards
    stats = trainer.evaluator.last_stats
    key = next(k for k in stats if k.event is InventoryEvents.piece_replenished)
    assert stats[key] == SIMPLE_PROBLEM_OPTIMUM  # 31 raw pieces, as counted by the env's statistics


def test_holds_from_counts_only_an_unbroken_run_to_the_end():
    assert holds_from([-61.0, -30.0, -30.0]) == 1
    assert holds_from([-30.0, -31.0, -30.0]) == 2
    assert holds_from([-30.0, -30.0]) == 0
    assert holds_from([-30.0, -31.0]) is None
    assert holds_from([]) is None
    assert holds_from([-31.0, -30.0, -30.0], min_later=1) == 1
    assert holds_from([-31.0, -31.0, -30.0], min_later=1) is None


def test_structured_rollout_records_both_policy_keys():
    torch.set_num_threads(1)
    trainer = masked_ppo(seed=0, n_envs=2, n_rollout_steps=6)
    rollout = trainer.rollout_generator.rollout(trainer.policy, 6)
    assert [r.key for r in rollout.records] == [0, 1] * 3
    batches = trainer._prepare_batches(rollout)
    assert set(batches) == {0, 1}
    assert len(batches[0]) == len(batches[1]) == 6
    # masks are respected by the sampled piece selections
    for r in rollout.records[::2]:
        chosen = r.actions["piece_idx"]
        assert all(r.obs["inventory_mask"][i, chosen[i]] == 1 for i in range(2))
