"""runner=ray: A2C/PPO rollouts in Ray actors, worker failures, parallel rollouts of a trained policy."""

from __future__ import annotations

import functools
import os
import signal
import sys
from pathlib import Path

import cloudpickle
import numpy as np
import pytest
import torch
from training_utils import flat_actor_critic

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.core.wrappers.wrapper import Wrapper
from maze_lab.train.trainers.common.checkpoints import read_checkpoint
from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
from maze_lab.train.trainers.common.rollout import RolloutGenerator
from maze_lab.train.trainers.common.schedules import LinearSchedule
from maze_lab.train.trainers.ppo import PPO, PPOAlgorithmConfig
from maze_lab.train.vector_env import SequentialVectorEnv

ray = pytest.importorskip("ray")

from maze_lab.train.ray_rollouts import (  # noqa: E402
    RayConnectionError,
    RayEnvGroup,
    RayRolloutGenerator,
    RayWorkerError,
    ensure_ray,
)

# the Ray workers do not have tests/ on their path: classes of this module travel by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

CARTPOLE = functools.partial(GymMazeEnv, "CartPole-v1", render_mode=None)


@pytest.fixture(scope="module", autouse=True)
def ray_instance():
    """One local Ray for the whole module (starting one takes 5-25 s on a loaded machine)."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


class FailingStep(Wrapper):
    """CartPole that raises on its ``fail_at``-th step."""

    def __init__(self, env, fail_at: int):
        super().__init__(env)
        self.fail_at, self.steps = fail_at, 0

    def step(self, action):
        self.steps += 1
        if self.steps >= self.fail_at:
            raise ArithmeticError(f"env exploded at step {self.steps}")
        return self.env.step(action)


def failing_cartpole() -> FailingStep:
    return FailingStep(CARTPOLE(), fail_at=20)


def _ppo_config(**overrides) -> PPOAlgorithmConfig:
    # the configuration of tests/test_training.py::test_ppo_solves_cartpole
    params = dict(n_epochs=30, epoch_length=10, n_rollout_steps=32, lr=LinearSchedule(1e-3, 0.0), gamma=0.98,
                  gae_lambda=0.8, entropy_coef=0.0, batch_size=256, n_optimization_epochs=20,
                  clip_range=LinearSchedule(0.2, 0.0), max_grad_norm=0.5, seed=0, patience=0)
    params.update(overrides)
    return PPOAlgorithmConfig(**params)


def _ray_ppo(config: PPOAlgorithmConfig, factories, n_workers: int = 2, checkpoint_dir=None) -> PPO:
    torch.manual_seed(0)
    model = flat_actor_critic(CARTPOLE())
    generator = RayRolloutGenerator(RayEnvGroup(factories, n_workers))
    evaluator = RolloutEvaluator(SequentialVectorEnv([CARTPOLE] * 4, logging_prefix="eval"), n_episodes=8,
                                 deterministic=True)
    return PPO(config, model, rollout_generator=generator, evaluator=evaluator, checkpoint_dir=checkpoint_dir)


@pytest.mark.slow
def test_ppo_on_ray_solves_cartpole():
    """Same config, seed and budget as the local runner's PPO test (8 envs: 2 Ray workers x 4)."""
    trainer = _ray_ppo(_ppo_config(), [CARTPOLE] * 8)

    def stop_at_475(t, stats):
        if t.last_eval_reward >= 475:
            t.request_stop()

    trainer.callbacks.append(stop_at_475)
    try:
        trainer.train()
    finally:
        trainer.env.close()
    assert trainer.last_eval_reward >= 475, f"PPO on Ray reached only {trainer.last_eval_reward}"
    assert trainer.env_steps <= 30 * 10 * 32 * 8
    # the train statistics came from the workers' LogStatsWrappers
    assert trainer.env.get_stats(), "no training episodes reached the train statistics"


def test_ray_rollout_has_the_local_structure_and_seeds():
    """A Ray rollout is the local RolloutGenerator's Rollout: same shapes and keys; the first observations equal a
    local vector env's on the same seed (env e of worker w seeded seed + w * envs_per_worker + e)."""
    model = flat_actor_critic(CARTPOLE())
    ray_gen = RayRolloutGenerator(RayEnvGroup([CARTPOLE] * 4, n_workers=2))
    local_gen = RolloutGenerator(SequentialVectorEnv([CARTPOLE] * 4))
    try:
        ray_gen.reset(7)
        local_gen.reset(7)
        first_local = local_gen._obs["observation"].copy()
        ray_rollout = ray_gen.rollout(model.policy, 40, epoch=1)
        local_rollout = local_gen.rollout(model.policy, 40, epoch=1)
        assert ray_rollout.n_envs == local_rollout.n_envs == 4
        assert len(ray_rollout.records) == len(local_rollout.records) == 40
        np.testing.assert_array_equal(ray_rollout.records[0].obs["observation"], first_local)
        for a, b in zip(ray_rollout.records, local_rollout.records, strict=True):
            assert a.key == b.key
            assert a.obs["observation"].shape == b.obs["observation"].shape
            assert a.actions.keys() == b.actions.keys() and a.log_prob.shape == b.log_prob.shape
        assert ray_rollout.next_obs["observation"].shape == (4, 4)
        # 40 steps of 4 envs with a random policy: CartPole episodes (about 20 steps) ended in the workers
        assert ray_gen.env.n_finished_episodes >= 4
        assert ray_gen.last_timing["total"] >= ray_gen.last_timing["workers"] > 0
    finally:
        ray_gen.env.close()
        local_gen.env.close()


