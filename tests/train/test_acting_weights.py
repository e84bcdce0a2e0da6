"""Which weights a trained RunContext acts with: ``best`` (the run's best evaluation, the default, as
``maze-lab rollout``) or ``last`` (as training left them), for compute_action, evaluate and rollout alike."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from maze_lab import RunContext, load_run

OVERRIDES = {"n_epochs": 2, "algorithm.epoch_length": 2, "algorithm.n_rollout_steps": 32, "runner.concurrency": 2,
             "runner.eval_concurrency": 1, "algorithm.eval_repeats": 2, "seed": 1}


@pytest.fixture
def trained(tmp_path: Path) -> RunContext:
    rc = RunContext(overrides={**OVERRIDES, "log_base_dir": str(tmp_path)}, silent=True)
    rc.train()
    yield rc
    rc.close()


def _scramble(rc: RunContext) -> dict:
    """Change the trainer's weights (the 'last' ones) so that they differ from the best evaluation's."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in rc.trainer.policy.networks[0].parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 5.0)
    return _flat(copy.deepcopy(rc.trainer.model.state_dict()))


def _flat(state: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        elif torch.is_tensor(value):
            out[f"{prefix}{key}"] = value
    return out


def test_best_and_last_are_the_run_checkpoints_weights(trained: RunContext) -> None:
    rc = trained
    assert rc.weights("best").startswith("best (epoch ") and rc.weights("last") == "last"
    scrambled = _scramble(rc)
    observations = {"observation": np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)}
    best_policy = load_run(rc.run_dir).policy("best")
    expected_best = best_policy.compute_action(observations, deterministic=True)["action"]
    expected_last = rc.trainer.policy.compute_action(observations, deterministic=True)["action"]
    assert not np.array_equal(expected_best, expected_last)  # the scramble changed the acting weights
    assert np.array_equal(rc.compute_action(observations, deterministic=True)["action"], expected_best)
    assert np.array_equal(rc.compute_action(observations, deterministic=True, which="last")["action"],
                          expected_last)

    best = rc.rollout(n_episodes=3, seed=7, record_trajectory=False)
    from_disk = load_run(rc.run_dir).rollout(n_episodes=3, seed=7, which="best", record_trajectory=False)
    assert best.episode_rewards == from_disk.episode_rewards
    last = rc.rollout(n_episodes=3, seed=7, record_trajectory=False, which="last")
    assert last.episode_rewards != best.episode_rewards

    key = "BaseEnvEvents/reward/mean"
    best_reward = rc.evaluate(n_episodes=3, deterministic=True, which="best", seed=7)[key]
    last_reward = rc.evaluate(n_episodes=3, deterministic=True, which="last", seed=7)[key]
    assert rc.evaluate(n_episodes=3, deterministic=True, seed=7)[key] == best_reward != last_reward
    after = _flat(rc.trainer.model.state_dict())
    assert scrambled
    assert all(torch.equal(after[k], scrambled[k]) for k in scrambled)  # evaluate put the last weights back
    with pytest.raises(ValueError, match="which='newest' names no weights; valid: 'best', 'last'"):
        rc.compute_action(observations, which="newest")


def test_before_training_best_acts_with_the_current_weights(tmp_path: Path) -> None:
    rc = RunContext(overrides={**OVERRIDES, "log_base_dir": str(tmp_path)}, silent=True)
    assert rc.weights() == "last"
    result = rc.rollout(n_episodes=1, seed=3, record_trajectory=False)
    assert len(result.episode_rewards) == 1
    rc.close()
