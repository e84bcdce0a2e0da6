"""IMPALA: V-trace against a direct computation of the paper's definition, on-policy V-trace as n-step returns,
learning on CartPole-v1 (through RunContext) and on the masked structured Cutting-2D env, the policy lag staying
bounded because actors pick up new weights, and actor failures (an exception, a signal) reported by the learner
instead of a hang."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from cutting2d_training import OPTIMUM_REWARD, masked_env_factory
from omegaconf import OmegaConf
from training_utils import cartpole_factory, flat_actor_critic

from maze_lab.agent.composers import build_model_composer
from maze_lab.examples.cutting2d import CONF_DIR
from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
from maze_lab.train.trainers.impala import IMPALA, ImpalaAlgorithmConfig
from maze_lab.train.trainers.impala.actors import ImpalaActorError
from maze_lab.train.trainers.impala.events import ImpalaEvents
from maze_lab.train.trainers.impala.vtrace import clip_rewards, vtrace
from maze_lab.train.vector_env import SequentialVectorEnv


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


# ---- V-trace ----------------------------------------------------------------------------------------------------

def _by_definition(mu_log: np.ndarray, pi_log: np.ndarray, r: np.ndarray, v: np.ndarray, v_boot: np.ndarray,
                   g: np.ndarray, rho_bar: float | None, pg_rho_bar: float | None, c_bar: float | None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The paper's v_s as the explicit sum over the trajectory (no recursion), and its advantages, one column at a
    time in float64."""
    T, B = r.shape
    ratio = np.exp(pi_log - mu_log)
    rho = ratio if rho_bar is None else np.minimum(rho_bar, ratio)
    c = ratio if c_bar is None else np.minimum(c_bar, ratio)
    pg_rho = ratio if pg_rho_bar is None else np.minimum(pg_rho_bar, ratio)
    vs = np.zeros((T, B))
    adv = np.zeros((T, B))
    for b in range(B):
        values = np.append(v[:, b], v_boot[b])
        for s in range(T):
            total = values[s]
            for t in range(s, T):
                weight = 1.0
                for i in range(s, t):  # prod of the discounts and trace coefficients before t
                    weight *= g[i, b] * c[i, b]
                delta = rho[t, b] * (r[t, b] + g[t, b] * values[t + 1] - values[t])
                total += weight * delta
            vs[s, b] = total
    for b in range(B):
        next_vs = np.append(vs[1:, b], v_boot[b])
        adv[:, b] = pg_rho[:, b] * (r[:, b] + g[:, b] * next_vs - v[:, b])
    return vs, adv


def _random_batch(seed: int, T: int = 7, B: int = 3, terminations: bool = True):
    rng = np.random.default_rng(seed)
    mu_log = np.log(rng.uniform(0.05, 1.0, (T, B)))
    pi_log = np.log(rng.uniform(0.05, 1.0, (T, B)))  # ratios from about 0.05 to 20: some clipped, some not
    r = rng.normal(size=(T, B))
    v = rng.normal(size=(T, B))
    v_boot = rng.normal(size=B)
    g = np.full((T, B), 0.9)
    if terminations:
        g[2, 0] = 0.0  # an episode ends at step 2 of trajectory 0, and at the last step of trajectory 1
        g[T - 1, 1] = 0.0
    return mu_log, pi_log, r, v, v_boot, g


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(a, dtype=torch.float64)


@pytest.mark.parametrize("thresholds", [(1.0, 1.0, 1.0), (0.5, 2.0, 0.8), (None, None, None)])
def test_vtrace_equals_the_papers_definition_with_clipping_and_terminations(thresholds) -> None:
    rho_bar, pg_rho_bar, c_bar = thresholds
    mu_log, pi_log, r, v, v_boot, g = _random_batch(seed=3)
    ratios = np.exp(pi_log - mu_log)
    assert (ratios > 1.0).any() and (ratios < 0.5).any()  # the clipping matters in this batch
    out = vtrace(_t(mu_log), _t(pi_log), _t(r), _t(v), _t(v_boot), _t(g), rho_bar, pg_rho_bar, c_bar)
    vs, adv = _by_definition(mu_log, pi_log, r, v, v_boot, g, rho_bar, pg_rho_bar, c_bar)
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out.pg_advantages.numpy(), adv, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out.rhos.numpy(), ratios, rtol=1e-12)
    # a termination cuts the trace: v_2 of trajectory 0 sees only its own reward
    rho2 = ratios[2, 0] if rho_bar is None else min(rho_bar, ratios[2, 0])
    assert out.vs[2, 0].item() == pytest.approx(v[2, 0] + rho2 * (r[2, 0] - v[2, 0]), abs=1e-12)


