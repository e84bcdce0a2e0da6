"""Behavioural cloning from recorded trajectories: Cutting-2D greedy and a CartPole heuristic; PPO fine-tuning."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from cutting2d_training import masked_env_factory
from omegaconf import OmegaConf
from training_utils import cartpole_factory, flat_actor_critic

from maze_lab.agent import DummyCartPolePolicy
from maze_lab.agent.composers import build_model_composer
from maze_lab.core.log_stats.aggregation import StatKey
from maze_lab.core.log_stats.writers import StatsStore
from maze_lab.core.rollout import SequentialRolloutRunner
from maze_lab.examples.cutting2d import CONF_DIR, GreedyPolicy
from maze_lab.train.trainers.bc import BC, BCAlgorithmConfig, ImitationEvents, InMemoryImitationDataset
from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
from maze_lab.train.trainers.ppo import PPO, PPOAlgorithmConfig
from maze_lab.train.vector_env import SequentialVectorEnv


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _record(factory, policy, n: int, directory: Path, seed: int = 0) -> list[float]:
    result = SequentialRolloutRunner(factory, policy, n_episodes=n, trajectory_dir=directory, seed=seed,
                                     writers=[]).run()
    return result.episode_rewards


def _cutting_actor_critic(seed: int):
    torch.manual_seed(seed)
    env = masked_env_factory()
    cfg = OmegaConf.to_container(OmegaConf.load(f"{CONF_DIR}/model/cutting2d_struct_masked.yaml"))
    return build_model_composer(cfg, env.action_spaces_dict, env.observation_spaces_dict,
                                env.agent_counts_dict).actor_critic()


def _evaluator(factory, n_episodes: int = 1, writers: list | None = None) -> RolloutEvaluator:
    return RolloutEvaluator(SequentialVectorEnv([factory], logging_prefix="eval", writers=writers or []),
                            n_episodes=n_episodes, deterministic=True)


@pytest.fixture(scope="module")
def greedy_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("greedy")
    rewards = _record(masked_env_factory, GreedyPolicy(), 3, directory)
    assert rewards == [-30.0] * 3  # the greedy heuristic reaches the optimum of the simple problem
    return directory


def test_bc_clones_cutting2d_greedy_and_fine_tunes_with_ppo(greedy_dir, tmp_path):
    store = StatsStore()
    model = _cutting_actor_critic(seed=0)
    evaluator = _evaluator(masked_env_factory, writers=[store])
    untrained = evaluator.evaluate(model.policy)
    config = BCAlgorithmConfig(n_epochs=EPOCHS, eval_every_k_iterations=None, batch_size=100, seed=0,
                               validation_percentage=34)
    bc = BC(config, model, greedy_dir, evaluator=evaluator, writers=[store], checkpoint_dir=tmp_path / "bc")
    assert (len(bc.train_episodes), len(bc.validation_episodes)) == (2, 1)
    bc.train()
    assert bc.stop_reason == "done" and bc.epoch == EPOCHS
    val = bc.last_validation_stats
    acc = {h: val[StatKey(ImitationEvents.discrete_accuracy, None, (k, h))]
           for k, h in [(0, "piece_idx"), (1, "cut_rotation"), (1, "cut_order")]}
    print("untrained", untrained, "validation accuracy", acc, "eval", bc.last_eval_reward,
          "best", bc.model_selection.best_reward)
    assert min(acc.values()) >= ACC_MIN
    assert bc.model_selection.best_reward >= -30.0 and bc.model_selection.best_reward > untrained
    # per-epoch statistics reach the StatsStore: train and validation losses per policy key
    df = store.to_dataframe()
    assert set(df["prefix"]) >= {"train", "validation", "eval"}
    val_loss = df[(df.prefix == "validation") & (df.event == "policy_loss")]
    assert set(val_loss["name"]) == {"0", "1"} and len(val_loss) == 2 * EPOCHS
    assert len(df[(df.prefix == "train") & (df.event == "discrete_accuracy")]) == 3 * EPOCHS

    best = tmp_path / "bc" / "state_dict_best.pt"
    assert best.exists() and (tmp_path / "bc" / "state_dict_last.pt").exists()
    ppo_model = _cutting_actor_critic(seed=1)
    ppo = PPO(PPOAlgorithmConfig(n_epochs=1, epoch_length=1, n_rollout_steps=32, batch_size=64,
                                 n_optimization_epochs=1, seed=0, patience=0),
              ppo_model, env=SequentialVectorEnv([masked_env_factory] * 2, logging_prefix="train", writers=[]),
              evaluator=_evaluator(masked_env_factory))
    ppo.load_checkpoint(best, weights_only=True)
    saved = torch.load(best, weights_only=True)["model"]
    for name, sd in ppo_model.state_dict().items():
        for p, v in sd.items():
            assert torch.equal(v, saved[name][p]), (name, p)
    assert ppo.evaluate(deterministic=True, repeats=1) >= -30.0
    ppo.train(1)
    assert ppo.epoch == 1


def test_bc_imitates_cartpole_heuristic(tmp_path):
    rewards = _record(cartpole_factory, DummyCartPolePolicy(), 4, tmp_path / "traj")
    assert np.mean(rewards) > 100
    torch.manual_seed(0)
    model = flat_actor_critic(cartpole_factory())
    bc = BC(BCAlgorithmConfig(n_epochs=40, batch_size=64, lr=1e-2, seed=0, eval_every_k_iterations=None),
            model, tmp_path / "traj", writers=[])
    bc.train()
    acc = bc.last_validation_stats[StatKey(ImitationEvents.discrete_accuracy, None, (0, "action"))]
    print("cartpole validation accuracy", acc)
    assert acc >= 0.93  # measured 0.978-0.992 over seeds 0-3
    reward = _evaluator(cartpole_factory).evaluate(model.policy, seed=0)
    print("cartpole cloned reward", reward)
    assert reward >= 400
    assert bc.model_selection.best_epoch is not None  # without an evaluator: lowest validation loss


def test_missing_and_empty_trajectory_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        InMemoryImitationDataset(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no recorded episodes in .*empty"):
        InMemoryImitationDataset(tmp_path / "empty")


def test_space_mismatch_names_key_and_shapes(greedy_dir):
    model = flat_actor_critic(cartpole_factory())
    with pytest.raises(ValueError, match=r"policy key 0: the policy's observation space has \['observation'\]"):
        BC(BCAlgorithmConfig(seed=0), model, greedy_dir, evaluator=_evaluator(cartpole_factory), writers=[])
    with pytest.raises(ValueError, match=r"policy key 1, the policy has networks for \[0\]"):
        BC(BCAlgorithmConfig(seed=0), model, greedy_dir, writers=[])
    env = masked_env_factory()
    obs_spaces = dict(env.observation_spaces_dict)
    obs_spaces[0] = gym.spaces.Dict({**obs_spaces[0].spaces, "inventory": gym.spaces.Box(0, 5, (40, 2))})
    with pytest.raises(ValueError, match=r"policy key 0, observation 'inventory'.*shape \(50, 2\).*shape \(40, 2\)"):
        InMemoryImitationDataset(greedy_dir).check_spaces(obs_spaces, env.action_spaces_dict)


def test_request_stop_writes_checkpoint(greedy_dir, tmp_path):
    bc = BC(BCAlgorithmConfig(n_epochs=5, seed=0, batch_size=10), _cutting_actor_critic(0), greedy_dir,
            writers=[], checkpoint_dir=tmp_path)
    bc.request_stop()
    bc.train()
    assert bc.stop_reason == "stopped" and bc.epoch == 0
    assert (tmp_path / "state_dict_last.pt").exists()


EPOCHS = 30
ACC_MIN = 0.95  # measured 1.0 on every head after 30 epochs (0.83 for piece_idx after one)
