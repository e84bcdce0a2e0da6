"""SAC and SAC from demonstrations: learning on Pendulum-v1 (Box) and CartPole-v1 (Discrete) on fixed seeds, the
config groups (algorithm=sac / sacfd, critic=state_action), demonstrations in the replay buffer, and the errors for
what SAC does not train."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from training_utils import cartpole, pendulum, sac_model

from maze_lab.agent import PendulumSwingUpPolicy
from maze_lab.core.rollout.sequential import SequentialRolloutRunner
from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.run.run_context import RunContext
from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
from maze_lab.train.trainers.sac import SAC, SACAlgorithmConfig
from maze_lab.train.trainers.sac.replay_buffer import ReplayBuffer
from maze_lab.train.vector_env import SequentialVectorEnv


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def sac_trainer(factory, config: SACAlgorithmConfig, eval_episodes: int = 3, **kwargs) -> SAC:
    evaluator = RolloutEvaluator(SequentialVectorEnv([factory], logging_prefix="eval", writers=[]),
                                 n_episodes=eval_episodes, deterministic=True)
    return SAC(config, sac_model(factory, seed=config.seed or 0), env=SequentialVectorEnv([factory], writers=[]),
               evaluator=evaluator, **kwargs)


def _stop_at(threshold: float):
    def callback(trainer, stats):
        if trainer.last_eval_reward >= threshold:
            trainer.request_stop()
    return callback


@pytest.mark.slow
def test_sac_learns_pendulum_from_the_experiment_config(tmp_path: Path) -> None:
    """experiment=pendulum_sac (RL Zoo settings): a deterministic evaluation better than -250 within 5 epochs of
    1,000 env steps (measured on seed 1234: -202 after the third epoch; a random policy gets about -1,200)."""
    rc = RunContext(experiment="pendulum_sac", overrides={"n_epochs": 5, "log_base_dir": str(tmp_path)}, silent=True)
    rc.trainer.callbacks.append(_stop_at(-250))
    rc.train()
    stats = rc.stats
    evals = stats[(stats.prefix == "eval") & (stats.event == "reward") & (stats.name == "mean")]
    assert evals.value.max() > -250, evals[["epoch", "value"]].to_string()
    assert type(rc.trainer).__name__ == "SAC"
    sac_events = set(stats[stats.topic == "SACEvents"].event)
    assert {"policy_loss", "critic_value_loss", "entropy_coef", "policy_entropy", "buffer_size"} <= sac_events
    # alpha was tuned down from its start value of 1.0
    alpha = stats[(stats.topic == "SACEvents") & (stats.event == "entropy_coef")].value
    assert alpha.iloc[-1] < 0.5
    rc.close()


@pytest.mark.slow
def test_discrete_sac_learns_cartpole() -> None:
    """Discrete SAC (exact expectations over the options) balances the pole for 200+ steps within 8,000 env steps
    (measured: 309 after 4,000 on seed 0; a random policy keeps it up for about 20)."""
    config = SACAlgorithmConfig(n_epochs=14, epoch_length=500, lr=3e-4, batch_size=64, initial_buffer_size=1000,
                                entropy_coef=0.2, target_entropy_multiplier=0.3, tau=0.01, seed=0, patience=0)
    trainer = sac_trainer(cartpole, config)
    trainer.callbacks.append(_stop_at(300))
    trainer.train()
    assert trainer.model_selection.best_reward >= 200, trainer.model_selection.best_reward


def _record_swing_ups(directory: Path, n: int) -> list[float]:
    result = SequentialRolloutRunner(pendulum, PendulumSwingUpPolicy(), n_episodes=n, trajectory_dir=directory, seed=0,
                                     writers=[]).run()
    return result.episode_rewards


def test_sacfd_starts_from_the_recorded_transitions(tmp_path: Path) -> None:
    """SACfD's replay buffer holds every recorded transition (the step a time limit cut has no next observation
    and is left out) before its first gradient step, and random actions only top it up."""
    rewards = _record_swing_ups(tmp_path / "demos", 2)
    assert np.mean(rewards) > -300  # the heuristic swings the pole up (a random policy: about -1,200)
    config = SACAlgorithmConfig(n_epochs=1, epoch_length=5, batch_size=16, initial_buffer_size=500,
                                demonstrations=str(tmp_path / "demos"), seed=0, patience=0)
    trainer = sac_trainer(pendulum, config)
    trainer.train()
    assert trainer.demonstration_transitions == 2 * 199
    # 398 demonstrations, 102 random steps to reach 500, then 5 updates of one step each
    assert len(trainer.replay_buffer) == 505 and trainer.env_steps == 107
    stored = trainer.replay_buffer.state_dict()["arrays"]["obs/observation"][:trainer.demonstration_transitions]
    assert np.isfinite(stored).all() and np.abs(stored[:, :2]).max() <= 1.0 + 1e-6


@pytest.mark.slow
def test_sacfd_starts_better_than_sac_on_the_same_env_step_budget(tmp_path: Path) -> None:
    """What SACfD changes (as in Maze): the transitions the buffer starts with come from recorded demonstrations
    instead of env steps with random actions. With the same 10 swing-up episodes' worth of start transitions and
    the same budget of about 3,000 env steps, SAC spends 1,990 of them on random actions and SACfD learns from the
    first step (measured on seeds 0 and 1: SACfD -510 / -537 after 3,000 steps, SAC -1,503 / -1,608 after 2,990;
    both reach about -150 after 5,000)."""
    demos = tmp_path / "demos"
    _record_swing_ups(demos, 10)
    common = dict(epoch_length=500, lr=1e-3, batch_size=256, entropy_coef=1.0, seed=0, patience=0)
    sac = sac_trainer(pendulum, SACAlgorithmConfig(n_epochs=2, initial_buffer_size=1990, **common), eval_episodes=5)
    sacfd_config = SACAlgorithmConfig(n_epochs=6, initial_buffer_size=0, demonstrations=str(demos), **common)
    sacfd = sac_trainer(pendulum, sacfd_config, eval_episodes=5)
    for trainer in (sac, sacfd):
        trainer.train()
    assert sacfd.demonstration_transitions == 1990 and sac.demonstration_transitions == 0
    assert sac.env_steps == 2990 and sacfd.env_steps == 3000
    sac_best, sacfd_best = sac.model_selection.best_reward, sacfd.model_selection.best_reward
    assert sacfd_best > sac_best + 300, (sacfd_best, sac_best)


def test_a_resumed_run_goes_on_with_the_checkpointed_replay_buffer(tmp_path: Path) -> None:
    config = SACAlgorithmConfig(n_epochs=1, epoch_length=5, batch_size=16, initial_buffer_size=60,
                                checkpoint_replay_buffer=True, seed=0, patience=0)
    first = sac_trainer(pendulum, config, eval_episodes=1, checkpoint_dir=tmp_path)
    first.train()
    assert len(first.replay_buffer) == 65
    resumed = sac_trainer(pendulum, config, eval_episodes=1)
    resumed.load_checkpoint(tmp_path / "state_dict_last.pt")
    saved, restored = first.replay_buffer.state_dict(), resumed.replay_buffer.state_dict()
    assert restored["size"] == saved["size"] == 65
    assert all(torch.equal(saved["arrays"][k], restored["arrays"][k]) for k in saved["arrays"])
    resumed.train(n_epochs=1)  # no refill: the buffer already holds initial_buffer_size transitions
    assert resumed.env_steps == first.env_steps + 5 and len(resumed.replay_buffer) == 70
    # a smaller buffer keeps the newest transitions; without the option the checkpoint holds none
    small = ReplayBuffer(capacity=10)
    small.load_state_dict(saved)
    assert len(small) == 10 and torch.equal(small.state_dict()["arrays"]["reward"], saved["arrays"]["reward"][-10:])
    plain_config = SACAlgorithmConfig(n_epochs=1, epoch_length=2, batch_size=16, initial_buffer_size=20, seed=0,
                                      patience=0)
    plain = sac_trainer(pendulum, plain_config, eval_episodes=1, checkpoint_dir=tmp_path / "p")
    plain.train()
    assert "replay_buffer" not in torch.load(tmp_path / "p" / "state_dict_last.pt", weights_only=True)


def test_replay_buffer_overwrites_the_oldest_and_keeps_the_time_limit_observation() -> None:
    buffer = ReplayBuffer(capacity=4, seed=0)
    for i in range(6):
        buffer.add({"o": np.array([[i]])}, {"a": np.array([[0.0]])}, np.array([float(i)]), {"o": np.array([[i + 1]])},
                   np.array([False]))
    assert len(buffer) == 4
    state = buffer.state_dict()
    assert state["arrays"]["reward"].tolist() == [2.0, 3.0, 4.0, 5.0]  # oldest first
    assert set(state["arrays"]) == {"obs/o", "action/a", "next_obs/o", "reward", "terminated"}
    batch = buffer.sample(64)
    assert set(batch.obs) == set(batch.next_obs) == {"o"} and set(batch.action) == {"a"}
    assert batch.reward.shape == batch.terminated.shape == (64,)
    assert torch.equal(batch.next_obs["o"][:, 0], batch.obs["o"][:, 0] + 1)
    assert torch.equal(batch.reward, batch.obs["o"][:, 0].float())
    again = ReplayBuffer(capacity=3, seed=0)
    again.load_state_dict(state)  # a checkpoint's transitions come back, the newest where there are too many
    assert again.state_dict()["arrays"]["reward"].tolist() == [3.0, 4.0, 5.0]
    with pytest.raises(ValueError, match="has a column 'obs'; expected obs/<key>"):
        again.load_state_dict({"size": 4, "arrays": {**state["arrays"], "obs": state["arrays"]["reward"]}})


def test_algorithm_sac_needs_a_state_action_critic(tmp_path: Path) -> None:
    rc = RunContext(algorithm="sac", overrides={"env.name": "Pendulum-v1", "log_base_dir": str(tmp_path)},
                    silent=True)
    with pytest.raises(ValueError, match="critic=state_action"):
        rc.train(n_epochs=1)
    rc.close()


def test_algorithm_sacfd_names_the_missing_demonstrations(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="algorithm.demonstrations=<dir"):
        RunContext(algorithm="sacfd", critic="state_action",
                   overrides={"env.name": "Pendulum-v1", "log_base_dir": str(tmp_path)}, silent=True).training_plan()


def test_sac_refuses_structured_envs_and_mixed_heads() -> None:
    from maze_lab.examples.cutting2d import make_masked_env

    structured = SequentialVectorEnv([make_masked_env], writers=[])
    with pytest.raises(ValueError, match="one policy key"):
        SAC(SACAlgorithmConfig(), sac_model(pendulum), env=structured)
    with pytest.raises(ValueError, match="critic=state_action"):
        from training_utils import flat_actor_critic

        SAC(SACAlgorithmConfig(), flat_actor_critic(cartpole()), env=SequentialVectorEnv([cartpole], writers=[]))
