"""runner=processes: A2C/PPO rollouts in local worker processes (learning, seeds, worker failures, clean shutdown,
the run layer and train_async)."""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
from pathlib import Path

import cloudpickle
import numpy as np
import pytest
import torch
from training_utils import flat_actor_critic

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.core.wrappers.wrapper import Wrapper
from maze_lab.train.process_rollouts import ProcessEnvGroup, ProcessRolloutGenerator, ProcessWorkerError
from maze_lab.train.trainers.common.checkpoints import read_checkpoint
from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
from maze_lab.train.trainers.common.rollout import RolloutGenerator
from maze_lab.train.trainers.common.schedules import LinearSchedule
from maze_lab.train.trainers.ppo import PPO, PPOAlgorithmConfig
from maze_lab.train.vector_env import SequentialVectorEnv

# the spawned workers do not have tests/ on their path: classes of this module travel by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

CARTPOLE = functools.partial(GymMazeEnv, "CartPole-v1", render_mode=None)
CARTPOLE_SPACES = (CARTPOLE().observation_spaces_dict, CARTPOLE().action_spaces_dict, CARTPOLE().agent_counts_dict)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _gone(pid: int) -> bool:
    """Whether no process ``pid`` runs any more (a zombie not yet reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


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


def broken_factory():
    raise FileNotFoundError("no such map: levels/missing.txt")


def _ppo_config(**overrides) -> PPOAlgorithmConfig:
    # the configuration of tests/train/test_training.py::test_ppo_solves_cartpole (the runner=dev learning test)
    params = dict(n_epochs=30, epoch_length=10, n_rollout_steps=32, lr=LinearSchedule(1e-3, 0.0), gamma=0.98,
                  gae_lambda=0.8, entropy_coef=0.0, batch_size=256, n_optimization_epochs=20,
                  clip_range=LinearSchedule(0.2, 0.0), max_grad_norm=0.5, seed=0, patience=0)
    params.update(overrides)
    return PPOAlgorithmConfig(**params)


def _process_ppo(config: PPOAlgorithmConfig, factories, n_workers: int = 2, checkpoint_dir=None) -> PPO:
    torch.manual_seed(0)
    model = flat_actor_critic(CARTPOLE())
    generator = ProcessRolloutGenerator(ProcessEnvGroup(factories, n_workers, spaces=CARTPOLE_SPACES))
    evaluator = RolloutEvaluator(SequentialVectorEnv([CARTPOLE] * 4, logging_prefix="eval"), n_episodes=8,
                                 deterministic=True)
    return PPO(config, model, rollout_generator=generator, evaluator=evaluator, checkpoint_dir=checkpoint_dir)


def _tiny_run(tmp_path: Path, name: str, **overrides):
    from maze_lab.run.run_context import RunContext

    params = {"env.name": "CartPole-v1", "n_epochs": 2, "algorithm.epoch_length": 3,
              "algorithm.n_rollout_steps": 20, "algorithm.eval_repeats": 1, "runner.n_workers": 2,
              "runner.envs_per_worker": 2, "seed": 5}
    params.update(overrides)
    return RunContext(algorithm="ppo", runner="processes", run_dir=tmp_path / name, silent=True, overrides=params)


@pytest.mark.slow
def test_ppo_in_worker_processes_solves_cartpole():
    """Same config, seed and budget as the runner=dev PPO learning test (8 envs: 2 workers x 4)."""
    trainer = _process_ppo(_ppo_config(), [CARTPOLE] * 8)

    def stop_at_475(t, stats):
        if t.last_eval_reward >= 475:
            t.request_stop()

    trainer.callbacks.append(stop_at_475)
    try:
        trainer.train()
    finally:
        trainer.env.close()
    assert trainer.last_eval_reward >= 475, f"PPO with rollout workers reached only {trainer.last_eval_reward}"
    assert trainer.env_steps <= 30 * 10 * 32 * 8
    assert trainer.env.get_stats(), "no training episodes reached the train statistics"


def test_rollout_has_the_local_structure_and_seeds():
    """A worker rollout is the local RolloutGenerator's Rollout: same shapes and keys; the first observations equal a
    local vector env's on the same seed (env e of worker w seeded seed + w * envs_per_worker + e)."""
    model = flat_actor_critic(CARTPOLE())
    generator = ProcessRolloutGenerator(ProcessEnvGroup([CARTPOLE] * 4, n_workers=2))
    local = RolloutGenerator(SequentialVectorEnv([CARTPOLE] * 4))
    try:
        generator.reset(7)
        local.reset(7)
        first_local = local._obs["observation"].copy()
        rollout = generator.rollout(model.policy, 40, epoch=1)
        local_rollout = local.rollout(model.policy, 40, epoch=1)
        assert rollout.n_envs == 4 and len(rollout.records) == len(local_rollout.records) == 40
        np.testing.assert_array_equal(rollout.records[0].obs["observation"], first_local)
        for a, b in zip(rollout.records, local_rollout.records, strict=True):
            assert a.key == b.key and a.obs["observation"].shape == b.obs["observation"].shape
            assert a.actions.keys() == b.actions.keys() and a.log_prob.shape == b.log_prob.shape
        assert rollout.next_obs["observation"].shape == (4, 4)
        assert generator.env.n_finished_episodes >= 4  # random CartPole episodes last about 20 steps
        timing = generator.last_timing
        assert timing["total"] >= timing["workers"] > 0
        # a second rollout: the workers hold the newest weights (published into shared memory, not pickled)
        with torch.no_grad():
            for module in model.policy._modules().values():
                for p in module.parameters():
                    p.zero_()  # uniform action probabilities: every log-prob is log(1/2)
        again = generator.rollout(model.policy, 5, epoch=1)
        np.testing.assert_allclose(np.stack([r.log_prob for r in again.records]), np.log(0.5), rtol=1e-6)
        assert generator.last_timing["learner_cpu"] >= 0
    finally:
        generator.env.close()
        local.env.close()


