"""What every trainer gets from the shared base (maze_lab.train.trainers.common.base): checkpoints that resume
with the same weights, counters and optimizer state, a stop from another thread that writes the current weights, a
pause that holds between two updates, and a NaN loss that names the epoch and keeps the last good checkpoint.

One parameterised test per behaviour; each algorithm is one builder below (a new trainer adds a builder)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from training_utils import cartpole_factory, flat_actor_critic, pendulum, sac_model

from maze_lab.agent.heuristic_policy import DummyCartPolePolicy
from maze_lab.core.rollout.sequential import SequentialRolloutRunner
from maze_lab.train.trainers.a2c import A2C, A2CAlgorithmConfig
from maze_lab.train.trainers.bc import BC, BCAlgorithmConfig
from maze_lab.train.trainers.common.base import Trainer, TrainingDivergedError
from maze_lab.train.trainers.common.checkpoints import read_checkpoint
from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
from maze_lab.train.trainers.ppo import PPO, PPOAlgorithmConfig
from maze_lab.train.trainers.sac import SAC, SACAlgorithmConfig
from maze_lab.train.vector_env import SequentialVectorEnv


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def cartpole_demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Recorded episodes of the CartPole heuristic (BC's dataset)."""
    directory = tmp_path_factory.mktemp("cartpole_demos")
    SequentialRolloutRunner(cartpole_factory, DummyCartPolePolicy(), n_episodes=4, trajectory_dir=directory, seed=0,
                            writers=[]).run()
    return directory


def _evaluator() -> RolloutEvaluator:
    return RolloutEvaluator(SequentialVectorEnv([cartpole_factory], logging_prefix="eval", writers=[]), n_episodes=1,
                            deterministic=True)


def _model(seed: int) -> Any:
    torch.manual_seed(seed)
    return flat_actor_critic(cartpole_factory())


def _a2c(n_epochs: int, updates_per_epoch: int, checkpoint_dir: Path | None, demos: Path, seed: int) -> Trainer:
    config = A2CAlgorithmConfig(n_epochs=n_epochs, epoch_length=updates_per_epoch, n_rollout_steps=16, lr=1e-3,
                                seed=0, patience=0)
    return A2C(config, _model(seed), env=SequentialVectorEnv([cartpole_factory] * 2, writers=[]),
               evaluator=_evaluator(), checkpoint_dir=checkpoint_dir)


def _ppo(n_epochs: int, updates_per_epoch: int, checkpoint_dir: Path | None, demos: Path, seed: int) -> Trainer:
    config = PPOAlgorithmConfig(n_epochs=n_epochs, epoch_length=updates_per_epoch, n_rollout_steps=16, lr=1e-3,
                                batch_size=16, n_optimization_epochs=2, seed=0, patience=0)
    return PPO(config, _model(seed), env=SequentialVectorEnv([cartpole_factory] * 2, writers=[]),
               evaluator=_evaluator(), checkpoint_dir=checkpoint_dir)


def _bc(n_epochs: int, updates_per_epoch: int, checkpoint_dir: Path | None, demos: Path, seed: int) -> Trainer:
    # the batch size makes one pass over the training episodes `updates_per_epoch` updates (or close to it)
    config = BCAlgorithmConfig(n_epochs=n_epochs, batch_size=150, validation_percentage=25.0, seed=0,
                               eval_every_k_iterations=None)
    return BC(config, _model(seed), demos, evaluator=_evaluator(), writers=[], checkpoint_dir=checkpoint_dir)


def _sac(n_epochs: int, updates_per_epoch: int, checkpoint_dir: Path | None, demos: Path, seed: int) -> Trainer:
    config = SACAlgorithmConfig(n_epochs=n_epochs, epoch_length=updates_per_epoch, batch_size=32,
                                initial_buffer_size=40, seed=0, patience=0)
    return SAC(config, sac_model(pendulum, hidden=(32, 32), seed=seed), env=SequentialVectorEnv([pendulum], writers=[]),
               evaluator=RolloutEvaluator(SequentialVectorEnv([pendulum], logging_prefix="eval", writers=[]),
                                          n_episodes=1, deterministic=True), checkpoint_dir=checkpoint_dir)