def test_worker_exception_carries_its_traceback():
    trainer = _ray_ppo(_ppo_config(n_epochs=1, epoch_length=2), [CARTPOLE, CARTPOLE, failing_cartpole, CARTPOLE])
    try:
        with pytest.raises(RayWorkerError, match=r"(?s)Ray worker 1 \(pid \d+\) raised.*test_ray_runner.py.*in step.*"
                                                 r"ArithmeticError: env exploded at step 20"):
            trainer.train()
    finally:
        trainer.env.close()
    assert not trainer.env.actors, "the actors must be shut down after a worker failure"


def test_killed_worker_gives_a_clear_error_and_keeps_the_checkpoint(tmp_path: Path):
    from maze_lab.run.run_context import RunContext
    from maze_lab.run.run_dir import RunDirectory

    rc = RunContext(algorithm="ppo", runner="ray", run_dir=tmp_path / "run", silent=True,
                    overrides={"env.name": "CartPole-v1", "n_epochs": 4, "algorithm.epoch_length": 2,
                               "algorithm.n_rollout_steps": 16, "algorithm.eval_repeats": 1,
                               "runner.n_workers": 2, "runner.envs_per_worker": 1, "seed": 3})
    trainer = rc.trainer
    killed = []

    def kill_worker_1(t, stats):
        if t.epoch == 2:
            pid = t.env.pids[1]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    trainer.callbacks.append(kill_worker_1)
    try:
        with pytest.raises(RayWorkerError, match=r"Ray worker 1 \(pid (\d+)\) died") as info:
            rc.train()
    finally:
        rc.close()
    assert str(killed[0]) in str(info.value)
    run = RunDirectory(rc.run_dir)
    assert run.read_summary()["status"] == "failed"
    state = read_checkpoint(run.last_checkpoint)
    assert state["epoch"] == 2 and state["trainer"] == "PPO"
    # the workers' event logs of the training envs are in the run directory
    assert (run.event_log_dir / "train_0").exists()


def test_runner_ray_trains_and_writes_the_run(tmp_path: Path):
    from maze_lab.run.run_context import RunContext

    rc = RunContext(algorithm="a2c", runner="ray", run_dir=tmp_path / "run", silent=True,
                    overrides={"env.name": "CartPole-v1", "n_epochs": 2, "algorithm.epoch_length": 3,
                               "algorithm.n_rollout_steps": 20, "algorithm.eval_repeats": 1,
                               "runner.n_workers": 2, "runner.envs_per_worker": 2})
    try:
        rc.train()
        df = rc.stats
        assert rc.trainer.env_steps == 2 * 3 * 20 * 4
        train = df[(df.prefix == "train") & (df.event == "reward") & (df.name == "mean")]
        assert list(train.epoch) == [1, 2]
    finally:
        rc.close()
    assert not rc.trainer.env.actors


def test_address_without_ray_gives_a_clear_error(tmp_path: Path):
    import socket
    from unittest import mock

    from maze_lab.run.run_context import RunContext
    from maze_lab.run.run_dir import RunDirectory

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # as in a process without Ray (this module's Ray would be reused otherwise)
    with mock.patch.object(ray, "is_initialized", return_value=False):
        with pytest.raises(RayConnectionError, match=rf"runner.address='127.0.0.1:{port}': no Ray cluster answers "
                                                     rf"at 127.0.0.1:{port}. Start one with `ray start --head"):
            ensure_ray(f"127.0.0.1:{port}")
        rc = RunContext(algorithm="ppo", runner="ray", run_dir=tmp_path / "run", silent=True,
                        overrides={"runner.address": f"ray://127.0.0.1:{port}"})
        with pytest.raises(RayConnectionError, match=rf"runner.address='ray://127.0.0.1:{port}'"):
            rc.train()
    assert RunDirectory(rc.run_dir).read_summary()["status"] == "failed"


def test_runner_ray_refuses_other_algorithms_and_bad_settings():
    from maze_lab.run.run_context import RunContext

    with pytest.raises(ConfigurationError, match="runner=ray rolls out A2C and PPO"):
        RunContext(algorithm="sac", runner="ray", overrides={"env.name": "Pendulum-v1"})
    with pytest.raises(ConfigurationError, match=r"runner.n_workers must be an int >= 1, got 0"):
        RunContext(algorithm="ppo", runner="ray", overrides={"runner.n_workers": 0})


@pytest.mark.parametrize("backend", ["processes", "ray"])
def test_parallel_rollout_equals_the_sequential_one(tmp_path: Path, backend: str):
    from maze_lab.run.run_context import RunContext

    rc = RunContext(algorithm="ppo", runner="dev", run_dir=tmp_path / "run", silent=True,
                    overrides={"env.name": "CartPole-v1"})
    try:
        torch.manual_seed(5)  # an untrained policy whose greedy episodes differ in length
        sequential = rc.rollout(n_episodes=5, seed=11, deterministic=True)
        parallel = rc.rollout(n_episodes=5, seed=11, deterministic=True, n_workers=2, backend=backend)
    finally:
        rc.close()
    assert parallel.episode_rewards == sequential.episode_rewards
    assert parallel.episode_lengths == sequential.episode_lengths
    assert len(set(sequential.episode_lengths)) > 1, "the episodes must differ for the comparison to mean anything"
    assert parallel.stats == sequential.stats
    assert len(parallel.trajectory_paths) == 5 and all(p.exists() for p in parallel.trajectory_paths)
    assert all(p.parent == rc.run_dir / "trajectories" for p in parallel.trajectory_paths)