def test_on_policy_vtrace_is_the_n_step_return() -> None:
    """rho = 1 everywhere: v_s is the discounted return to the end of the trajectory, bootstrapped with V(x_T)
    (cut where an episode ended), whatever the thresholds >= 1; the advantage is r_s + g_s v_{s+1} - V(x_s)."""
    mu_log, _, r, v, v_boot, g = _random_batch(seed=5, T=9, B=4)
    T, B = r.shape
    returns = np.zeros((T, B))
    running = v_boot.copy()
    for s in reversed(range(T)):
        running = r[s] + g[s] * running
        returns[s] = running
    for thresholds in ((1.0, 1.0, 1.0), (None, None, None), (3.0, 2.0, 1.0)):
        out = vtrace(_t(mu_log), _t(mu_log), _t(r), _t(v), _t(v_boot), _t(g), *thresholds)
        np.testing.assert_allclose(out.vs.numpy(), returns, rtol=1e-10, atol=1e-10)
        next_returns = np.concatenate([returns[1:], v_boot[None]])
        np.testing.assert_allclose(out.pg_advantages.numpy(), r + g * next_returns - v, rtol=1e-10, atol=1e-10)


def test_vtrace_refuses_mismatched_shapes() -> None:
    x = torch.zeros(4, 2)
    with pytest.raises(ValueError, match=r"bootstrap_value must have the shape \(B,\) = \(2,\)"):
        vtrace(x, x, x, x, torch.zeros(3), x)
    with pytest.raises(ValueError, match="one shape"):
        vtrace(x, x, torch.zeros(4, 3), x, torch.zeros(2), x)


def test_reward_clipping() -> None:
    r = torch.tensor([-10.0, -0.5, 0.0, 0.5, 10.0])
    assert clip_rewards(r, "None") is r
    assert clip_rewards(r, "abs_one").tolist() == [-1.0, -0.5, 0.0, 0.5, 1.0]
    soft = clip_rewards(r, "soft_asymmetric")
    expected = [0.3 * 5 * np.tanh(-2.0), 0.3 * 5 * np.tanh(-0.1), 0.0, 5 * np.tanh(0.1), 5 * np.tanh(2.0)]
    np.testing.assert_allclose(soft.numpy(), expected, rtol=1e-6)
    with pytest.raises(ValueError, match="reward_clipping"):
        ImpalaAlgorithmConfig(reward_clipping="clip")


# ---- learning ---------------------------------------------------------------------------------------------------