def _es(n_epochs: int, updates_per_epoch: int, checkpoint_dir: Path | None, demos: Path, seed: int) -> Trainer:
    from maze_lab.train.trainers.es import ES, ESAlgorithmConfig

    # one worker process and short episodes: an update is two pairs of at most 20 steps
    config = ESAlgorithmConfig(n_epochs=n_epochs, epoch_length=updates_per_epoch, n_rollouts_per_update=4,
                               max_steps=20, shared_noise_table_size=100_000, seed=0, patience=0)
    return ES(config, _model(seed), env_factories=[cartpole_factory], evaluator=_evaluator(), writers=[],
              checkpoint_dir=checkpoint_dir)


def _impala(n_epochs: int, updates_per_epoch: int, checkpoint_dir: Path | None, demos: Path, seed: int) -> Trainer:
    from maze_lab.train.trainers.impala import IMPALA, ImpalaAlgorithmConfig

    # two actors in one actor process, two 16-step trajectories per update
    config = ImpalaAlgorithmConfig(n_epochs=n_epochs, epoch_length=updates_per_epoch, n_rollout_steps=16,
                                   actors_batch_size=2, num_actors=2, actor_processes=1, lr=1e-3, seed=0, patience=0)
    return IMPALA(config, _model(seed), env_factories=[cartpole_factory] * 2, evaluator=_evaluator(), writers=[],
                  checkpoint_dir=checkpoint_dir)


TRAINERS: dict[str, Callable[..., Trainer]] = {"a2c": _a2c, "ppo": _ppo, "bc": _bc, "sac": _sac, "es": _es,
                                               "impala": _impala}


def _weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: t.detach().clone() for k, t in _flat(trainer.model.state_dict()).items()}


