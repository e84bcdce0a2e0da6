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


pytestmark = pytest.mark.usefixtures("local_ray")  # one local Ray for the module (tests/conftest.py)


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
    # the configuration of tests/train/test_training.py::test_ppo_solves_cartpole
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
    # resumed from the run directory: weights, counters and optimizer from its last checkpoint
    resumed = RunContext(algorithm="a2c", runner="ray", run_dir=tmp_path / "resumed", silent=True,
                         overrides={"env.name": "CartPole-v1", "n_epochs": 1, "algorithm.epoch_length": 3,
                                    "algorithm.n_rollout_steps": 20, "algorithm.eval_repeats": 1,
                                    "runner.n_workers": 2, "runner.envs_per_worker": 2, "input_dir": str(rc.run_dir)})
    try:
        resumed.train()
        assert resumed.trainer.epoch == 3 and resumed.trainer.env_steps == 3 * 3 * 20 * 4
    finally:
        resumed.close()


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
                                                     rf"at 127.0.0.1:{port} \(.*\)\. Start one with `ray start --head"):
            ensure_ray(f"127.0.0.1:{port}", setting="runner.address")
        rc = RunContext(algorithm="ppo", runner="ray", run_dir=tmp_path / "run", silent=True,
                        overrides={"runner.address": f"ray://127.0.0.1:{port}"})
        with pytest.raises(RayConnectionError, match=rf"runner.address='ray://127.0.0.1:{port}'"):
            rc.train()
    assert RunDirectory(rc.run_dir).read_summary()["status"] == "failed"


def test_runner_ray_refuses_other_algorithms_and_bad_settings():
    from maze_lab.run.run_context import RunContext

    with pytest.raises(ConfigurationError, match=r"runner=ray runs A2C, PPO, ES and IMPALA .*SAC and BC are not "
                                                 r"available on Ray\): use runner=dev or runner=local"):
        RunContext(algorithm="sac", runner="ray", overrides={"env.name": "Pendulum-v1"})
    with pytest.raises(ConfigurationError, match=r"runner.n_workers must be an int >= 1, got 0"):
        RunContext(algorithm="ppo", runner="ray", overrides={"runner.n_workers": 0})
    with pytest.raises(ConfigurationError, match=r"runner.max_worker_restarts must be an int >= 0 .*got -1"):
        RunContext(algorithm="impala", runner="ray", overrides={"runner.max_worker_restarts": -1})
    # PPO's synchronous rollouts need every worker: restarts are refused, naming who has them
    with pytest.raises(ConfigurationError, match=r"runner.max_worker_restarts=2: PPOAlgorithmConfig waits for every "
                                                 r"worker.*for ES and IMPALA"):
        RunContext(algorithm="ppo", runner="ray", overrides={"runner.max_worker_restarts": 2})


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
    assert parallel.stats.keys() == sequential.stats.keys() and parallel.stats
    for key, value in sequential.stats.items():
        np.testing.assert_array_equal(np.asarray(parallel.stats[key]), np.asarray(value), err_msg=str(key))
    assert len(parallel.trajectory_paths) == 5 and all(p.exists() for p in parallel.trajectory_paths)
    assert all(p.parent == rc.run_dir / "trajectories" for p in parallel.trajectory_paths)


class KillsItselfOnReset(Wrapper):
    """CartPole whose process kills itself (SIGKILL) when the env is reset with ``seed``: a worker that dies."""

    def __init__(self, env, seed: int):
        super().__init__(env)
        self.fatal_seed = seed

    def reset(self, *args, **kwargs):
        if kwargs.get("seed") == self.fatal_seed:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.env.reset(*args, **kwargs)


