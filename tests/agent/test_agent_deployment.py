"""AgentDeployment: a trained run's policy with its wrapper stack, called by an environment outside maze-lab.

The outside environment here is a plain Gymnasium CartPole-v1 that maze-lab never steps: it calls
``deployment.act(state, reward, done, info)`` and applies the returned action itself."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from maze_lab.agent.deployment import AgentDeployment, DeploymentError
from maze_lab.agent.heuristic_policy import DummyCartPolePolicy
from maze_lab.core.log_stats.aggregation import stats_value
from maze_lab.core.log_stats.base_events import BaseEnvEvents
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.run.run_context import RunContext
from maze_lab.run.runs import load_run


@pytest.fixture(scope="module")
def normalized_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PPO run on CartPole-v1 with observation normalization (its statistics are part of what is deployed)."""
    torch.set_num_threads(1)
    base = tmp_path_factory.mktemp("runs")
    rc = RunContext(algorithm="ppo", wrappers="observation_normalization",
                    overrides={"env.name": "CartPole-v1", "log_base_dir": str(base), "runner.concurrency": 2,
                               "algorithm.n_epochs": 2, "algorithm.epoch_length": 4, "algorithm.n_rollout_steps": 64,
                               "algorithm.lr": 3e-3, "algorithm.eval_repeats": 1,
                               "wrappers.ObservationNormalizationWrapper.n_samples": 200},
                    runner="dev", silent=True)
    rc.train()
    run_dir = Path(rc.run_dir)
    rc.close()
    return run_dir


def _drive(deployment: AgentDeployment, seed: int) -> tuple[list[int], float]:
    """One episode of an outside CartPole-v1 that asks the deployment for each action."""
    external = gym.make("CartPole-v1")
    state, _ = external.reset(seed=seed)
    reward, done, truncated, actions, total = 0.0, False, False, [], 0.0
    while not (done or truncated):
        action = deployment.act(state, reward, done)
        actions.append(int(action))
        state, reward, done, truncated, _ = external.step(action)
        total += reward
    assert deployment.act(state, reward, done, truncated=truncated) is None  # the episode ends
    return actions, total


def _direct_rollout(run_dir: Path, seed: int) -> list[int]:
    """The same run's policy stepping the same env stack directly (maze-lab's own loop)."""
    run = load_run(run_dir)
    policy, env = run.policy("best"), run.env_factory().build_env()
    obs, _ = env.reset(seed=seed)
    actions, done = [], False
    while not done:
        action = policy.compute_action(obs, deterministic=True)
        actions.append(int(np.asarray(action["action"]).reshape(())))
        obs, _, terminated, truncated, _ = env.step(action)
        done = terminated or truncated
    env.close()
    return actions


def test_a_deployed_run_acts_as_its_direct_rollout_on_the_same_seed(normalized_run: Path) -> None:
    with pytest.raises(TypeError, match=r"takes a loaded run, not the path .*load_run\(run_dir\)\.deployment\(\)"):
        AgentDeployment.from_run(normalized_run)
    deployment = AgentDeployment.from_run(load_run(normalized_run))
    for seed in (3, 4):
        deployed, _ = _drive(deployment, seed)
        direct = _direct_rollout(normalized_run, seed)
        assert deployed == direct
        assert len(set(direct)) == 2  # both actions occur: a constant policy would match trivially
    deployment.close()


def test_the_wrapper_stack_is_part_of_the_deployment(normalized_run: Path) -> None:
    """Without the run's observation normalization the same weights act differently: the deployment must keep it."""
    run = load_run(normalized_run)
    with_stack = run.deployment()
    without = AgentDeployment(run.policy("best"), GymMazeEnv("CartPole-v1"))
    assert _drive(with_stack, 3)[0] != _drive(without, 3)[0]
    with_stack.close()
    without.close()