def _flat(state: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for k, v in state.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("algorithm", TRAINERS)
def test_a_checkpoint_resumes_weights_counters_and_optimizer(algorithm: str, cartpole_demos: Path,
                                                             tmp_path: Path) -> None:
    build = TRAINERS[algorithm]
    trainer = build(2, 3, tmp_path, cartpole_demos, seed=0)
    trainer.train()
    assert trainer.stop_reason == "done" and trainer.epoch == 2 and trainer.updates > 0
    assert (tmp_path / "state_dict_last.pt").is_file() and (tmp_path / "state_dict_best.pt").is_file()
    state = read_checkpoint(tmp_path / "state_dict_last.pt", torch.device("cpu"))  # weights_only: no code runs
    assert state["trainer"] == type(trainer).__name__ and state["epoch"] == 2
    assert state["updates"] == trainer.updates and state["env_steps"] == trainer.env_steps

    resumed = build(2, 3, None, cartpole_demos, seed=123)  # other initial weights
    assert not _same(_weights(resumed), _weights(trainer))
    resumed.load_checkpoint(tmp_path / "state_dict_last.pt")
    assert _same(_weights(resumed), _weights(trainer))
    assert (resumed.epoch, resumed.updates, resumed.env_steps) == (trainer.epoch, trainer.updates, trainer.env_steps)
    assert resumed.model_selection.best_reward == trainer.model_selection.best_reward
    # the optimizer state (Adam's moments) came back too: the next step is the one the first trainer would take
    moments = [s for s in resumed.optimizer.state_dict()["state"].values() if "exp_avg" in s]
    assert moments and all(torch.count_nonzero(s["exp_avg"]) > 0 for s in moments)
    resumed.train(n_epochs=1)
    assert resumed.epoch == 3 and resumed.updates > trainer.updates


@pytest.mark.parametrize("algorithm", TRAINERS)
def test_a_stop_from_another_thread_writes_the_current_weights(algorithm: str, cartpole_demos: Path,
                                                              tmp_path: Path) -> None:
    trainer = TRAINERS[algorithm](0, 3, tmp_path, cartpole_demos, seed=0)  # n_epochs=0: until stopped
    thread = threading.Thread(target=trainer.train)
    thread.start()
    while trainer.updates < 4 and thread.is_alive():
        thread.join(0.01)
    trainer.request_stop()
    thread.join(60)
    assert not thread.is_alive()
    assert trainer.stop_reason == "stopped"
    state = read_checkpoint(tmp_path / "state_dict_last.pt", torch.device("cpu"))
    assert state["updates"] == trainer.updates >= 4
    assert _same(_flat(state["model"]), _weights(trainer))


@pytest.mark.parametrize("algorithm", TRAINERS)
def test_a_pause_holds_between_two_updates_until_resumed(algorithm: str, cartpole_demos: Path) -> None:
    trainer = TRAINERS[algorithm](3, 3, None, cartpole_demos, seed=0)
    after_first_epoch: list[int] = []

    def pause_after_the_first_epoch(t: Trainer, stats: Any) -> None:
        if t.epoch == 1:  # in the training thread, before the next update can start
            after_first_epoch.append(t.updates)
            t.pause()

    trainer.callbacks.append(pause_after_the_first_epoch)
    thread = threading.Thread(target=trainer.train)
    thread.start()
    while not after_first_epoch and thread.is_alive():
        thread.join(0.01)
    thread.join(0.3)  # any update started now would have moved the counter
    assert trainer.paused and thread.is_alive()
    assert trainer.updates == after_first_epoch[0] and trainer.epoch == 1
    trainer.resume()
    thread.join(60)
    assert not thread.is_alive() and trainer.stop_reason == "done" and trainer.epoch == 3


@pytest.mark.parametrize("algorithm", TRAINERS)
def test_a_nan_loss_names_the_epoch_and_keeps_the_last_good_checkpoint(algorithm: str, cartpole_demos: Path,
                                                                      tmp_path: Path) -> None:
    trainer = TRAINERS[algorithm](1, 3, tmp_path, cartpole_demos, seed=0)
    trainer.train()
    good = read_checkpoint(tmp_path / "state_dict_last.pt", torch.device("cpu"))
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.fill_(float("nan"))
    with pytest.raises(TrainingDivergedError, match=r"epoch 2, update \d+: .*(nan|NaN)"):
        trainer.train(n_epochs=1)
    kept = read_checkpoint(tmp_path / "state_dict_last.pt", torch.device("cpu"))
    assert kept["epoch"] == good["epoch"] == 1
    assert _same(_flat(kept["model"]), _flat(good["model"]))


def test_wall_time_counts_training_not_pauses_and_continues_on_resume(tmp_path: Path) -> None:
    """The training seconds recorded with each epoch (the cockpit's wall-time axis) leave out a pause and go on from
    the checkpoint when the run is resumed."""
    import time

    from run_utils import TINY

    from maze_lab.run.run_context import RunContext
    from maze_lab.run.runs import load_run

    rc = RunContext(overrides={**TINY, "n_epochs": 2, "log_base_dir": str(tmp_path)}, silent=True)
    trainer = rc.trainer
    trainer.pause()
    paused_for: list[float] = []

    def resume_after_a_while() -> None:
        deadline = time.monotonic() + 120
        while not trainer.holding and time.monotonic() < deadline:  # the loop holds at its first update
            time.sleep(0.01)
        held = time.perf_counter()
        while time.perf_counter() - held < 2.0:  # two seconds of pause, measured on the clock the trainer uses
            time.sleep(0.05)
        paused_for.append(time.perf_counter() - held)
        trainer.resume()

    helper = threading.Thread(target=resume_after_a_while, daemon=True)
    started = time.perf_counter()
    helper.start()
    rc.train()
    elapsed = time.perf_counter() - started
    helper.join(10)
    rc.close()
    assert paused_for and paused_for[0] >= 2.0
    assert 0 < trainer.wall_time <= elapsed - paused_for[0] + 0.05, (trainer.wall_time, elapsed, paused_for)
    first = read_checkpoint(rc.run_dir / "checkpoints" / "state_dict_last.pt", torch.device("cpu"))["wall_time"]
    assert first == pytest.approx(trainer.wall_time)

    resumed = RunContext(overrides={**TINY, "n_epochs": 1, "log_base_dir": str(tmp_path), "input_dir": str(rc.run_dir)},
                         silent=True)
    resumed.train()
    resumed.close()
    df = load_run(resumed.run_dir).stats.to_dataframe()
    walls = df[(df.topic == "TrainingProgressEvents") & (df.event == "time_training")].sort_values("epoch")
    steps = df[(df.topic == "TrainingProgressEvents") & (df.event == "env_steps")].sort_values("epoch")
    assert walls.epoch.tolist()[-1] == 3 and walls.value.iloc[-1] > first  # goes on from the earlier run's count
    assert steps.value.iloc[-1] == load_run(resumed.run_dir).summary["env_steps"]