def test_impala_learns_cartpole_through_the_run_context(tmp_path: Path) -> None:
    """Two actor processes (four actors) and the learner reach an evaluation of 195 on CartPole-v1; the run writes
    its statistics (the actors' episodes under train, the policy lag), checkpoints and the actors' event logs, and
    resumes from its directory in the background."""
    from maze_lab.run.run_context import RunContext

    overrides = {
        "env.name": "CartPole-v1", "log_base_dir": str(tmp_path), "seed": 0, "runner.eval_concurrency": 4,
        "algorithm.num_actors": 4, "algorithm.actor_processes": 2, "algorithm.actors_batch_size": 8,
        "algorithm.n_rollout_steps": 32, "algorithm.lr": 0.003, "algorithm.entropy_coef": 0.0,
        "algorithm.epoch_length": 10, "algorithm.eval_repeats": 4, "algorithm.deterministic_eval": True,
        "algorithm.patience": 0}
    rc = RunContext(algorithm="impala", overrides=overrides, silent=True)
    rewards: list[float] = []

    def stop_at_195(trainer, _stats) -> None:
        rewards.append(trainer.last_eval_reward)
        if trainer.last_eval_reward >= 195:
            trainer.request_stop()

    try:
        trainer = rc.trainer
        assert type(trainer).__name__ == "IMPALA" and trainer.n_actor_processes == 2
        trainer.callbacks.append(stop_at_195)
        rc.train(n_epochs=30)
        processes = list(trainer.actors.processes)
    finally:
        rc.close()
    print(f"IMPALA CartPole-v1 evaluations: {rewards}")
    assert max(rewards) >= 195, rewards
    assert not any(p.is_alive() for p in processes)  # close() ended the actor processes
    stats = rc.stats
    train = stats[stats.prefix == "train"]
    assert (train[(train.event == "reward") & (train.name == "mean")].value > 0).all()  # the actors' episodes
    lags = train[train.event == "policy_lag"].value
    assert len(lags) == trainer.epoch and (lags >= 0).all()
    assert trainer.env_steps == trainer.updates * 8 * 32
    checkpoints = sorted(p.name for p in rc.run_dir.rglob("state_dict_*.pt"))
    assert checkpoints == ["state_dict_best.pt", "state_dict_last.pt"]
    # the actors flushed their envs' event logs as they stopped: every episode whose statistics reached the learner
    # is in them (an actor process that a loaded machine started late may have finished none, and leaves no log)
    logs = sorted((rc.run_dir / "event_logs").glob("train_*/BaseEnvEvents.reward.tsv"))
    assert logs and {p.parent.name for p in logs} <= {"train_0", "train_1", "train_2", "train_3"}
    logged = {(p.parent.name, line.split("\t", 1)[0]) for p in logs for line in p.read_text().splitlines()[1:]}
    received = train[(train.event == "reward") & (train.name == "total_episode_count")].value
    assert len(logged) >= int(received.max()) > 0, (len(logged), received.max())

    # resumed from the run directory, in the background: one more epoch on top of the checkpoint
    resumed = RunContext(algorithm="impala", overrides={**overrides, "input_dir": str(rc.run_dir)}, silent=True)
    try:
        assert resumed.train_async(n_epochs=1).wait() == "done"
        assert resumed.trainer.epoch == trainer.epoch + 1 and resumed.trainer.updates == trainer.updates + 10
    finally:
        resumed.close()
    assert not any(p.is_alive() for p in resumed.trainer.actors.processes)


def _masked_impala(seed: int, n_epochs: int, lr: float = 6e-3) -> IMPALA:
    torch.manual_seed(seed)
    env = masked_env_factory()
    model_cfg = OmegaConf.to_container(OmegaConf.load(f"{CONF_DIR}/model/cutting2d_struct_masked_slots.yaml"))
    composer = build_model_composer(model_cfg, env.action_spaces_dict, env.observation_spaces_dict,
                                    env.agent_counts_dict)
    config = ImpalaAlgorithmConfig(n_epochs=n_epochs, epoch_length=2, n_rollout_steps=64, actors_batch_size=8,
                                   num_actors=8, actor_processes=2, lr=lr, entropy_coef=0.0, max_grad_norm=0.5,
                                   seed=seed, patience=0, eval_repeats=1, deterministic_eval=True)
    evaluator = RolloutEvaluator(SequentialVectorEnv([masked_env_factory], logging_prefix="eval", writers=[]),
                                 n_episodes=1, deterministic=True)
    return IMPALA(config, composer.actor_critic(), env_factories=[masked_env_factory] * 8, evaluator=evaluator,
                  writers=[])


def test_impala_learns_the_masked_structured_cutting2d_env() -> None:
    """Two policy keys (piece selection, cutting) with action masks; the untrained deterministic policy takes a raw
    piece every step (-180), IMPALA gets to the optimum of 31 raw pieces."""
    trainer = _masked_impala(seed=0, n_epochs=60)
    start = trainer.evaluate(seed=trainer.eval_seed)
    assert start <= 4 * OPTIMUM_REWARD
    rewards: list[float] = []

    def stop_at_optimum(tr, _stats) -> None:
        rewards.append(tr.last_eval_reward)
        if tr.last_eval_reward >= OPTIMUM_REWARD:
            tr.request_stop()

    trainer.callbacks.append(stop_at_optimum)
    try:
        trainer.train()
        # both policy keys were trained: their statistics are there
        keys = {k.group for k in trainer.stats_aggregator.last_stats if k.event is ImpalaEvents.policy_loss}
    finally:
        trainer.close()
    assert max(rewards) >= OPTIMUM_REWARD, rewards
    assert len(keys) == 2, keys


