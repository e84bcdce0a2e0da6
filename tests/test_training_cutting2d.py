"""PPO on the masked structured Cutting-2D env reaches the optimum of the simple problem (31 raw pieces).

The env charges -1 for each raw piece it replenishes; the piece an episode starts with is free, so the optimum
of 31 raw pieces is an episode reward of -30 here (the seed's "-31" counts the starting piece as well).
"""

from __future__ import annotations

import pytest
import torch
from cutting2d_training import OPTIMUM_REWARD, masked_ppo

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