def test_same_seed_same_statistics(tmp_path: Path):
    frames = []
    for name in ("a", "b"):
        rc = _tiny_run(tmp_path, name)
        try:
            rc.train()
            frames.append(rc.stats)
        finally:
            rc.close()
    a, b = frames
    keep = ["epoch", "prefix", "event", "name", "value"]
    a = a[~a.event.str.startswith("time_")][keep].reset_index(drop=True)
    b = b[~b.event.str.startswith("time_")][keep].reset_index(drop=True)
    assert len(a) > 20 and set(a.prefix) >= {"train", "eval"}
    assert a.equals(b)
    # a third run with another seed differs (the comparison above would hold for constant statistics too)
    rc = _tiny_run(tmp_path, "c", seed=6)
    try:
        rc.train()
        c = rc.stats
    finally:
        rc.close()
    reward = (a.prefix == "train") & (a.event == "reward") & (a.name == "mean")
    c_reward = c[(c.prefix == "train") & (c.event == "reward") & (c.name == "mean")]
    assert list(a[reward].value) != list(c_reward.value)


def test_killed_worker_gives_a_clear_error_and_keeps_the_checkpoint(tmp_path: Path):
    from maze_lab.run.run_dir import RunDirectory

    rc = _tiny_run(tmp_path, "run", **{"n_epochs": 4, "algorithm.epoch_length": 2, "algorithm.n_rollout_steps": 16,
                                        "runner.envs_per_worker": 1})
    trainer = rc.trainer
    killed = []

    def kill_worker_1(t, stats):
        if t.epoch == 2:
            pid = t.env.pids[1]
            os.kill(pid, signal.SIGKILL)
            # gone before the next update's weights are sent: a message to it then fails at once, which must be
            # named as the death it is
            deadline = time.monotonic() + 60
            while not _gone(pid):
                assert time.monotonic() < deadline, "the killed worker did not end"
                time.sleep(0.05)
            killed.append(pid)

    trainer.callbacks.append(kill_worker_1)
    pids = []
    try:
        with pytest.raises(ProcessWorkerError, match=r"rollout worker 1 \(pid (\d+)\) died: signal 9 \(SIGKILL\), "
                                                     r"while rolling out epoch 3") as info:
            rc.train()
        pids = list(trainer.env.pids)
    finally:
        rc.close()
    assert f"pid {killed[0]})" in str(info.value)
    assert "all rollout workers were shut down" in str(info.value)
    assert not trainer.env.actors and all(_gone(p) for p in pids), "the other worker must be shut down too"
    run = RunDirectory(rc.run_dir)
    assert run.read_summary()["status"] == "failed"
    state = read_checkpoint(run.last_checkpoint)
    assert state["epoch"] == 2 and state["trainer"] == "PPO"
    # the workers flushed the event logs of their training envs into the run directory
    assert (run.event_log_dir / "train_0").exists()