@pytest.mark.parametrize("backend", ["processes", "ray"])
def test_parallel_rollout_workers_share_the_episodes_and_a_dead_one_is_named(tmp_path: Path, backend: str):
    """More parts than the local Ray has CPUs (3 on 2) are handed to the workers as they free up, with the sequential
    rollout's episodes; a worker that dies is named with its pid (and its signal where the transport knows it),
    what it was doing and that the workers were shut down."""
    from maze_lab.train.ray_rollouts import parallel_rollout

    torch.manual_seed(5)
    env = CARTPOLE()
    policy = flat_actor_critic(env, hidden=(16,)).policy
    env.close()
    sequential = parallel_rollout(CARTPOLE, policy, 6, 1, seed=11, record_trajectory=False)
    spread = parallel_rollout(CARTPOLE, policy, 6, 3, backend=backend, seed=11, record_trajectory=False)
    assert spread.episode_lengths == sequential.episode_lengths and len(spread.episode_lengths) == 6
    killer = functools.partial(KillsItselfOnReset, CARTPOLE(), 11 + 3)  # episode 3: the second worker's first
    error = RayWorkerError if backend == "ray" else RuntimeError
    with pytest.raises(error) as died:
        parallel_rollout(killer, policy, 4, 2, backend=backend, seed=11, record_trajectory=False)
    message = str(died.value)
    assert message.startswith("rollout worker 1 (pid ") and " died" in message, message
    assert "while rolling out" in message and "all rollout workers were shut down" in message, message
    if backend == "processes":
        assert "signal 9 (SIGKILL)" in message, message


