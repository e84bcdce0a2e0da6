"""Evolution strategies (maze_lab.train.trainers.es): the rank transform and the gradient estimate against hand
computations, the noise table that every process builds alike, workers whose failures surface with their traceback
or their signal, determinism, learning CartPole, and a run through the run layer."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from training_utils import cartpole_factory, flat_actor_critic

from maze_lab.core.log_stats.aggregation import StatKey
from maze_lab.core.log_stats.base_events import BaseEnvEvents
from maze_lab.run.run_context import RunContext
from maze_lab.train.trainers.common.checkpoints import read_checkpoint
from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
from maze_lab.train.trainers.es import ES, ESAlgorithmConfig
from maze_lab.train.trainers.es.es import centered_ranks, es_gradient
from maze_lab.train.trainers.es.noise_table import NoiseTable
from maze_lab.train.trainers.es.workers import ESWorkerError
from maze_lab.train.vector_env import SequentialVectorEnv

LEARNING_SEED = 2
"""The seed of the learning test (its model, noise table, perturbations and env seeds)."""


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _es_workers_alive() -> list[Any]:
    """Worker processes of ES still running (active_children also reaps the finished ones)."""
    return [p for p in mp.active_children() if p.name.startswith("maze-lab-es-worker")]


def _trainer(factories: list, seed: int = 0, checkpoint_dir: Path | None = None, **config: Any) -> ES:
    torch.manual_seed(seed)
    model = flat_actor_critic(cartpole_factory())
    values = {"seed": seed, "shared_noise_table_size": 1_000_000, "patience": 0, **config}
    evaluator = RolloutEvaluator(SequentialVectorEnv([cartpole_factory], logging_prefix="eval", writers=[]),
                                 n_episodes=values.get("eval_repeats", 10), deterministic=True)
    return ES(ESAlgorithmConfig(**values), model, env_factories=factories, evaluator=evaluator, writers=[],
              checkpoint_dir=checkpoint_dir)


# ---- the maths on tiny numbers ---------------------------------------------------------------------------------


def test_centered_ranks_scale_the_ranks_to_plus_minus_one_half() -> None:
    # returns 1, 3, 2, 0 have ranks 1, 3, 2, 0 of 0..3: rank / 3 - 0.5
    ranks = centered_ranks(np.array([[1.0, 3.0], [2.0, 0.0]]))
    np.testing.assert_allclose(ranks, [[-1 / 6, 1 / 2], [1 / 6, -1 / 2]])
    # equal returns share their mean rank: 1 has rank 0, the three 5s ranks 1, 2, 3 -> 2 each
    tied = centered_ranks(np.array([[5.0, 5.0], [1.0, 5.0]]))
    np.testing.assert_allclose(tied, [[1 / 6, 1 / 6], [-1 / 2, 1 / 6]])
    # the scale of the returns does not matter, only their order
    np.testing.assert_allclose(centered_ranks(np.array([[1e6, -3.0], [7.0, 0.5]])),
                               centered_ranks(np.array([[4.0, 1.0], [3.0, 2.0]])))


def test_the_gradient_estimate_weights_the_noise_by_the_rank_differences() -> None:
    weights = centered_ranks(np.array([[1.0, 3.0], [2.0, 0.0]]))  # differences w+ - w-: -2/3 and +2/3
    noise = np.array([[1.0, 2.0, 0.0], [0.0, 1.0, -1.0]])
    # sum_i (w_i+ - w_i-) eps_i / (2 n) with n = 2 pairs: (-2/3 * (1, 2, 0) + 2/3 * (0, 1, -1)) / 4
    np.testing.assert_allclose(es_gradient(weights, noise), [-1 / 6, -1 / 6, -1 / 6])
    # a pair whose two episodes scored the same contributes nothing
    assert np.allclose(es_gradient(centered_ranks(np.array([[2.0, 2.0], [2.0, 2.0]])), noise), 0.0)


# ---- the noise table ----------------------------------------------------------------------------------------------


def _digest(seed: int, size: int) -> str:
    return hashlib.sha256(NoiseTable(seed, size).noise.tobytes()).hexdigest()


def test_the_noise_table_is_the_same_in_another_process() -> None:
    code = ("import hashlib; from maze_lab.train.trainers.es.noise_table import NoiseTable; "
            "print(hashlib.sha256(NoiseTable(42, 100_000).noise.tobytes()).hexdigest())")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert other.stdout.strip() == _digest(42, 100_000)
    assert _digest(43, 100_000) != _digest(42, 100_000)
    table = NoiseTable(42, 100_000)
    assert table.noise.dtype == np.float32 and abs(float(table.noise.std()) - 1.0) < 0.01
    np.testing.assert_array_equal(table.get(10, 3), table.noise[10:13])
    with pytest.raises(ValueError, match="shared_noise_table_size to at least"):
        table.sample_offsets(np.random.default_rng(0), 200_000, 1)


def test_a_policy_larger_than_the_noise_table_is_refused_with_the_size_to_set() -> None:
    with pytest.raises(ValueError, match=r"has 4610 parameters .* at least 46100"):
        _trainer([cartpole_factory], shared_noise_table_size=1000)


# ---- workers --------------------------------------------------------------------------------------------------


def _exploding_cartpole() -> Any:
    env = cartpole_factory()

    def explode(action: Any) -> Any:
        raise ValueError("cartpole exploded on purpose")

    env.step = explode
    return env


def _killed_cartpole() -> Any:
    env = cartpole_factory()

    def die(action: Any) -> Any:
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)

    env.step = die
    return env


def test_a_workers_exception_surfaces_with_its_traceback(capfd: pytest.CaptureFixture) -> None:
    trainer = _trainer([cartpole_factory, _exploding_cartpole], n_epochs=1, n_rollouts_per_update=4)
    with pytest.raises(ESWorkerError) as raised:
        trainer.train()
    message = str(raised.value)
    assert "ES worker 1" in message and "Traceback (most recent call last)" in message
    assert "ValueError: cartpole exploded on purpose" in message and "in explode" in message
    assert trainer.workers is None and not _es_workers_alive()
    # the healthy worker shut down quietly: no second traceback on the console
    assert "Traceback" not in capfd.readouterr().err
    trainer.close()


def test_a_worker_killed_between_updates_is_named_at_the_next_one() -> None:
    """A worker killed while the learner updates (its process gone before the next parameters are sent): the
    next update names it with its signal, not the pipe's error."""
    trainer = _trainer([cartpole_factory, cartpole_factory], n_epochs=3, n_rollouts_per_update=4)
    killed = []

    def kill_worker_1(t: Any, stats: Any) -> None:
        if t.epoch == 1:
            pid = t.workers.pids[1]
            os.kill(pid, signal.SIGKILL)
            t.workers.processes[1].join(60)  # gone before the next parameters are sent
            assert t.workers.processes[1].exitcode is not None, "the killed worker did not end"
            killed.append(pid)

    trainer.callbacks.append(kill_worker_1)
    with pytest.raises(ESWorkerError, match=r"ES worker 1 \(pid (\d+)\) died: killed by signal 9 \(SIGKILL\)") as info:
        trainer.train()
    assert f"pid {killed[0]})" in str(info.value)
    assert trainer.workers is None and not _es_workers_alive()
    trainer.close()