def test_worker_exception_carries_its_traceback():
    trainer = _process_ppo(_ppo_config(n_epochs=1, epoch_length=2), [CARTPOLE, CARTPOLE, failing_cartpole, CARTPOLE])
    try:
        with pytest.raises(ProcessWorkerError, match=r"(?s)rollout worker 1 \(pid \d+\) raised while rolling out "
                                                     r"epoch 1.*test_process_rollouts.py.*in step.*"
                                                     r"ArithmeticError: env exploded at step 20"):
            trainer.train()
        pids = list(trainer.env.pids)
    finally:
        trainer.env.close()
    assert not trainer.env.actors and all(_gone(p) for p in pids), "the workers must be shut down after a failure"


def test_worker_that_cannot_build_its_envs_reports_why():
    model = flat_actor_critic(CARTPOLE())
    generator = ProcessRolloutGenerator(ProcessEnvGroup([CARTPOLE, broken_factory], n_workers=2,
                                                        spaces=CARTPOLE_SPACES))
    try:
        generator.reset(0)
        with pytest.raises(ProcessWorkerError, match=r"(?s)rollout worker 1 \(pid \d+\) failed to start.*"
                                                     r"FileNotFoundError: no such map"):
            generator.rollout(model.policy, 4)
    finally:
        generator.env.close()
    assert not generator.env.actors


def test_close_leaves_no_process_behind(tmp_path: Path):
    rc = _tiny_run(tmp_path, "run", n_epochs=1)
    assert not rc.trainer.env.actors, "a built run starts no process before it trains"
    rc.train()
    env = rc.trainer.env
    pids = list(env.pids)
    assert len(pids) == 2 and not any(_gone(p) for p in pids), "the workers run until the run is closed"
    assert len(env.call("get_actor_rewards")) == 4  # a call reaches every env of both workers
    rc.close()
    rc.close()  # idempotent
    assert not env.actors and all(_gone(p) for p in pids)
    # a group dropped without close() ends its workers too (its finalizer)
    model = flat_actor_critic(CARTPOLE())
    generator = ProcessRolloutGenerator(ProcessEnvGroup([CARTPOLE] * 2, n_workers=2, spaces=CARTPOLE_SPACES))
    generator.reset(0)
    generator.rollout(model.policy, 3)
    dropped = list(generator.env.pids)
    del generator
    import gc

    gc.collect()
    assert all(_gone(p) for p in dropped)


def test_call_reaches_every_env_in_env_order():
    from maze_lab.train.vector_env import VectorEnvCallError

    model = flat_actor_critic(CARTPOLE())
    env = ProcessEnvGroup([CARTPOLE] * 4, n_workers=2, spaces=CARTPOLE_SPACES)
    generator = ProcessRolloutGenerator(env)
    try:
        generator.reset(0)
        generator.rollout(model.policy, 2)
        env_ids = env.call("actor_id")
        assert len(env_ids) == 4
        with pytest.raises(VectorEnvCallError, match=r"(?s)failed in a rollout worker.*AttributeError.*no_such_method"):
            env.call("no_such_method")
        # a failed call leaves the workers running, with the same processes
        pids = list(env.pids)
        assert len(env.call("actor_id")) == 4 and env.pids == pids and not any(_gone(p) for p in pids)
    finally:
        env.close()


def test_train_async_trains_with_rollout_workers(tmp_path: Path):
    rc = _tiny_run(tmp_path, "run", n_epochs=3)
    try:
        handle = rc.train_async()
        assert handle.wait(timeout=120) == "done"
        assert rc.trainer.env_steps == 3 * 3 * 20 * 4
        df = rc.stats
        train = df[(df.prefix == "train") & (df.event == "reward") & (df.name == "mean")]
        assert list(train.epoch) == [1, 2, 3]
        pids = list(rc.trainer.env.pids)
    finally:
        rc.close()
    assert all(_gone(p) for p in pids)
    # resumed from the run directory: weights, counters and optimizer from its last checkpoint
    resumed = _tiny_run(tmp_path, "resumed", n_epochs=1, input_dir=str(rc.run_dir))
    try:
        resumed.train()
        assert resumed.trainer.epoch == 4 and resumed.trainer.env_steps == 4 * 3 * 20 * 4
    finally:
        resumed.close()