def test_actors_pick_up_new_weights_so_the_policy_lag_stays_bounded() -> None:
    """Without new weights the lag would grow with every update (30 here); with them it stays below what the queue
    and the trajectories in flight allow."""
    config = ImpalaAlgorithmConfig(n_epochs=1, epoch_length=30, n_rollout_steps=8, actors_batch_size=2, num_actors=2,
                                   actor_processes=1, lr=1e-3, seed=0, patience=0)
    torch.manual_seed(0)
    trainer = IMPALA(config, flat_actor_critic(cartpole_factory()), env_factories=[cartpole_factory] * 2,
                     writers=[])
    lags: list[float] = []
    original = trainer.learn

    def learn_and_note(batch):
        lags.extend(trainer.updates - t.version for t in batch)
        return original(batch)

    trainer.learn = learn_and_note
    try:
        trainer.train()
    finally:
        trainer.close()
    assert trainer.updates == 30 and len(lags) == 60
    # queue of 2, 2 actors in one process: a trajectory waits behind at most (2 + 2) others, i.e. 2 updates, plus
    # the update under way while its actor read the weights
    bound = (config.queue_size + config.num_actors) / config.actors_batch_size + 1
    assert max(lags) <= bound, lags
    assert min(lags) >= 0


# ---- failures ---------------------------------------------------------------------------------------------------

def _small_impala(factories, processes: int = 1) -> IMPALA:
    config = ImpalaAlgorithmConfig(n_epochs=3, epoch_length=2, n_rollout_steps=8, actors_batch_size=2,
                                   num_actors=len(factories), actor_processes=processes, seed=0, patience=0,
                                   actor_start_timeout=120.0)
    torch.manual_seed(0)
    return IMPALA(config, flat_actor_critic(cartpole_factory()), env_factories=factories, writers=[])


def test_an_actors_exception_reaches_the_learner_with_its_traceback() -> None:
    def broken_env():  # pickled by value: the actor process builds it
        env = cartpole_factory()
        step = env.step
        count = [0]

        def failing_step(action):
            count[0] += 1
            if count[0] == 5:
                raise RuntimeError("the broken test env fails at its 5th step")
            return step(action)

        env.step = failing_step
        return env

    trainer = _small_impala([broken_env])
    assert trainer.actors is None  # nothing is started before training
    with pytest.raises(ImpalaActorError) as info:
        trainer.train()
    message = str(info.value)
    assert "IMPALA actor process 0" in message and "Traceback (most recent call last)" in message
    assert "RuntimeError: the broken test env fails at its 5th step" in message and "failing_step" in message
    assert not any(p.is_alive() for p in trainer.actors.processes)  # the failure shut the actors down
    trainer.close()  # idempotent after the shutdown


def test_an_actor_killed_by_a_signal_is_named_instead_of_a_hang() -> None:
    trainer = _small_impala([cartpole_factory] * 2, processes=2)

    def kill_actor_process_1(tr, _stats) -> None:
        if tr.epoch == 1:
            proc = tr.actors.processes[1]
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(30)
            assert proc.exitcode == -signal.SIGKILL

    trainer.callbacks.append(kill_actor_process_1)
    with pytest.raises(ImpalaActorError, match=r"IMPALA actor process 1 \(pid \d+, actors \[1\]\) died: signal 9 "
                                               r"\(SIGKILL\)"):
        trainer.train()
    assert trainer.epoch == 1
    assert not any(p.is_alive() for p in trainer.actors.processes)
    trainer.close()


def test_config_checks_and_the_queue_size() -> None:
    assert ImpalaAlgorithmConfig().queue_size == 8
    assert ImpalaAlgorithmConfig(queue_out_of_sync_factor=0.1, actors_batch_size=4).queue_size == 1
    with pytest.raises(ValueError, match="actors_batch_size must be >= 1"):
        ImpalaAlgorithmConfig(actors_batch_size=0)
    with pytest.raises(ValueError, match="needs one env factory per actor"):
        IMPALA(ImpalaAlgorithmConfig(), flat_actor_critic(cartpole_factory()), env_factories=[])