def test_a_worker_killed_by_a_signal_is_named_with_the_signal() -> None:
    trainer = _trainer([cartpole_factory, _killed_cartpole], n_epochs=1, n_rollouts_per_update=4)
    with pytest.raises(ESWorkerError, match=r"ES worker 1 \(pid \d+\) died: killed by signal 9 \(SIGKILL\)"):
        trainer.train()
    assert trainer.workers is None and not _es_workers_alive()
    trainer.close()


# ---- training --------------------------------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_weights_with_the_same_number_of_workers(tmp_path: Path) -> None:
    weights = []
    for _ in range(2):
        trainer = _trainer([cartpole_factory] * 2, seed=5, n_epochs=2, max_steps=50, eval_repeats=1)
        trainer.train()
        trainer.close()
        weights.append(torch.cat([p.detach().reshape(-1) for p in trainer.policy.parameters()]))
        assert trainer.updates == 2 and trainer.env_steps > 0
    assert torch.equal(weights[0], weights[1])
    torch.manual_seed(5)
    initial = torch.cat([p.detach().reshape(-1) for p in flat_actor_critic(cartpole_factory()).policy.parameters()])
    assert not torch.equal(weights[0], initial)


def test_an_update_plays_until_both_minimums_and_cuts_episodes_at_max_steps() -> None:
    trainer = _trainer([cartpole_factory], n_epochs=1, n_rollouts_per_update=3, n_timesteps_per_update=200,
                       max_steps=10, deterministic_rollouts=False, eval_repeats=1)
    seen: list[dict] = []
    trainer.callbacks.append(lambda t, stats: seen.append({k.event.__name__: v for k, v in stats.items()
                                                           if k.event.__qualname__.startswith("ESEvents.")}))
    try:
        trainer.train()
    finally:
        trainer.close()
    episodes, steps = seen[0]["n_episodes"], seen[0]["n_env_steps"]
    # 200 agent actions in episodes of at most 10 need at least 20 episodes, in whole pairs
    assert steps == trainer.env_steps >= 200 and episodes >= 20 and episodes % 2 == 0
    assert steps <= 10 * episodes
    assert trainer.updates == 1


