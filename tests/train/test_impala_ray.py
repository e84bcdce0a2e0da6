"""IMPALA with its actors as Ray actors (``algorithm=impala runner=ray``): learning CartPole-v1 through the run layer,
the weights through the object store once per update, a dead worker named (no restarts) or replaced
(``runner.max_worker_restarts``), and ES replaying a dead worker's pair so that its weights do not change."""

from __future__ import annotations

import functools
import os
import signal
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import cloudpickle
import pytest
import torch
from training_utils import flat_actor_critic

from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.train.ray_config import RayWorkerSettings
from maze_lab.train.trainers.common.checkpoints import read_checkpoint
from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
from maze_lab.train.trainers.es import ES, ESAlgorithmConfig
from maze_lab.train.trainers.impala import IMPALA, ImpalaAlgorithmConfig
from maze_lab.train.vector_env import SequentialVectorEnv

ray = pytest.importorskip("ray")

from maze_lab.train.trainers.impala.ray_actors import ImpalaRayActorError, RayActorPool  # noqa: E402

# the Ray workers do not have tests/ on their path: functions of this module travel by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

CARTPOLE = functools.partial(GymMazeEnv, "CartPole-v1", render_mode=None)

pytestmark = pytest.mark.usefixtures("local_ray")  # one local Ray for the module (tests/conftest.py)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _dies_once(marker: str, at_step: int) -> Any:
    """A CartPole whose process is killed (SIGKILL) at its ``at_step``-th step, the first time any env built by this
    factory gets there: ``marker`` records that it happened, so the replacement worker's env lives on."""
    env = CARTPOLE()
    step, count = env.step, [0]

    def step_or_die(action: Any) -> Any:
        count[0] += 1
        if count[0] == at_step and not os.path.exists(marker):
            Path(marker).write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return step(action)

    env.step = step_or_die
    return env


def _impala(factories: list, settings: RayWorkerSettings, checkpoint_dir: Path | None = None,
            **config: Any) -> IMPALA:
    torch.manual_seed(0)
    values = {"n_epochs": 1, "epoch_length": 3, "n_rollout_steps": 16, "actors_batch_size": 2, "seed": 0,
              "patience": 0, "eval_repeats": 1, **config}
    evaluator = RolloutEvaluator(SequentialVectorEnv([CARTPOLE], logging_prefix="eval", writers=[]), n_episodes=1,
                                 deterministic=True)
    return IMPALA(ImpalaAlgorithmConfig(**values), flat_actor_critic(CARTPOLE()), env_factories=factories,
                  evaluator=evaluator, writers=[], checkpoint_dir=checkpoint_dir, workers="ray", ray=settings)


def test_impala_on_ray_learns_cartpole_through_the_run_context(tmp_path: Path) -> None:
    """runner=ray: 2 Ray workers x 2 envs (4 IMPALA actors) reach the evaluation threshold of the actor-process test
    (195); the run writes the actors' episodes, the policy lag, checkpoints and the actors' event logs."""
    from maze_lab.run.run_context import RunContext

    overrides = {
        "env.name": "CartPole-v1", "log_base_dir": str(tmp_path), "seed": 0, "runner.eval_concurrency": 4,
        "runner.n_workers": 2, "runner.envs_per_worker": 2, "algorithm.actors_batch_size": 8,
        "algorithm.n_rollout_steps": 32, "algorithm.lr": 0.003, "algorithm.entropy_coef": 0.0,
        "algorithm.epoch_length": 10, "algorithm.eval_repeats": 4, "algorithm.deterministic_eval": True,
        "algorithm.patience": 0}
    rc = RunContext(algorithm="impala", runner="ray", overrides=overrides, silent=True)
    rewards: list[float] = []

    def stop_at_195(trainer, _stats) -> None:
        rewards.append(trainer.last_eval_reward)
        if trainer.last_eval_reward >= 195:
            trainer.request_stop()

    try:
        trainer = rc.trainer
        assert type(trainer).__name__ == "IMPALA" and trainer.worker_backend == "ray"
        assert len(trainer.env_factories) == 4
        trainer.callbacks.append(stop_at_195)
        with mock.patch.object(ray, "put", wraps=ray.put) as put:
            rc.train(n_epochs=30)
        pool = trainer.actors
        assert isinstance(pool, RayActorPool) and pool.groups == [[0, 1], [2, 3]]
        # the weights go into the object store once per update (and once before the first)
        assert put.call_count == trainer.updates + 1
    finally:
        rc.close()
    print(f"IMPALA on Ray, CartPole-v1 evaluations: {rewards}")
    assert max(rewards) >= 195, rewards
    assert pool.closed and not pool.workers
    stats = rc.stats
    train = stats[stats.prefix == "train"]
    assert (train[(train.event == "reward") & (train.name == "mean")].value > 0).all()  # the actors' episodes
    lags = train[train.event == "policy_lag"].value
    assert len(lags) == trainer.epoch and (lags >= 0).all()
    assert (train[train.event == "worker_restarts"].value == 0).all()
    assert trainer.env_steps == trainer.updates * 8 * 32
    assert sorted(p.name for p in rc.run_dir.rglob("state_dict_*.pt")) == ["state_dict_best.pt",
                                                                            "state_dict_last.pt"]
    # the Ray workers flushed their envs' event logs as they stopped
    assert sorted(p.parent.name for p in (rc.run_dir / "event_logs").glob("train_*/*.tsv")) == [
        "train_0", "train_1", "train_2", "train_3"]