def test_runner_processes_refuses_other_algorithms_and_bad_settings():
    from maze_lab.run.run_context import RunContext

    with pytest.raises(ConfigurationError, match=r"runner=processes rolls out A2C and PPO .*SACAlgorithmConfig runs "
                                                 r"its envs its own way: use runner=dev or runner=local"):
        RunContext(algorithm="sac", runner="processes", overrides={"env.name": "Pendulum-v1"})
    with pytest.raises(ConfigurationError, match=r"runner=processes rolls out A2C and PPO .*ESAlgorithmConfig"):
        RunContext(algorithm="es", runner="processes")
    with pytest.raises(ConfigurationError, match=r"runner.n_workers must be an int >= 1, got 0"):
        RunContext(algorithm="ppo", runner="processes", overrides={"runner.n_workers": 0})
    with pytest.raises(ConfigurationError, match=r"runner.vector_env must be .*'processes' \(runner=processes\)"):
        RunContext(algorithm="ppo", overrides={"runner.vector_env": "threads"})


def test_interrupted_rollout_stops_the_workers_and_the_next_one_starts_fresh(monkeypatch):
    """An interrupt while waiting for the workers leaves their pipes out of step: they are stopped, and the next
    rollout starts new ones (the run can go on in the kernel)."""
    import maze_lab.distributed.transport as transport

    model = flat_actor_critic(CARTPOLE())
    env = ProcessEnvGroup([CARTPOLE] * 2, n_workers=2, spaces=CARTPOLE_SPACES)
    generator = ProcessRolloutGenerator(env)
    try:
        generator.reset(0)
        generator.rollout(model.policy, 2)
        first = list(env.pids)

        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(transport, "ready_workers", interrupted)  # the wait for the workers' answers
        with pytest.raises(KeyboardInterrupt):
            generator.rollout(model.policy, 2)
        assert not env.actors and all(_gone(p) for p in first)
        monkeypatch.undo()
        rollout = generator.rollout(model.policy, 3)
        assert rollout.n_envs == 2 and len(rollout.records) == 3
        assert env.pids != first and not any(_gone(p) for p in env.pids)
    finally:
        env.close()
    assert all(_gone(p) for p in env.pids)


def test_an_interrupt_while_the_workers_start_leaves_none_and_the_next_rollout_starts_them(monkeypatch):
    """Ctrl-C in the kernel while the workers build their envs: no worker is left running, and the run can go on."""
    import multiprocessing as mp

    import maze_lab.distributed.transport as transport

    model = flat_actor_critic(CARTPOLE())
    env = ProcessEnvGroup([CARTPOLE] * 2, n_workers=2, spaces=CARTPOLE_SPACES)
    generator = ProcessRolloutGenerator(env)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    def ours() -> list:
        return [p for p in mp.active_children() if p.name.startswith("maze-lab-rollout-worker")]

    try:
        generator.reset(0)
        monkeypatch.setattr(transport, "ready_workers", interrupted)  # the wait for the workers' first answers
        with pytest.raises(KeyboardInterrupt):
            generator.rollout(model.policy, 2)
        assert not env.actors and not ours()
        monkeypatch.undo()
        rollout = generator.rollout(model.policy, 3)
        assert rollout.n_envs == 2 and len(rollout.records) == 3 and len(ours()) == 2
    finally:
        env.close()
    assert not ours()


def test_a_failure_seen_by_a_tolerant_caller_is_named_at_the_next_rollout():
    """The trainer reads normalization statistics with ``call`` and tolerates its errors; a worker that died there is
    still named when the next rollout finds the workers shut down."""
    model = flat_actor_critic(CARTPOLE())
    env = ProcessEnvGroup([CARTPOLE] * 2, n_workers=2, spaces=CARTPOLE_SPACES)
    generator = ProcessRolloutGenerator(env)
    try:
        generator.reset(0)
        generator.rollout(model.policy, 2)
        os.kill(env.pids[0], signal.SIGKILL)
        with pytest.raises(ProcessWorkerError, match=r"rollout worker 0 \(pid \d+\) died: signal 9"):
            env.call("actor_id")
        with pytest.raises(ProcessWorkerError, match=r"shut down after a failure: rollout worker 0 \(pid \d+\) died: "
                                                     r"signal 9 \(SIGKILL\), while calling 'actor_id'"):
            generator.rollout(model.policy, 2)
    finally:
        env.close()
    assert all(_gone(p) for p in env.pids)