def test_updates_without_a_direction_are_counted_and_said_once(capfd: pytest.CaptureFixture) -> None:
    """Episodes cut after one step all return 1: every pair ties, the ranks are equal and the update has no
    direction (how ES stalls on sparse rewards); the run says so once and counts the tied pairs every epoch."""
    trainer = _trainer([cartpole_factory], n_epochs=2, n_rollouts_per_update=4, n_timesteps_per_update=0,
                       max_steps=1, eval_repeats=1)
    tied: list[float] = []
    trainer.callbacks.append(lambda t, stats: tied.extend(v for k, v in stats.items()
                                                          if k.event.__qualname__ == "ESEvents.tied_pairs"))
    try:
        trainer.train()
    finally:
        trainer.close()
    assert tied == [1.0, 1.0]
    assert len(trainer.warnings) == 1 and "had no direction to follow" in trainer.warnings[0]
    assert capfd.readouterr().err.count("had no direction to follow") == 1


def _normalized_cartpole(sampling_seed: int) -> Any:
    from maze_lab.core.wrappers.observation_normalization.observation_normalization_wrapper import (
        ObservationNormalizationWrapper,
    )

    return ObservationNormalizationWrapper(cartpole_factory(), statistics_dump=None, n_samples=100,
                                           sampling_seed=sampling_seed)


def test_checkpoints_carry_the_workers_normalization_statistics_and_resume_with_them(tmp_path: Path) -> None:
    first = _trainer([lambda: _normalized_cartpole(7)], checkpoint_dir=tmp_path / "first", n_epochs=1,
                     n_rollouts_per_update=2, max_steps=10, eval_repeats=1)
    first.train()
    first.close()
    saved = read_checkpoint(tmp_path / "first" / "state_dict_last.pt", torch.device("cpu"))
    stats = saved["normalization_statistics"]
    assert set(stats) == {"observation"} and set(stats["observation"]) == {"mean", "std"}

    # envs that would estimate other statistics (another sampling seed) get the checkpoint's instead
    resumed = _trainer([lambda: _normalized_cartpole(99)], checkpoint_dir=tmp_path / "resumed", n_epochs=1,
                       n_rollouts_per_update=2, max_steps=10, eval_repeats=1)
    resumed.load_checkpoint(tmp_path / "first" / "state_dict_last.pt")
    resumed.train()
    resumed.close()
    again = read_checkpoint(tmp_path / "resumed" / "state_dict_last.pt", torch.device("cpu"))
    assert again["epoch"] == 2
    for name in ("mean", "std"):
        assert torch.equal(again["normalization_statistics"]["observation"][name], stats["observation"][name])
    other = _normalized_cartpole(99)
    other.reset(seed=0)
    assert not np.allclose(other.get_normalization_statistics()["observation"]["mean"],
                           stats["observation"]["mean"].numpy())


@pytest.mark.slow
def test_es_learns_cartpole_with_two_workers(tmp_path: Path) -> None:
    start = time.perf_counter()
    trainer = _trainer([cartpole_factory] * 2, seed=LEARNING_SEED, checkpoint_dir=tmp_path, n_epochs=40)
    critic_before = [p.detach().clone() for p in trainer.model.critic.parameters()]
    untrained = trainer.evaluate(deterministic=True, repeats=10, seed=trainer.eval_seed)
    assert untrained < 100, untrained  # the initial policy of this seed is far from solving CartPole

    def stop_when_solved(t: ES, stats: Any) -> None:
        if t.last_eval_reward >= 195:
            t.request_stop()

    trainer.callbacks.append(stop_when_solved)
    try:
        trainer.train()
    finally:
        trainer.close()
    print(f"ES CartPole: {trainer.epoch} epochs, {trainer.env_steps} env steps, "
          f"{time.perf_counter() - start:.1f} s")
    # a deterministic evaluation of 10 episodes reached the threshold
    assert trainer.last_eval_reward >= 195, trainer.last_eval_reward
    assert trainer.model_selection.best_reward >= 195
    # the training episodes' statistics reached `train`, the ES statistics their topic
    train_reward = trainer.env.get_stats()[StatKey(BaseEnvEvents.reward, "mean", None)]
    assert train_reward > 0
    # ES trains the policy only: the critic of the model is untouched
    assert all(torch.equal(p, before) for p, before in zip(trainer.model.critic.parameters(), critic_before,
                                                             strict=True))
    state = read_checkpoint(tmp_path / "state_dict_last.pt", torch.device("cpu"))
    assert state["trainer"] == "ES" and state["noise_table_seed"] == LEARNING_SEED
    assert torch.count_nonzero(state["optimizer"]["state"][0]["exp_avg"]) > 0
    assert not _es_workers_alive()