@pytest.mark.parametrize("extra", [["--workers", "2"], ["--workers", "2", "--ray"]])
def test_cli_rollout_with_workers_equals_one_process(tmp_path: Path, capsys, extra: list[str]):
    from maze_lab.cli import main
    from maze_lab.run.run_context import RunContext
    from maze_lab.run.run_dir import RunDirectory

    rc = RunContext(algorithm="ppo", runner="dev", run_dir=tmp_path / "run", silent=True,
                    overrides={"env.name": "CartPole-v1", "n_epochs": 1, "algorithm.epoch_length": 1,
                               "algorithm.n_rollout_steps": 8, "algorithm.eval_repeats": 1})
    rc.train()
    rc.close()
    assert main(["rollout", str(rc.run_dir), "--episodes", "4", "--seed", "2", "--no-record"]) == 0
    one = capsys.readouterr().out.splitlines()[1]  # after the line that says what runs
    assert main(["rollout", str(rc.run_dir), "--episodes", "4", "--seed", "2", *extra]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("maze-lab rollout: 4 episode(s) of the best policy") and ", 2 " in out[0], out[0]
    assert out[1] == one, (out, one)  # mean reward and every episode length
    assert len(list((rc.run_dir / "trajectories").glob("*"))) == 4
    assert RunDirectory(rc.run_dir).read_summary()["last_rollout"]["workers"] == 2


def test_structured_masked_env_rolls_out_on_ray_as_locally():
    """Sub-steps and action masks: the workers' records keep the order of policy keys, the masks hold for every env
    of both workers, and PPO's batches and update take the concatenated rollout."""
    import cutting2d_training
    from cutting2d_training import masked_env_factory, masked_ppo

    cloudpickle.register_pickle_by_value(cutting2d_training)
    local = masked_ppo(seed=0, n_envs=2, n_rollout_steps=6)
    trainer = PPO(local.config, local.model,
                  rollout_generator=RayRolloutGenerator(RayEnvGroup([masked_env_factory] * 4, n_workers=2)))
    try:
        trainer.rollout_generator.reset(0)
        rollout = trainer._rollout(6)
        assert [r.key for r in rollout.records] == [0, 1] * 3
        assert rollout.n_envs == 4
        for r in rollout.records[::2]:
            chosen = r.actions["piece_idx"]
            assert all(r.obs["inventory_mask"][i, chosen[i]] == 1 for i in range(4))
        batches = trainer._prepare_batches(rollout)
        assert set(batches) == {0, 1} and len(batches[0]) == len(batches[1]) == 12
        trainer.update(batches)
    finally:
        trainer.env.close()
        local.env.close()


def test_concatenated_rollout_shifts_the_bootstrap_env_indices():
    from maze_lab.train.ray_rollouts import concatenate_rollouts
    from maze_lab.train.trainers.common.rollout import Rollout, SubStepRecord

    def worker_rollout(base: float, cut_env: int | None) -> Rollout:
        obs = {"x": np.full((2, 3), base)}
        record = SubStepRecord(0, obs, {"a": np.array([1, 2])}, np.zeros(2, np.float32), np.ones(2),
                               np.zeros(2, bool), np.array([cut_env == 0, cut_env == 1]))
        if cut_env is not None:
            record.bootstrap.append((cut_env, {"x": np.full(3, base + 0.5)}))
        return Rollout([record], {"x": np.full((2, 3), base + 1)}, 0, 0, 2)

    merged = concatenate_rollouts([worker_rollout(0.0, 1), worker_rollout(10.0, 0)])
    assert merged.n_envs == 4
    np.testing.assert_array_equal(merged.records[0].obs["x"][:, 0], [0, 0, 10, 10])
    assert [i for i, _ in merged.records[0].bootstrap] == [1, 2]
    assert merged.records[0].bootstrap[1][1]["x"][0] == 10.5
    np.testing.assert_array_equal(merged.records[0].truncated, [False, True, True, False])
    np.testing.assert_array_equal(merged.next_obs["x"][:, 0], [1, 1, 11, 11])


def test_ray_rollouts_repeat_on_the_same_seed():
    """Env seeds seed + w * envs_per_worker + e and worker torch seeds seed + w: the same seed and number of workers
    give the same actions and rewards (a local run samples from other random streams)."""
    model = flat_actor_critic(CARTPOLE())
    outcomes = []
    for _ in range(2):
        generator = RayRolloutGenerator(RayEnvGroup([CARTPOLE] * 4, n_workers=2))
        try:
            generator.reset(3)
            rollout = generator.rollout(model.policy, 30)
        finally:
            generator.env.close()
        outcomes.append((np.stack([r.actions["action"] for r in rollout.records]),
                         np.stack([r.reward for r in rollout.records]),
                         np.stack([r.terminated for r in rollout.records])))
    for a, b in zip(*outcomes, strict=True):
        np.testing.assert_array_equal(a, b)
    assert outcomes[0][2].any(), "30 random steps end some CartPole episodes"


def broken_factory():
    raise FileNotFoundError("no such map: levels/missing.txt")


def test_worker_that_cannot_build_its_envs_reports_why():
    model = flat_actor_critic(CARTPOLE())
    generator = RayRolloutGenerator(RayEnvGroup([CARTPOLE, broken_factory], n_workers=2,
                                                spaces=(CARTPOLE().observation_spaces_dict,
                                                        CARTPOLE().action_spaces_dict, CARTPOLE().agent_counts_dict)))
    try:
        generator.reset(0)
        with pytest.raises(RayWorkerError, match=r"(?s)Ray worker 1 failed to start.*FileNotFoundError: no such map"):
            generator.rollout(model.policy, 4)
    finally:
        generator.env.close()


def test_every_ray_worker_normalizes_with_the_statistics_the_checkpoint_keeps(tmp_path: Path):
    """wrappers=observation_normalization under runner=ray: the envs of both workers estimate the same statistics
    (sampled with the config's sampling_seed, as local envs do), and the checkpoint keeps exactly those."""
    from maze_lab.run.run_context import RunContext

    rc = RunContext(algorithm="ppo", runner="ray", wrappers="observation_normalization", run_dir=tmp_path / "run",
                    silent=True, overrides={"env.name": "CartPole-v1", "n_epochs": 1, "algorithm.epoch_length": 1,
                                            "algorithm.n_rollout_steps": 16, "algorithm.eval_repeats": 1,
                                            "runner.n_workers": 2, "runner.envs_per_worker": 2})
    try:
        rc.train()
        per_env = rc.trainer.env.call("get_normalization_statistics")
    finally:
        rc.close()
    assert len(per_env) == 4
    first = per_env[0]["observation"]
    assert np.abs(np.asarray(first["std"])).min() > 0  # estimated, not the placeholder
    for stats in per_env[1:]:
        for name in ("mean", "std"):
            np.testing.assert_array_equal(np.asarray(stats["observation"][name]), np.asarray(first[name]))
    saved = read_checkpoint(rc.run_dir / "checkpoints" / "state_dict_last.pt")["normalization_statistics"]
    for name in ("mean", "std"):
        np.testing.assert_allclose(np.asarray(saved["observation"][name], dtype=np.float64),
                                   np.asarray(first[name], dtype=np.float64))