def test_a_dead_impala_worker_fails_the_run_by_name_and_the_checkpoint_stays(tmp_path: Path) -> None:
    """max_worker_restarts=0: a worker killed in its second epoch stops the run with an error naming it (its pid,
    its actors); the checkpoint of the first epoch is intact."""
    marker = tmp_path / "killed"
    # worker 1's 6th call: its calls start only while fewer than 2 trajectories wait, so by then the learner has
    # taken at least 8 trajectories (4 updates of 2, more than the 3 of an epoch); n_epochs is never reached
    dying = functools.partial(_dies_once, str(marker), 90)
    trainer = _impala([CARTPOLE, CARTPOLE, dying, CARTPOLE], RayWorkerSettings(envs_per_worker=2),
                      checkpoint_dir=tmp_path / "ckpt", n_epochs=50)
    try:
        with pytest.raises(ImpalaRayActorError, match=r"IMPALA Ray worker 1 \(actors \[2, 3\]\) \(pid (\d+)\) died "
                                                      r"while rolling out.*killed from outside") as info:
            trainer.train()
        assert marker.read_text() in str(info.value)  # the pid of the process that died
        assert trainer.epoch >= 1
        saved = read_checkpoint(tmp_path / "ckpt" / "state_dict_last.pt")
        assert saved["epoch"] == trainer.epoch  # the last completed epoch, written before the death
    finally:
        trainer.close()


def test_a_dead_impala_worker_is_replaced_while_restarts_are_left(tmp_path: Path,
                                                                    capfd: pytest.CaptureFixture) -> None:
    """max_worker_restarts=1: the killed worker is replaced by a fresh one, the run ends its epochs, and the
    restart shows in the statistics and on the console."""
    from maze_lab.core.log_stats.writers import LogStatsWriter

    class Keep(LogStatsWriter):
        def __init__(self) -> None:
            self.rows: list[tuple[str, dict]] = []

        def write(self, prefix: str, epoch: int, stats: Any) -> None:
            self.rows.append((prefix, dict(stats)))

    marker = tmp_path / "killed"
    dying = functools.partial(_dies_once, str(marker), 40)
    trainer = _impala([CARTPOLE, dying], RayWorkerSettings(n_workers=2, envs_per_worker=1, max_worker_restarts=1),
                      n_epochs=3)
    keep = Keep()
    trainer.writers.append(keep)
    try:
        trainer.train()
        dead_pid = int(marker.read_text())
        assert trainer.epoch == 3 and trainer.worker_restarts == trainer.actors.restarts == 1
        assert trainer.actors.pids[1] != dead_pid
    finally:
        trainer.close()
    restarts = [v for prefix, stats in keep.rows for k, v in stats.items()
                if "worker_restarts" in str(k) and prefix != "eval"]
    assert sum(restarts) == 1, keep.rows
    err = capfd.readouterr().err
    assert "IMPALA Ray worker 1 (pid" in err and "replaced it by a fresh worker" in err
    assert "restart 1 of runner.max_worker_restarts=1" in err


def _es(factories: list, settings: RayWorkerSettings) -> ES:
    torch.manual_seed(3)
    config = ESAlgorithmConfig(seed=3, shared_noise_table_size=1_000_000, patience=0, eval_repeats=1, n_epochs=2,
                               max_steps=60)
    evaluator = RolloutEvaluator(SequentialVectorEnv([CARTPOLE], logging_prefix="eval", writers=[]), n_episodes=1,
                                 deterministic=True)
    return ES(config, flat_actor_critic(CARTPOLE()), env_factories=factories, evaluator=evaluator, writers=[],
              workers="ray", ray=settings)


def test_a_dead_es_worker_is_replaced_and_its_pair_played_again_so_the_weights_are_unchanged(tmp_path: Path) -> None:
    """ES's pair tasks depend only on their seeds: with a restart, a run whose worker is killed mid-update ends at
    the very weights of a run without a death; without restarts it fails naming the worker."""
    reference = _es([CARTPOLE] * 2, RayWorkerSettings(n_workers=2))
    try:
        reference.train()
        expected = torch.cat([p.detach().reshape(-1) for p in reference.policy.parameters()])
    finally:
        reference.close()

    # killed within the first pair worker 1 plays (each worker gets a pair at the start of every update, and a pair
    # is two episodes of at least 8 steps): how many pairs a worker plays after that depends on the machine's load
    dying = functools.partial(_dies_once, str(tmp_path / "killed"), 10)
    restarted = _es([CARTPOLE, dying], RayWorkerSettings(n_workers=2, max_worker_restarts=2))
    try:
        restarted.train()
        assert restarted.worker_restarts == 1
        got = torch.cat([p.detach().reshape(-1) for p in restarted.policy.parameters()])
    finally:
        restarted.close()
    assert (tmp_path / "killed").exists()
    assert torch.equal(got, expected)

    from maze_lab.train.trainers.es.ray_workers import ESRayWorkerError

    (tmp_path / "killed").unlink()
    failing = _es([CARTPOLE, dying], RayWorkerSettings(n_workers=2))
    try:
        with pytest.raises(ESRayWorkerError, match=r"ES Ray worker 1 \(pid \d+\) died while playing a pair"):
            failing.train()
    finally:
        failing.close()