@pytest.mark.slow
def test_a_run_through_the_run_layer_writes_stats_and_checkpoints_and_resumes(tmp_path: Path) -> None:
    overrides = {"env.name": "CartPole-v1", "log_base_dir": str(tmp_path), "n_epochs": 2, "seed": 3,
                 "algorithm.shared_noise_table_size": 1_000_000, "algorithm.eval_repeats": 2,
                 "algorithm.max_steps": 100}
    rc = RunContext(algorithm="es", overrides=overrides, silent=True)
    rc.train()
    try:
        assert type(rc.trainer).__name__ == "ES" and len(rc.trainer.env_factories) == 2  # runner.concurrency
        stats = rc.stats
        es_events = set(stats[stats.topic == "ESEvents"].event)
        assert {"perturbed_return_mean", "perturbed_return_max", "update_norm", "update_ratio", "weight_norm",
                "n_episodes", "n_env_steps", "time_update"} <= es_events
        train_rewards = stats[(stats.prefix == "train") & (stats.event == "reward") & (stats.name == "mean")]
        assert sorted(train_rewards.epoch) == [1, 2]
        episodes = stats[(stats.topic == "ESEvents") & (stats.event == "n_episodes")]
        assert (episodes.value >= 10).all()
        checkpoints = rc.run_dir / "checkpoints"
        assert (checkpoints / "state_dict_last.pt").is_file() and (checkpoints / "state_dict_best.pt").is_file()
    finally:
        rc.close()
    assert not _es_workers_alive()
    # the workers flushed their envs' event logs as they closed
    assert list((rc.run_dir / "event_logs").glob("train_*/*.tsv"))

    resumed = RunContext(algorithm="es", overrides={**overrides, "n_epochs": 1, "input_dir": str(rc.run_dir)},
                         silent=True)
    try:
        resumed.train()
        assert resumed.trainer.epoch == 3 and resumed.trainer.updates == 3
    finally:
        resumed.close()


def test_es_plays_the_masked_structured_cutting2d_env() -> None:
    """Episodes of a structured env (two sub-steps per env step, action masks) follow the env's actors on the
    workers: every perturbed episode is a whole Cutting-2D episode (180 env steps, 360 agent actions) and its reward
    reaches the train statistics. Not a learning test: with greedy perturbed policies most pairs tie on this
    discrete env (seeds 0 and 1 stay at the untrained -180 for 4 updates, seed 2 finds the optimum -30 at once)."""
    from cutting2d_training import masked_env_factory
    from omegaconf import OmegaConf

    import maze_lab.examples.cutting2d as cutting2d
    from maze_lab.agent.composers import build_model_composer

    env = masked_env_factory()
    model_cfg = OmegaConf.to_container(OmegaConf.load(Path(cutting2d.__file__).parent / "conf" / "model" /
                                                      "cutting2d_struct_masked_slots.yaml"))
    torch.manual_seed(0)
    model = build_model_composer(model_cfg, env.action_spaces_dict, env.observation_spaces_dict,
                                 env.agent_counts_dict).actor_critic()
    config = ESAlgorithmConfig(n_epochs=2, n_rollouts_per_update=4, shared_noise_table_size=1_000_000, seed=0,
                               patience=0, eval_repeats=1)
    evaluator = RolloutEvaluator(SequentialVectorEnv([masked_env_factory], logging_prefix="eval", writers=[]),
                                 n_episodes=1, deterministic=True)
    trainer = ES(config, model, env_factories=[masked_env_factory] * 2, evaluator=evaluator, writers=[])
    epochs: list[Any] = []
    trainer.callbacks.append(lambda t, stats: epochs.append(stats))
    try:
        trainer.train()
    finally:
        trainer.close()
    assert trainer.updates == 2 and len(epochs) == 2
    episodes = [stats[StatKey(BaseEnvEvents.reward, "episode_count", None)] for stats in epochs]
    assert episodes == [4, 4]
    assert trainer.env_steps == 8 * 360  # agent actions: two sub-steps in each of an episode's 180 env steps
    assert all(stats[StatKey(BaseEnvEvents.reward, "mean_step_count", None)] == 180 for stats in epochs)
