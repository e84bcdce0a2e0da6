"""A2C and PPO: learning on fixed seeds, determinism, checkpoints, resume, stop, divergence."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from training_utils import cartpole_factory, flat_actor_critic

from maze_lab.core.log_stats.writers import StatsStore
from maze_lab.train.trainers.a2c import A2C, A2CAlgorithmConfig
from maze_lab.train.trainers.common.base import TrainingDivergedError
from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
from maze_lab.train.trainers.common.schedules import LinearSchedule
from maze_lab.train.trainers.ppo import PPO, PPOAlgorithmConfig
from maze_lab.train.vector_env import SequentialVectorEnv


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _ppo_config(**overrides) -> PPOAlgorithmConfig:
    params = dict(n_epochs=30, epoch_length=10, n_rollout_steps=32, lr=LinearSchedule(1e-3, 0.0), gamma=0.98,
                  gae_lambda=0.8, entropy_coef=0.0, batch_size=256, n_optimization_epochs=20,
                  clip_range=LinearSchedule(0.2, 0.0), max_grad_norm=0.5, seed=0, patience=0)
    params.update(overrides)
    return PPOAlgorithmConfig(**params)


def _trainer(cls, config, store=None, checkpoint_dir=None, eval_episodes=8, seed=0):
    torch.manual_seed(seed)
    env = cartpole_factory()
    model = flat_actor_critic(env)
    train_env = SequentialVectorEnv([cartpole_factory] * 8, logging_prefix="train",
                                    writers=[store] if store is not None else None)
    evaluator = RolloutEvaluator(SequentialVectorEnv([cartpole_factory] * 4, logging_prefix="eval",
                                                     writers=[store] if store is not None else None),
                                 n_episodes=eval_episodes, deterministic=True)
    return cls(config, model, env=train_env, evaluator=evaluator, checkpoint_dir=checkpoint_dir)


def _stop_at(threshold):
    def callback(trainer, stats):
        if trainer.last_eval_reward >= threshold:
            trainer.request_stop()
    return callback


@pytest.mark.slow
def test_ppo_solves_cartpole():
    trainer = _trainer(PPO, _ppo_config())
    trainer.callbacks.append(_stop_at(475))
    trainer.train()
    assert trainer.last_eval_reward >= 475, f"PPO reached only {trainer.last_eval_reward}"
    assert trainer.env_steps <= 30 * 10 * 32 * 8


@pytest.mark.slow
def test_a2c_learns_cartpole():
    config = A2CAlgorithmConfig(n_epochs=40, epoch_length=50, n_rollout_steps=8, lr=7e-4, gamma=0.99,
                                gae_lambda=1.0, entropy_coef=0.0, max_grad_norm=0.5, seed=1, patience=0)
    trainer = _trainer(A2C, config)
    trainer.callbacks.append(_stop_at(195))
    trainer.train()
    assert trainer.last_eval_reward >= 195, f"A2C reached only {trainer.last_eval_reward}"


def test_same_seed_same_statistics():
    frames = []
    for _ in range(2):
        store = StatsStore()
        trainer = _trainer(PPO, _ppo_config(n_epochs=2, epoch_length=3, n_optimization_epochs=2), store=store)
        trainer.train()
        frames.append(store.to_dataframe())
    a, b = frames
    timing = a.event.str.startswith("time_")
    assert len(a) > 20
    assert a[~timing].reset_index(drop=True).equals(b[~timing].reset_index(drop=True))


def test_trainer_statistics_names():
    store = StatsStore()
    trainer = _trainer(PPO, _ppo_config(n_epochs=1, epoch_length=2, n_optimization_epochs=1), store=store)
    trainer.train()
    df = store.to_dataframe()
    trainer_events = set(df[df.topic == "ActorCriticEvents"].event)
    assert {"time_epoch", "time_rollout", "time_update", "learning_rate", "policy_loss", "policy_grad_norm",
            "policy_entropy", "critic_value", "critic_value_loss", "critic_grad_norm"} <= trainer_events
    assert set(df[df.event == "policy_loss"].name) == {"0"}  # grouped by policy key
    assert {"train", "eval"} <= set(df.prefix)


def test_checkpoint_resume_continues_with_same_weights(tmp_path):
    trainer = _trainer(PPO, _ppo_config(n_epochs=2, epoch_length=2, n_optimization_epochs=2),
                       checkpoint_dir=tmp_path)
    trainer.train()
    assert (tmp_path / "state_dict_last.pt").exists() and (tmp_path / "state_dict_best.pt").exists()
    weights = {k: {n: t.clone() for n, t in v.items()} for k, v in trainer.model.state_dict().items()}

    resumed = _trainer(PPO, _ppo_config(n_epochs=2, epoch_length=2, n_optimization_epochs=2), seed=123)
    resumed.load_checkpoint(tmp_path / "state_dict_last.pt")
    assert resumed.epoch == 2 and resumed.env_steps == trainer.env_steps
    for k, v in resumed.model.state_dict().items():
        for n, t in v.items():
            assert torch.equal(t, weights[k][n]), f"{k}.{n} differs after loading"
    resumed.train(n_epochs=1)
    assert resumed.epoch == 3


def test_stop_from_another_thread_writes_checkpoint(tmp_path):
    trainer = _trainer(PPO, _ppo_config(n_epochs=0, epoch_length=5, n_optimization_epochs=1),
                       checkpoint_dir=tmp_path)
    thread = threading.Thread(target=trainer.train)
    thread.start()
    while trainer.updates < 3:
        thread.join(0.01)
    trainer.request_stop()
    thread.join(30)
    assert not thread.is_alive()
    assert trainer.stop_reason == "stopped"
    state = torch.load(tmp_path / "state_dict_last.pt", weights_only=True)
    assert state["updates"] == trainer.updates
    for k, v in trainer.model.state_dict().items():
        for n, t in v.items():
            assert torch.equal(state["model"][k][n], t)


def test_pause_and_resume():
    trainer = _trainer(PPO, _ppo_config(n_epochs=1, epoch_length=50, n_optimization_epochs=1))
    thread = threading.Thread(target=trainer.train)
    thread.start()
    while trainer.updates < 2:
        thread.join(0.01)
    trainer.pause()
    thread.join(0.3)
    paused_at = trainer.updates
    thread.join(0.3)
    assert trainer.updates <= paused_at + 1 and trainer.paused
    trainer.resume()
    trainer.request_stop()
    thread.join(30)
    assert not thread.is_alive()


def test_nan_loss_names_epoch_and_term_and_keeps_checkpoint(tmp_path):
    trainer = _trainer(PPO, _ppo_config(n_epochs=1, epoch_length=2, n_optimization_epochs=1),
                       checkpoint_dir=tmp_path)
    trainer.train()
    good = torch.load(tmp_path / "state_dict_last.pt", weights_only=True)
    with torch.no_grad():
        for p in trainer.critic.parameters():
            p.fill_(float("nan"))
    with pytest.raises(TrainingDivergedError, match=r"epoch 2, update 3: loss term .*'value_loss' is nan"):
        trainer.train(n_epochs=1)
    kept = torch.load(tmp_path / "state_dict_last.pt", weights_only=True)
    assert kept["epoch"] == good["epoch"] == 1
    for k in good["model"]:
        for n, t in good["model"][k].items():
            assert torch.equal(kept["model"][k][n], t)


def test_early_stopping_by_patience():
    trainer = _trainer(PPO, _ppo_config(n_epochs=20, epoch_length=1, n_optimization_epochs=1, patience=2, lr=0.0),
                       eval_episodes=2)
    trainer.train()
    assert trainer.stop_reason.startswith("early stopping")
    assert trainer.epoch < 20


def test_config_errors_name_the_parameter():
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\], got 1.5"):
        PPOAlgorithmConfig(gamma=1.5)
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['learning_rate'\]; valid: .*'lr'"):
        PPOAlgorithmConfig.from_dict({"learning_rate": 0.1})


def test_not_a_checkpoint(tmp_path):
    path = tmp_path / "x.pt"
    torch.save({"weights": 1}, path)
    trainer = _trainer(A2C, A2CAlgorithmConfig(n_epochs=1, epoch_length=1))
    with pytest.raises(ValueError, match="is not a maze-lab checkpoint"):
        trainer.load_checkpoint(path)
    assert np.isfinite(trainer.env_steps)


def _normalized_cartpole():
    from maze_lab.core.wrappers.observation_normalization.observation_normalization_wrapper import (
        ObservationNormalizationWrapper,
    )

    env = cartpole_factory()
    return ObservationNormalizationWrapper.wrap(env, statistics_dump=None, default_statistics={
        "mean": np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32), "std": np.full(4, 2.0, dtype=np.float32)})


def test_checkpoint_carries_normalization_statistics(tmp_path):
    config = A2CAlgorithmConfig(n_epochs=1, epoch_length=1, n_rollout_steps=4, seed=0)
    env = SequentialVectorEnv([_normalized_cartpole] * 2)
    trainer = A2C(config, flat_actor_critic(env.envs[0]), env=env, checkpoint_dir=tmp_path)
    trainer.train()
    state = torch.load(tmp_path / "state_dict_last.pt", weights_only=True)
    stats = state["normalization_statistics"]["observation"]
    assert torch.allclose(stats["mean"], torch.tensor([0.1, 0.2, 0.3, 0.4]))

    # a fresh stack with other statistics gets the checkpoint's back
    def other():
        e = _normalized_cartpole()
        e.set_normalization_statistics({"observation": {"mean": np.zeros(4, dtype=np.float32),
                                                         "std": np.ones(4, dtype=np.float32)}})
        return e

    env2 = SequentialVectorEnv([other] * 2)
    resumed = A2C(config, flat_actor_critic(env2.envs[0]), env=env2)
    resumed.load_checkpoint(tmp_path / "state_dict_last.pt")
    restored = env2.envs[1].get_normalization_statistics()["observation"]
    np.testing.assert_allclose(restored["mean"], [0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(restored["std"], [2.0] * 4)


def test_fine_tune_ppo_checkpoint_with_a2c(tmp_path):
    ppo = _trainer(PPO, _ppo_config(n_epochs=1, epoch_length=2, n_optimization_epochs=1), checkpoint_dir=tmp_path)
    ppo.train()
    a2c = _trainer(A2C, A2CAlgorithmConfig(n_epochs=1, epoch_length=2, n_rollout_steps=8, seed=3), seed=7)
    a2c.load_checkpoint(tmp_path / "state_dict_last.pt", weights_only=True)
    for k, v in ppo.model.state_dict().items():
        for n, t in v.items():
            assert torch.equal(a2c.model.state_dict()[k][n], t)
    assert a2c.epoch == 0  # fine-tuning starts a new schedule with a fresh optimizer
    a2c.train()
    assert a2c.epoch == 1


def test_stop_requested_before_training_starts_is_honoured(tmp_path):
    trainer = _trainer(PPO, _ppo_config(n_epochs=5, epoch_length=2, n_optimization_epochs=1),
                       checkpoint_dir=tmp_path)
    trainer.request_stop()
    trainer.train()
    assert trainer.stop_reason == "stopped" and trainer.updates == 0
    assert (tmp_path / "state_dict_last.pt").exists()
    trainer.train(n_epochs=1)  # the stop ended the last call only
    assert trainer.epoch == 1