def test_episodes_in_a_row_give_statistics_and_event_logs(tmp_path: Path) -> None:
    deployment = AgentDeployment(DummyCartPolePolicy(), GymMazeEnv("CartPole-v1"), event_log_dir=tmp_path / "logs")
    returns = [_drive(deployment, seed)[1] for seed in (0, 1, 2)]
    assert deployment.n_episodes == 3
    assert stats_value(deployment.episode_stats, BaseEnvEvents.reward) == returns[-1]
    stats = deployment.close()
    assert stats_value(stats, BaseEnvEvents.reward, "episode_count") == 3
    assert stats_value(stats, BaseEnvEvents.reward, "mean") == pytest.approx(np.mean(returns))
    assert stats_value(stats, BaseEnvEvents.reward, "total_step_count") == deployment.n_actions
    logs = list((tmp_path / "logs").glob("*.tsv"))
    assert logs, "no event logs written"
    episode_ids = {line.split("\t")[0] for f in logs for line in f.read_text().splitlines()[1:]}
    assert len(episode_ids) == 3


def test_close_in_the_middle_of_an_episode_records_it_and_ends_the_deployment() -> None:
    deployment = AgentDeployment(DummyCartPolePolicy(), GymMazeEnv("CartPole-v1"))
    _drive(deployment, 0)
    external = gym.make("CartPole-v1")
    state, _ = external.reset(seed=1)
    reward = 0.0
    for _ in range(7):
        state, reward, *_ = external.step(deployment.act(state, reward))
    stats = deployment.close(state, reward, done=False)  # the outside episode goes on: it counts as cut here
    assert stats_value(stats, BaseEnvEvents.reward, "episode_count") == 2
    assert stats_value(stats, BaseEnvEvents.reward, "min") == 7.0
    assert deployment.n_actions == 500 + 7
    with pytest.raises(RuntimeError, match="closed"):
        deployment.act(np.zeros(4, np.float32))


def test_close_without_the_last_state_records_what_the_deployment_saw() -> None:
    deployment = AgentDeployment(DummyCartPolePolicy(), GymMazeEnv("CartPole-v1"))
    external = gym.make("CartPole-v1")
    state, _ = external.reset(seed=1)
    reward = 0.0
    for _ in range(7):
        state, reward, *_ = external.step(deployment.act(state, reward))
    stats = deployment.close()  # the reward of the 7th action never reached the deployment
    assert stats_value(stats, BaseEnvEvents.reward, "episode_count") == 1
    assert stats_value(stats, BaseEnvEvents.reward, "mean") == 6.0


def test_a_failing_policy_reaches_the_caller_with_its_traceback() -> None:
    class Broken(DummyCartPolePolicy):
        def compute_action(self, *args, **kwargs):
            raise KeyError("no such sensor")

    deployment = AgentDeployment(Broken(), GymMazeEnv("CartPole-v1"))
    with pytest.raises(DeploymentError, match=r"(?s)Traceback.*compute_action.*no such sensor"):
        deployment.act(np.zeros(4, np.float32))
    with pytest.raises(DeploymentError, match="failed earlier"):
        deployment.act(np.zeros(4, np.float32))
    deployment.close()


def test_bad_use_is_refused_with_what_would_be_right() -> None:
    deployment = AgentDeployment(DummyCartPolePolicy(), GymMazeEnv("CartPole-v1"))
    with pytest.raises(ValueError, match="first state of an episode"):
        deployment.act(np.zeros(4, np.float32), 0.0, True)
    deployment.close()
    with pytest.raises(TypeError, match="needs a maze-lab env"):
        AgentDeployment(DummyCartPolePolicy(), gym.make("CartPole-v1"))
    # estimating normalization statistics would send random actions to the outside environment
    with pytest.raises(ValueError, match="no normalization statistics.*random actions"):
        AgentDeployment(DummyCartPolePolicy(), GymMazeEnv("CartPole-v1"),
                        wrappers={"ObservationNormalizationWrapper": {"n_samples": 100}})
