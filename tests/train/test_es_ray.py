"""ES with its workers as Ray actors (``algorithm=es runner=ray``, maze_lab.train.trainers.es.ray_workers): the same
weights as the local worker processes, a run through the run layer, and worker failures that name the worker."""

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
from maze_lab.train.trainers.common.checkpoints import read_checkpoint
from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
from maze_lab.train.trainers.es import ES, ESAlgorithmConfig
from maze_lab.train.trainers.es.workers import ESWorkerError
from maze_lab.train.vector_env import SequentialVectorEnv

ray = pytest.importorskip("ray")

from maze_lab.train.ray_rollouts import RayWorkerError  # noqa: E402
from maze_lab.train.trainers.es.ray_workers import ESRayWorkerError, ESRayWorkers  # noqa: E402

# the Ray workers do not have tests/ on their path: functions of this module travel by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

CARTPOLE = functools.partial(GymMazeEnv, "CartPole-v1", render_mode=None)


pytestmark = pytest.mark.usefixtures("local_ray")  # one local Ray for the module (tests/conftest.py)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _trainer(factories: list, workers: str, seed: int = 0, checkpoint_dir: Path | None = None, **config: Any) -> ES:
    torch.manual_seed(seed)
    model = flat_actor_critic(CARTPOLE())
    values = {"seed": seed, "shared_noise_table_size": 1_000_000, "patience": 0, "eval_repeats": 1, **config}
    evaluator = RolloutEvaluator(SequentialVectorEnv([CARTPOLE], logging_prefix="eval", writers=[]),
                                 n_episodes=values["eval_repeats"], deterministic=True)
    return ES(ESAlgorithmConfig(**values), model, env_factories=factories, evaluator=evaluator, writers=[],
              checkpoint_dir=checkpoint_dir, workers=workers)


def _flat(trainer: ES) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in trainer.policy.parameters()])


def _exploding_cartpole() -> Any:
    env = CARTPOLE()

    def explode(action: Any) -> Any:
        raise ValueError("cartpole exploded on purpose")

    env.step = explode
    return env


def test_ray_actors_give_the_weights_of_the_worker_processes() -> None:
    """ES is deterministic given its seeds: 2 updates with 2 Ray actors end at the very weights of 2 local worker
    processes, and theta went into the object store once per update."""
    trained = {}
    for backend in ("processes", "ray"):
        trainer = _trainer([CARTPOLE] * 2, backend, seed=5, n_epochs=2, max_steps=50)
        with mock.patch.object(ray, "put", wraps=ray.put) as put:
            trainer.train()
        if backend == "ray":
            assert isinstance(trainer.workers, ESRayWorkers) and len(trainer.workers.actors) == 2
            # one round of 5 pairs per update (10 rollouts, no step minimum): one ray.put each
            assert put.call_count == 2
        trainer.close()
        assert trainer.workers is None and trainer.updates == 2
        trained[backend] = (_flat(trainer), trainer.env_steps)
    assert ray.is_initialized(), "close() must leave a Ray it did not start running"
    torch.manual_seed(5)
    initial = torch.cat([p.detach().reshape(-1) for p in flat_actor_critic(CARTPOLE()).policy.parameters()])
    assert not torch.equal(trained["ray"][0], initial)
    assert torch.equal(trained["ray"][0], trained["processes"][0])
    assert trained["ray"][1] == trained["processes"][1] > 0


def test_runner_ray_trains_es_and_writes_the_run(tmp_path: Path) -> None:
    from maze_lab.run.run_context import RunContext

    overrides = {"env.name": "CartPole-v1", "n_epochs": 2, "seed": 3, "algorithm.shared_noise_table_size": 1_000_000,
                 "algorithm.eval_repeats": 1, "algorithm.max_steps": 50, "runner.n_workers": 2}
    rc = RunContext(algorithm="es", runner="ray", run_dir=tmp_path / "run", overrides=overrides, silent=True)
    try:
        rc.train()
        trainer = rc.trainer
        assert type(trainer).__name__ == "ES" and trainer.worker_backend == "ray"
        assert len(trainer.env_factories) == 2  # runner.n_workers
        stats = rc.stats
        es_events = set(stats[stats.topic == "ESEvents"].event)
        assert {"perturbed_return_mean", "update_norm", "n_episodes", "n_env_steps"} <= es_events
        episodes = stats[(stats.topic == "ESEvents") & (stats.event == "n_episodes")]
        assert (episodes.value >= 10).all()
        train_rewards = stats[(stats.prefix == "train") & (stats.event == "reward") & (stats.name == "mean")]
        assert sorted(train_rewards.epoch) == [1, 2]
        checkpoints = rc.run_dir / "checkpoints"
        assert (checkpoints / "state_dict_last.pt").is_file() and (checkpoints / "state_dict_best.pt").is_file()
        state = read_checkpoint(checkpoints / "state_dict_last.pt")
        assert state["epoch"] == 2 and state["trainer"] == "ES"
    finally:
        rc.close()
    assert rc.trainer.workers is None
    # the actors flushed their envs' event logs into the run directory as they closed
    assert list((rc.run_dir / "event_logs").glob("train_*/*.tsv"))

    # resumed from the run directory: weights, counters, Adam state and noise seed from its last checkpoint
    resumed = RunContext(algorithm="es", runner="ray", run_dir=tmp_path / "resumed", silent=True,
                         overrides={**overrides, "n_epochs": 1, "input_dir": str(rc.run_dir)})
    try:
        resumed.train()
        assert resumed.trainer.epoch == 3 and resumed.trainer.updates == 3
    finally:
        resumed.close()


def test_runner_ray_still_refuses_sac() -> None:
    from maze_lab.core.utils.factory import ConfigurationError
    from maze_lab.run.run_context import RunContext

    with pytest.raises(ConfigurationError, match=r"runner=ray runs A2C, PPO, ES and IMPALA .*SAC and BC are not "
                                                 r"available on Ray\): use runner=dev or runner=local"):
        RunContext(algorithm="sac", runner="ray", overrides={"env.name": "Pendulum-v1"})


def test_a_ray_workers_exception_carries_its_traceback() -> None:
    trainer = _trainer([CARTPOLE, _exploding_cartpole], "ray", n_epochs=1, n_rollouts_per_update=4)
    try:
        with pytest.raises(ESRayWorkerError, match=r"(?s)ES Ray worker 1 \(pid \d+\) raised while playing a pair.*"
                                                   r"traceback:.*test_es_ray.py\", line \d+, in explode.*"
                                                   r"ValueError: cartpole exploded on purpose") as raised:
            trainer.train()
        # caught where the process workers' or the Ray rollout workers' errors are
        assert isinstance(raised.value, ESWorkerError) and isinstance(raised.value, RayWorkerError)
        assert trainer.workers is None
    finally:
        trainer.close()


def test_a_killed_ray_worker_is_named_and_the_last_checkpoint_stays(tmp_path: Path) -> None:
    trainer = _trainer([CARTPOLE] * 2, "ray", checkpoint_dir=tmp_path, max_steps=30, n_rollouts_per_update=4)
    try:
        trainer.train(1)
        last = tmp_path / "state_dict_last.pt"
        before = last.read_bytes()
        pid = ray.get(trainer.workers.actors[1].pid.remote())
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(ESRayWorkerError, match=rf"ES Ray worker 1 \(pid {pid}\) died while .*killed from outside.*"
                                                   r"The last checkpoint stays"):
            trainer.train(1)
        assert trainer.workers is None and trainer.epoch == 1
        assert last.read_bytes() == before
        assert read_checkpoint(last)["epoch"] == 1
    finally:
        trainer.close()
