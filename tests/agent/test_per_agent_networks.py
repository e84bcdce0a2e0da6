"""One policy key with two agents and ``substeps_with_separate_agent_nets``: each agent acts with, and trains, its
own network (Maze's "each agent acts according to its distinct policy network") in PPO, A2C and IMPALA."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from maze_lab.agent.composers import CustomModelComposer
from maze_lab.core.env.core_env import CoreEnv
from maze_lab.core.env.interfaces import ActionConversionInterface, ObservationConversionInterface
from maze_lab.core.env.maze_env import MazeEnv
from maze_lab.core.env.structured_env import ActorID, StepKey
from maze_lab.train.process_rollouts import ProcessEnvGroup, ProcessRolloutGenerator
from maze_lab.train.trainers.a2c import A2C
from maze_lab.train.trainers.common.config import A2CAlgorithmConfig, PPOAlgorithmConfig
from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
from maze_lab.train.trainers.common.rollout import RolloutGenerator
from maze_lab.train.trainers.impala import IMPALA, ImpalaAlgorithmConfig
from maze_lab.train.trainers.ppo import PPO
from maze_lab.train.vector_env import SequentialVectorEnv, SubprocVectorEnv

FULL_STEPS = 4
BEST_JOB = (1, 2)
"""The job each worker is best at: agent 0 earns 1 for job 1, agent 1 for job 2, anything else earns 0."""
OPTIMUM = FULL_STEPS * len(BEST_JOB)
"""Both workers at their best job every step. One network for both (the observation does not tell them apart)
reaches at most half of it: the probabilities of jobs 1 and 2 sum to at most 1."""


class TwoWorkersCoreEnv(CoreEnv):
    """Two workers (agents 0 and 1 of policy key 0) pick one of 4 jobs in turn, for ``FULL_STEPS`` full steps; the
    maze state (the full steps taken) is the same for both."""

    def __init__(self, sub_steps: int = 2 * FULL_STEPS) -> None:
        super().__init__()
        self.sub_steps = sub_steps
        self.agent, self.full_steps, self.taken = 0, 0, 0

    def step(self, maze_action: int) -> tuple[Any, float, bool, bool, dict]:
        """The acting worker takes a job; after worker 1 the full step ends."""
        reward = float(maze_action == BEST_JOB[self.agent])
        self.agent = 1 - self.agent
        self.taken += 1
        if self.agent == 0:
            self.full_steps += 1
        return self.full_steps, reward, self.taken >= self.sub_steps, False, {}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> int:
        """Worker 0 acts first."""
        self.agent, self.full_steps, self.taken = 0, 0, 0
        return 0

    def get_maze_state(self) -> int:
        """Full steps taken."""
        return self.full_steps

    def actor_id(self) -> ActorID:
        """Workers 0 and 1 of key 0 in turn."""
        return ActorID(0, self.agent)

    @property
    def agent_counts_dict(self) -> dict[StepKey, int]:
        """Two workers on one policy key."""
        return {0: 2}


class _JobAction(ActionConversionInterface):
    def space_to_maze(self, action: dict, maze_state: Any) -> int:
        return int(action["job"])

    def maze_to_space(self, maze_action: int) -> dict:
        return {"job": maze_action}

    def space(self) -> gym.spaces.Dict:
        return gym.spaces.Dict({"job": gym.spaces.Discrete(4)})


class _TimeLeft(ObservationConversionInterface):
    def maze_to_space(self, maze_state: int) -> dict:
        return {"time_left": np.array([1.0 - maze_state / FULL_STEPS], dtype=np.float32)}

    def space(self) -> gym.spaces.Dict:
        return gym.spaces.Dict({"time_left": gym.spaces.Box(0.0, 1.0, (1,), np.float32)})


def two_workers() -> MazeEnv:
    """A factory of the env (picklable: IMPALA's actors build it in their processes)."""
    return MazeEnv(TwoWorkersCoreEnv(), {0: _JobAction()}, {0: _TimeLeft()})


def two_workers_short() -> MazeEnv:
    """The env ending after worker 0's sub-step of the last full step: beside ``two_workers`` in a vector env,
    different agents act in different envs at the same time after the first episode."""
    return MazeEnv(TwoWorkersCoreEnv(2 * FULL_STEPS - 1), {0: _JobAction()}, {0: _TimeLeft()})


FACTORIES = [two_workers, two_workers_short] * 2


def _model(separate: bool, seed: int = 0) -> Any:
    env = two_workers()
    torch.manual_seed(seed)
    return CustomModelComposer(
        env.action_spaces_dict, env.observation_spaces_dict, agent_counts_dict=env.agent_counts_dict,
        policy={"_target_": "ProbabilisticPolicyComposer",
                "networks": [{"_target_": "FlattenConcatPolicyNet", "hidden_units": [16]}],
                "substeps_with_separate_agent_nets": [0] if separate else []},
        critic={"_target_": "SharedStateCriticComposer",
                "networks": [{"_target_": "FlattenConcatStateValueNet", "hidden_units": [16]}]}).actor_critic()


def _greedy_score(policy: Any) -> float:
    """The episode reward when every agent takes its network's most likely job."""
    env = two_workers()
    obs, _ = env.reset()
    total, done = 0.0, False
    while not done:
        action = policy.compute_action(obs, actor_id=env.actor_id(), deterministic=True)
        obs, reward, terminated, truncated, _ = env.step(action)
        total, done = total + reward, terminated or truncated
    return total


def _weights(policy: Any) -> dict[Any, list[torch.Tensor]]:
    return {key: [p.detach().clone() for p in net.parameters()] for key, net in policy.networks.items()}


def _train(algorithm: str, separate: bool) -> Any:
    model = _model(separate)
    if algorithm == "impala":
        config = ImpalaAlgorithmConfig(n_epochs=6, epoch_length=5, n_rollout_steps=16, actors_batch_size=4,
                                       num_actors=4, actor_processes=1, lr=0.01, entropy_coef=0.0, seed=0,
                                       patience=0, eval_repeats=1)
        trainer = IMPALA(config, model, env_factories=FACTORIES, writers=[])
    else:
        if algorithm == "ppo-processes":  # the envs in 2 worker processes (runner=processes)
            env = ProcessEnvGroup(FACTORIES, n_workers=2, writers=[])
            generator = ProcessRolloutGenerator(env)
        else:
            env = SequentialVectorEnv(FACTORIES, logging_prefix="train", writers=[])
            generator = RolloutGenerator(env)
        if algorithm.startswith("ppo"):
            config = PPOAlgorithmConfig(n_epochs=4, epoch_length=5, n_rollout_steps=16, batch_size=32, lr=0.01,
                                        entropy_coef=0.0, seed=0, patience=0, eval_repeats=1)
            trainer = PPO(config, model, rollout_generator=generator, writers=[])
        else:
            config = A2CAlgorithmConfig(n_epochs=6, epoch_length=5, n_rollout_steps=16, lr=0.02, entropy_coef=0.0,
                                        seed=0, patience=0, eval_repeats=1)
            trainer = A2C(config, model, rollout_generator=generator, writers=[])
    before = _weights(model.policy)
    try:
        trainer.train()
    finally:
        (trainer if algorithm == "impala" else trainer.env).close()
    after = _weights(model.policy)
    change = {key: float(sum((a - b).abs().sum() for a, b in zip(after[key], before[key], strict=True)))
              for key in before}
    return model.policy, change


@pytest.mark.parametrize("algorithm", ["ppo", "a2c", "impala", "ppo-processes"])
def test_each_agent_trains_its_own_network(algorithm: str) -> None:
    policy, change = _train(algorithm, separate=True)
    assert set(change) == {ActorID(0, 0), ActorID(0, 1)}
    assert all(c > 0 for c in change.values()), change  # agent 1's network was trained too
    # each network learned its agent's job: the pair reaches the optimum, which one shared network cannot
    score = _greedy_score(policy)
    assert score == OPTIMUM, (score, change)
    # the evaluator acts with each env's agent's network (here the agents of the two envs differ after the first
    # episode): every episode is optimal, 8 (long env) or 7 (short env)
    evaluator = RolloutEvaluator(SequentialVectorEnv([two_workers, two_workers_short], logging_prefix="eval",
                                                     writers=[]), n_episodes=6, deterministic=True)
    with evaluator.eval_env:
        assert evaluator.evaluate(policy) >= OPTIMUM - 1


def test_a_shared_network_stays_below_the_pair_of_networks() -> None:
    """The reference: one network for both workers gets at most half of the optimum here."""
    policy, change = _train("ppo", separate=False)
    assert list(change) == [0] and change[0] > 0
    assert _greedy_score(policy) <= OPTIMUM / 2


def test_gamma_applies_once_per_full_env_step_with_several_agents_on_one_key() -> None:
    """Both workers act in one env step: the discount between worker 0's and worker 1's sub-steps of one env step
    is 1, gamma applies once per full env step (the README's rule). With lambda = 1 and one whole episode in the
    rollout, the returns are the discounted sums of the rewards, whatever the critic says."""
    from maze_lab.train.ray_rollouts import concatenate_rollouts
    from maze_lab.train.trainers.impala.actors import split_rollout

    gamma = 0.5
    config = PPOAlgorithmConfig(n_epochs=1, epoch_length=1, n_rollout_steps=2 * FULL_STEPS, batch_size=8, gamma=gamma,
                                gae_lambda=1.0, seed=0, patience=0, eval_repeats=1)
    env = SequentialVectorEnv([two_workers], logging_prefix="train", writers=[])
    trainer = PPO(config, _model(separate=True), env=env, writers=[])
    generator = trainer.rollout_generator
    generator.reset(0)
    # job 1 for everybody: worker 0 earns 1 in every env step, worker 1 nothing
    rollout = generator.rollout(trainer.policy, 2 * FULL_STEPS, sampler=lambda key, n: {"job": np.full(n, 1)})
    rewards = [float(r.reward[0]) for r in rollout.records]
    assert rewards == [1.0, 0.0] * FULL_STEPS and rollout.records[-1].terminated[0]
    full_step = [s // 2 for s in range(2 * FULL_STEPS)]
    expected = [sum(r * gamma ** (full_step[t] - full_step[s]) for t, r in enumerate(rewards) if t >= s)
                for s in range(2 * FULL_STEPS)]
    returns = trainer._prepare_batches(rollout)[0].returns.numpy()
    np.testing.assert_allclose(returns, expected, rtol=1e-5)
    # the same full steps reach IMPALA's discounts (one env's part of a rollout) and merged worker rollouts
    from maze_lab.train.trainers.common.actor_critic import full_step_ends

    ends = [False, True] * FULL_STEPS
    assert full_step_ends(rollout)[:, 0].tolist() == ends
    assert full_step_ends(split_rollout(rollout)[0])[:, 0].tolist() == ends
    assert full_step_ends(concatenate_rollouts([rollout, rollout])).tolist() == [[e, e] for e in ends]
    env.close()


def test_vector_envs_tell_the_agent_of_every_env() -> None:
    for venv in (SequentialVectorEnv([two_workers] * 2, writers=[]), SubprocVectorEnv([two_workers] * 2, writers=[])):
        with venv:
            venv.reset()
            assert venv.agent_ids().tolist() == [0, 0]
            venv.step({"job": np.array([0, 0])})
            assert venv.agent_ids().tolist() == [1, 1]
            assert venv.actor_ids() == [ActorID(0, 1), ActorID(0, 1)]


# --- agents that leave, each with its own policy key --------------------------------------------------------------
class LeavingCoreEnv(CoreEnv):
    """Worker 0 (policy key ``w0``) and worker 1 (``w1``) act in turn for ``FULL_STEPS`` full steps; worker 1 leaves
    after ``leave_after`` full steps (None: it stays)."""

    def __init__(self, leave_after: int | None) -> None:
        super().__init__()
        self.leave_after = leave_after
        self.key, self.full_steps = "w0", 0

    def step(self, maze_action: int) -> tuple[Any, float, bool, bool, dict]:
        """The acting worker takes a job."""
        reward = float(maze_action == BEST_JOB[self.key == "w1"])
        if self.key == "w0" and (self.leave_after is None or self.full_steps < self.leave_after):
            self.key = "w1"
        else:
            self.key = "w0"
            self.full_steps += 1
        return self.full_steps, reward, self.full_steps >= FULL_STEPS, False, {}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> int:
        """Worker 0 acts first."""
        self.key, self.full_steps = "w0", 0
        return 0

    def get_maze_state(self) -> int:
        """Full steps taken."""
        return self.full_steps

    def actor_id(self) -> ActorID:
        """The acting worker's policy key."""
        return ActorID(self.key, 0)

    @property
    def agent_counts_dict(self) -> dict[StepKey, int]:
        """One agent per policy key."""
        return {"w0": 1, "w1": 1}


def _leaving_env(leave_after: int | None) -> MazeEnv:
    return MazeEnv(LeavingCoreEnv(leave_after), {k: _JobAction() for k in ("w0", "w1")},
                   {k: _TimeLeft() for k in ("w0", "w1")})


def worker_1_leaves() -> MazeEnv:
    """Worker 1 leaves after the first full step."""
    return _leaving_env(1)


def worker_1_stays() -> MazeEnv:
    """Worker 1 stays to the end."""
    return _leaving_env(None)


def _leaving_model() -> Any:
    env = worker_1_stays()
    torch.manual_seed(0)
    return CustomModelComposer(
        env.action_spaces_dict, env.observation_spaces_dict, agent_counts_dict=env.agent_counts_dict,
        policy={"_target_": "ProbabilisticPolicyComposer",
                "networks": {"_target_": "FlattenConcatPolicyNet", "hidden_units": [8]}},
        critic={"_target_": "StepStateCriticComposer",
                "networks": {"_target_": "FlattenConcatStateValueNet", "hidden_units": [8]}}).actor_critic()


WORKAROUNDS = r"(?s)not supported with several envs in one vector env.*runner\.concurrency=1.*actor_processes=0"


def test_agents_with_own_policy_keys_that_leave_are_refused_naming_the_workarounds() -> None:
    from maze_lab.train.trainers.impala.actors import ImpalaActorError
    from maze_lab.train.vector_env import MixedPolicyKeysError

    config = PPOAlgorithmConfig(n_epochs=1, epoch_length=2, n_rollout_steps=8, batch_size=8, seed=0, patience=0,
                                eval_repeats=1)
    env = SequentialVectorEnv([worker_1_leaves, worker_1_stays], logging_prefix="train", writers=[])
    trainer = PPO(config, _leaving_model(), env=env, writers=[])
    with env, pytest.raises(MixedPolicyKeysError, match=WORKAROUNDS):
        trainer.train()
    with SubprocVectorEnv([worker_1_leaves, worker_1_stays], writers=[]) as subproc:
        generator = RolloutGenerator(subproc)
        with pytest.raises(MixedPolicyKeysError, match=WORKAROUNDS):
            generator.rollout(_leaving_model().policy, 8)
    # IMPALA with both actors in one process: the actor's error names the workarounds
    impala_config = ImpalaAlgorithmConfig(n_epochs=1, epoch_length=2, n_rollout_steps=8, actors_batch_size=2,
                                          num_actors=2, actor_processes=1, seed=0, patience=0, eval_repeats=1)
    impala = IMPALA(impala_config, _leaving_model(), env_factories=[worker_1_leaves, worker_1_stays], writers=[])
    try:
        with pytest.raises(ImpalaActorError, match=WORKAROUNDS):
            impala.train()
    finally:
        impala.close()
    # the workaround: one env per vector env trains
    single = SequentialVectorEnv([worker_1_leaves], logging_prefix="train", writers=[])
    with single:
        trainer = PPO(config, _leaving_model(), env=single, writers=[])
        trainer.train()
        assert trainer.epoch == 1


def test_the_gymnasium_adapter_names_the_acting_agent_of_a_shared_key() -> None:
    """One policy key shared by two agents has no 'actor' observation entry: the adapter names the agent that acts
    on each returned observation in info['actor'], and flat=True (one action per flat step) points there."""
    from maze_lab.core.wrappers.gymnasium_adapter import GymnasiumEnvAdapter

    adapter = GymnasiumEnvAdapter(two_workers())
    assert "actor" not in adapter.observation_space.spaces
    _, info = adapter.reset(seed=0)
    actors = [info["actor"]]
    for _ in range(3):
        _, reward, _, _, info = adapter.step({"job": BEST_JOB[actors[-1][1]]})
        assert reward == 1.0  # the agent named in info is the one that acted
        actors.append(info["actor"])
    assert actors == [(0, 0), (0, 1), (0, 0), (0, 1)]
    with pytest.raises(ValueError, match=r"one agent per policy key.*\{0: 2\}.*flat=False.*info\['actor'\]"):
        GymnasiumEnvAdapter(two_workers(), flat=True)
