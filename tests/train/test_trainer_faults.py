"""Trustworthy runs (issue 10, trainer side): NaN/inf observations named before they reach the network, finite
divergence reported as a warning, learning-rate and clip schedules over the run's own target, BC epochs committed
to the StatsStore, and the bounded-Box epoch length told and recorded."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from training_utils import MidEpochReader, cartpole_factory, flat_actor_critic

from maze_lab.agent import DummyCartPolePolicy
from maze_lab.core.log_stats.writers import StatsStore
from maze_lab.core.rollout import SequentialRolloutRunner
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.run.config import compose_config, training_plan
from maze_lab.run.run_context import RunContext
from maze_lab.train.trainers.a2c import A2C
from maze_lab.train.trainers.bc import BC, BCAlgorithmConfig
from maze_lab.train.trainers.common.config import A2CAlgorithmConfig, PPOAlgorithmConfig
from maze_lab.train.trainers.common.divergence import DivergenceMonitor
from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
from maze_lab.train.trainers.common.rollout import NonFiniteObservationError
from maze_lab.train.trainers.common.schedules import LinearSchedule
from maze_lab.train.trainers.ppo import PPO
from maze_lab.train.vector_env import SequentialVectorEnv, SubprocVectorEnv


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class NaNAtStepEnv(gym.Env):
    """An unbounded Box observation that turns NaN (or inf) at one step of the env's life; never terminates."""

    def __init__(self, bad_step: int | None, bad_value: float = float("nan"), truncate_at: int | None = None):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.bad_step, self.bad_value, self.truncate_at = bad_step, bad_value, truncate_at
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        """A zero observation."""
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Reward 1 for action 1; the observation is bad at ``bad_step``."""
        self.steps += 1
        obs = np.full(3, 0.1 * self.steps, np.float32)
        if self.steps == self.bad_step:
            obs[1] = self.bad_value
        return obs, float(action), False, self.steps == self.truncate_at, {}


def _nan_env_factory(bad_step: int | None, bad_value: float = float("nan"), truncate_at: int | None = None):
    return lambda: GymMazeEnv(NaNAtStepEnv(bad_step, bad_value, truncate_at), render_mode=None)


# ---- 1. NaN/inf observations --------------------------------------------------------------------------------------
@pytest.mark.parametrize("vector_env, bad_value", [(SequentialVectorEnv, float("nan")),
                                                    (SequentialVectorEnv, float("inf")),
                                                    (SubprocVectorEnv, float("nan"))])
def test_a_non_finite_observation_names_key_env_and_epoch_before_the_network_sees_it(vector_env: type,
                                                                                     bad_value: float) -> None:
    config = A2CAlgorithmConfig(n_epochs=3, epoch_length=1, n_rollout_steps=4, seed=0, patience=0)
    # env 1 of 2 turns bad at its 6th step: in the second rollout, i.e. epoch 2
    env = vector_env([_nan_env_factory(None), _nan_env_factory(6, bad_value)], logging_prefix="train", writers=[])
    try:
        trainer = A2C(config, flat_actor_critic(_nan_env_factory(None)()), env=env)
        with pytest.raises(NonFiniteObservationError) as info:
            trainer.train()
    finally:
        env.close()
    message = str(info.value)
    assert "epoch 2" in message and "env 1 " in message and "'observation'" in message
    assert "policy key 0" in message and ("nan" if bad_value != bad_value else "inf") in message
    assert trainer.epoch == 1 and trainer.updates == 1  # the bad rollout never reached an update


def test_a_non_finite_last_observation_of_a_time_limit_is_named_too() -> None:
    # the last observation of an episode cut off by a time limit is only bootstrapped, never stepped from
    config = A2CAlgorithmConfig(n_epochs=2, epoch_length=1, n_rollout_steps=4, seed=0, patience=0)
    env = SequentialVectorEnv([_nan_env_factory(3, truncate_at=3)], logging_prefix="train", writers=[])
    trainer = A2C(config, flat_actor_critic(_nan_env_factory(None)()), env=env)
    with pytest.raises(NonFiniteObservationError, match=r"epoch 1, env 0 of the vector env, policy key 0: the last "
                                                        r"observation \(cut off by a time limit\), observation key "
                                                        r"'observation' holds 1 non-finite value"):
        trainer.train()


def test_a_non_finite_observation_in_evaluation_is_named_too() -> None:
    env = SequentialVectorEnv([_nan_env_factory(5, truncate_at=8)], logging_prefix="eval", writers=[])
    evaluator = RolloutEvaluator(env, n_episodes=1)
    try:
        with pytest.raises(NonFiniteObservationError, match=r"epoch 4, env 0 of the vector env, policy key 0: the "
                                                            r"evaluation observation key 'observation' holds 1"):
            evaluator.evaluate(flat_actor_critic(_nan_env_factory(None)()).policy, epoch=4)
    finally:
        env.close()


def test_recorded_episodes_with_non_finite_observations_are_refused_for_imitation(tmp_path) -> None:
    from maze_lab.agent.random_policy import RandomPolicy
    from maze_lab.train.trainers.bc.dataset import InMemoryImitationDataset

    policy = RandomPolicy(_nan_env_factory(None)().action_spaces_dict, seed=0)
    SequentialRolloutRunner(_nan_env_factory(3, truncate_at=6), policy, n_episodes=1,
                            trajectory_dir=tmp_path / "traj", seed=0, writers=[]).run()
    with pytest.raises(ValueError, match=r"trajectory\.zip: the recorded observation 'observation' of policy key 0 "
                                         r"holds NaN or inf at sub-step \d"):
        InMemoryImitationDataset(tmp_path / "traj")


# ---- 3. schedules over the run's own target -----------------------------------------------------------------------
class RecordingLinear(LinearSchedule):
    """A linear schedule that remembers the progress of every update it served."""

    def __init__(self, start: float) -> None:
        super().__init__(start, 0.0)
        self.progress: list[float] = []

    def value(self, progress: float) -> float:
        """The linear value; records ``progress``."""
        self.progress.append(progress)
        return super().value(progress)


def _schedule_trainer(n_epochs: int, checkpoint_dir: Any = None, trainer_cls: type = A2C,
                      config_cls: type = A2CAlgorithmConfig) -> Any:
    config = config_cls(n_epochs=n_epochs, epoch_length=2, n_rollout_steps=4, seed=0, patience=0,
                        lr=RecordingLinear(1e-3))
    env = SequentialVectorEnv([cartpole_factory], logging_prefix="train", writers=[])
    return trainer_cls(config, flat_actor_critic(cartpole_factory()), env=env, checkpoint_dir=checkpoint_dir)


def _lr_progress(trainer: Any) -> list[float]:
    return trainer.lr_schedule.progress[1:]  # [0] is the optimizer's initial lr, taken when it was built


def test_train_n_decays_the_schedule_to_its_end_over_n_epochs_whatever_config_n_epochs_says() -> None:
    for config_epochs in (0, 10):
        trainer = _schedule_trainer(config_epochs)
        trainer.train(3)
        assert _lr_progress(trainer) == pytest.approx([i / 6 for i in range(6)])
        # the last update trains with 1/6 of the start lr (one update's share), not the start value
        assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 / 6)


def test_ppo_clip_range_follows_the_same_horizon() -> None:
    trainer = _schedule_trainer(0, trainer_cls=PPO, config_cls=PPOAlgorithmConfig)
    trainer.clip_schedule = RecordingLinear(0.2)
    trainer.train(2)
    assert trainer.clip_schedule.progress == pytest.approx([0.0, 0.25, 0.5, 0.75])


def test_a_resumed_run_continues_its_schedule_from_its_epoch(tmp_path) -> None:
    whole = _schedule_trainer(4)
    whole.train()
    first = _schedule_trainer(4, checkpoint_dir=tmp_path)
    first.train(2)
    resumed = _schedule_trainer(4)
    resumed.load_checkpoint(tmp_path / "state_dict_last.pt")
    resumed.train(2)
    assert _lr_progress(resumed) == pytest.approx(_lr_progress(whole)[4:])
    assert _lr_progress(resumed) == pytest.approx([0.5, 0.625, 0.75, 0.875])


def test_without_a_target_the_schedule_holds_its_start_value_and_says_so(capsys) -> None:
    trainer = _schedule_trainer(0)
    trainer.callbacks.append(lambda t, stats: t.epoch >= 2 and t.request_stop())
    trainer.train()
    assert trainer.epoch == 2 and trainer.lr_schedule.progress[-4:] == [0.0] * 4  # the 4 updates
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)
    err = capsys.readouterr().err
    assert "n_epochs=0" in err and "lr" in err and "hold their start value" in err


# ---- 4. BC epochs are committed to the StatsStore -----------------------------------------------------------------
def test_bc_version_changes_once_per_completed_epoch(tmp_path) -> None:
    SequentialRolloutRunner(cartpole_factory, DummyCartPolePolicy(), n_episodes=3, trajectory_dir=tmp_path / "traj",
                            seed=0, writers=[]).run()
    torch.manual_seed(0)
    store = StatsStore()
    spy = MidEpochReader(store, {"train", "validation", "eval"})
    evaluator = RolloutEvaluator(SequentialVectorEnv([cartpole_factory], logging_prefix="eval",
                                                     writers=[store, spy]), n_episodes=1)
    bc = BC(BCAlgorithmConfig(n_epochs=3, batch_size=256, seed=0, eval_every_k_iterations=None),
            flat_actor_critic(cartpole_factory()), tmp_path / "traj", evaluator=evaluator, writers=[store, spy])
    bc.train()
    assert store.version == 3 and sorted(set(store.to_dataframe().epoch)) == [1, 2, 3]
    assert spy.seen and all(version == len(epochs) for version, epochs in spy.seen)
    assert {version for version, _ in spy.seen} == {0, 1, 2}


# ---- 2. finite divergence -----------------------------------------------------------------------------------------
class GrowingRewardBandit(gym.Env):
    """One-step episodes; action 1 pays a reward that grows tenfold every ``steps_per_decade`` steps of the env."""

    def __init__(self, steps_per_decade: int):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.steps_per_decade = steps_per_decade
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        """A constant observation."""
        super().reset(seed=seed)
        return np.ones(2, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        """The growing reward for action 1, 0 for action 0; the episode ends."""
        self.steps += 1
        reward = 10.0 ** (self.steps / self.steps_per_decade) if int(action) == 1 else 0.0
        return np.ones(2, np.float32), reward, True, False, {}


def test_divergence_rule_needs_both_a_collapsed_policy_and_an_exploded_value_loss() -> None:
    def run(entropies: list[float], losses: list[float]) -> list[int]:
        monitor = DivergenceMonitor()
        return [epoch for epoch, (e, v) in enumerate(zip(entropies, losses, strict=True), 1)
                if monitor.check(epoch, {0: e}, {0: v})]

    healthy_entropy, collapsed = [0.69] * 6, [0.69, 0.6, 0.4, 0.2, 0.05, 0.01]
    stable_loss, exploding = [1.0, 2.0, 1.5, 3.0, 4.0, 5.0], [1.0, 2.0, 1.5, 10.0, 300.0, 1e5]
    assert run(collapsed, stable_loss) == [] and run(healthy_entropy, exploding) == []
    assert run(collapsed, exploding) == [5, 6]  # entropy <= 0.069 and value loss > 100 x median(1, 2, 1.5) = 150
    # a continuous policy's entropy may start negative: collapsed means losing 90% of its magnitude (here to -1.9)
    assert run([-1.0, -1.0, -1.0, -1.5, -2.0, -3.0], exploding) == [5, 6]


def test_a_diverging_run_reports_a_warning_event_a_console_line_and_in_progress(capsys) -> None:
    factory = lambda: GymMazeEnv(GrowingRewardBandit(steps_per_decade=16), render_mode=None)  # noqa: E731
    config = A2CAlgorithmConfig(n_epochs=8, epoch_length=2, n_rollout_steps=8, seed=0, patience=0, lr=0.05,
                                entropy_coef=0.0, normalize_advantages=True)
    store = StatsStore()
    trainer = A2C(config, flat_actor_critic(factory()),
                  env=SequentialVectorEnv([factory] * 2, logging_prefix="train", writers=[store]))
    torch.manual_seed(0)
    trainer.train()
    df = store.to_dataframe()
    warned = df[df.event == "divergence_warning"]
    assert len(warned) > 0 and set(warned.value) == {1.0}, df[df.event.isin(["policy_entropy", "critic_value_loss"])]
    assert trainer.warnings and "policy key 0" in trainer.warnings[0]
    err = capsys.readouterr().err
    assert err.count("maze-lab: WARNING") == 1 and "collapsed" in err and "value loss exploded" in err


def test_a_healthy_run_has_no_divergence_warning(capsys) -> None:
    config = A2CAlgorithmConfig(n_epochs=6, epoch_length=2, n_rollout_steps=16, seed=0, patience=0)
    store = StatsStore()
    trainer = A2C(config, flat_actor_critic(cartpole_factory()),
                  env=SequentialVectorEnv([cartpole_factory] * 2, logging_prefix="train", writers=[store]))
    trainer.train()
    df = store.to_dataframe()
    assert "divergence_warning" not in set(df.event) and trainer.warnings == []
    assert "WARNING" not in capsys.readouterr().err


def test_run_handle_progress_shows_the_divergence_warning(tmp_path) -> None:
    factory = lambda: GymMazeEnv(GrowingRewardBandit(steps_per_decade=16), render_mode=None)  # noqa: E731
    algorithm = A2CAlgorithmConfig(n_epochs=5, epoch_length=2, n_rollout_steps=8, seed=0, patience=0, lr=0.05,
                                   entropy_coef=0.0, normalize_advantages=True, eval_repeats=1)
    rc = RunContext(env=factory, algorithm=algorithm, run_dir=tmp_path / "run", silent=True,
                    overrides={"runner.concurrency": 2})
    try:
        handle = rc.train_async()
        assert handle.wait(timeout=300) == "done"
        warnings = handle.progress["warnings"]
        assert warnings and "collapsed" in warnings[0] and "policy key 0" in warnings[0]
    finally:
        rc.close()


# ---- 5. the bounded-Box epoch length, told and recorded -----------------------------------------------------------
def test_training_plan_tells_the_epoch_length_the_bounded_box_values_give() -> None:
    pendulum = compose_config(overrides={"env.name": "Pendulum-v1", "n_epochs": 3})
    assert training_plan(pendulum) == ("training for 3 epochs of 2 updates (algorithm.bounded_box values: every "
                                       "action head is a bounded Box)")
    assert training_plan(compose_config(overrides={"n_epochs": 3, "algorithm.patience": 0})) == \
        "training for 3 epochs of 25 updates"  # CartPole: discrete actions, the configured length
    # an action space known only once the env is built: the plan says that the bounded-Box length may apply
    unknown = compose_config(overrides={"env.name": "NoSuchEnv-v0", "n_epochs": 3})
    assert training_plan(unknown) == ("training for 3 epochs of 25 updates (the bounded-Box defaults may apply: "
                                      "where every action head is a bounded Box, algorithm.bounded_box trains "
                                      "epochs of 2 updates)")
    assert training_plan(unknown, bounded_box=False) == "training for 3 epochs of 25 updates"


def test_the_run_directory_records_the_bounded_box_values_trained_with(tmp_path) -> None:
    rc = RunContext(overrides={"env.name": "Pendulum-v1", "n_epochs": 3, "log_base_dir": str(tmp_path)},
                    run_dir=tmp_path / "run", silent=True)
    try:
        trainer = rc.trainer
        summary = json.loads((tmp_path / "run" / "maze_lab_run.json").read_text())
        assert summary["bounded_box_changes"] == trainer.bounded_box_changes
        assert summary["bounded_box_changes"]["epoch_length"] == trainer.config.epoch_length == 2
        assert "of 2 updates" in rc.training_plan()
    finally:
        rc.close()
