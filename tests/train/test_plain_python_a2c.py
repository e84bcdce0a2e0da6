"""The plain-Python (low-level) A2C walk-through of the Maze docs, written with maze-lab's names."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import torch
from torch import nn

from maze_lab.agent.torch_actor_critic import TorchActorCritic
from maze_lab.agent.torch_policy import TorchPolicy
from maze_lab.agent.torch_state_critic import TorchSharedStateCritic
from maze_lab.core.log_stats.log_setup import clear_log_stats_writers, setup_logging
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.distributions.distribution_mapper import DistributionMapper
from maze_lab.perception.blocks.general import TorchModelBlock
from maze_lab.train.trainers.a2c import A2C, A2CAlgorithmConfig
from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
from maze_lab.train.trainers.common.model_selection import BestModelSelection
from maze_lab.train.trainers.common.rollout import RolloutGenerator
from maze_lab.train.vector_env import SequentialVectorEnv


def cartpole_env_factory() -> GymMazeEnv:
    """CartPole as a MazeEnv, from a Gymnasium instance."""
    return GymMazeEnv(env=gym.make("CartPole-v1"))


class CartpolePolicyNet(nn.Module):
    """A linear policy."""

    def __init__(self, obs_shapes: dict[str, Sequence[int]], action_logit_shapes: dict[str, Sequence[int]]):
        super().__init__()
        self.policy_network = nn.Linear(obs_shapes["observation"][0], action_logit_shapes["action"][0])

    def forward(self, x_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"action": self.policy_network(x_dict["observation"])}


class CartpoleValueNet(nn.Module):
    """A linear value function."""

    def __init__(self, obs_shapes: dict[str, Sequence[int]]):
        super().__init__()
        self.value_net = nn.Linear(obs_shapes["observation"][0], 1)

    def forward(self, x_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"value": self.value_net(x_dict["observation"])}


def test_low_level_a2c_walkthrough(tmp_path, capsys):
    torch.manual_seed(0)
    env = cartpole_env_factory()
    observation_space, action_space = env.observation_space, env.action_space
    obs_shape = observation_space.spaces["observation"].shape

    policy_net = CartpolePolicyNet({"observation": obs_shape}, {"action": (action_space.spaces["action"].n,)})
    policy_block = TorchModelBlock(in_keys="observation", out_keys="action", in_shapes=obs_shape, in_num_dims=[2],
                                   out_num_dims=2, net=policy_net)
    distribution_mapper = DistributionMapper(action_space=action_space, distribution_mapper_config=[
        {"action_space": gym.spaces.Discrete,
         "distribution": "maze_lab.distributions.categorical.CategoricalProbabilityDistribution"}])
    torch_policy = TorchPolicy(networks={0: policy_block}, distribution_mapper=distribution_mapper, device="cpu")

    value_block = TorchModelBlock(in_keys="observation", out_keys="value", in_shapes=obs_shape, in_num_dims=[2],
                                  out_num_dims=2, net=CartpoleValueNet({"observation": obs_shape}))
    torch_critic = TorchSharedStateCritic(networks={0: value_block}, obs_spaces_dict=env.observation_spaces_dict,
                                          device="cpu", stack_observations=False)
    actor_critic_model = TorchActorCritic(policy=torch_policy, critic=torch_critic, device="cpu")

    algorithm_config = A2CAlgorithmConfig(
        n_epochs=2, epoch_length=10, patience=15, critic_burn_in_epochs=0, n_rollout_steps=20, lr=0.0005,
        gamma=0.98, gae_lambda=1.0, policy_loss_coef=1.0, value_loss_coef=0.5, entropy_coef=0.00025,
        max_grad_norm=0.0, device="cpu",
        rollout_evaluator=RolloutEvaluator(eval_env=SequentialVectorEnv([cartpole_env_factory]), n_episodes=1,
                                           model_selection=None, deterministic=True))
    train_envs = SequentialVectorEnv([cartpole_env_factory for _ in range(2)], logging_prefix="train")
    model_selection = BestModelSelection(dump_file=tmp_path / "params.pt", model=actor_critic_model)
    a2c_trainer = A2C(rollout_generator=RolloutGenerator(train_envs), evaluator=algorithm_config.rollout_evaluator,
                      algorithm_config=algorithm_config, model=actor_critic_model, model_selection=model_selection)

    setup_logging(job_config=None, log_dir=tmp_path)
    try:
        a2c_trainer.train()
        reward = a2c_trainer.evaluate(deterministic=False, repeats=1)
    finally:
        clear_log_stats_writers()
    out = capsys.readouterr().out
    assert "train BaseEnvEvents reward mean" in out and "train ActorCriticEvents policy_loss 0" in out
    assert a2c_trainer.epoch == 2 and reward > 0
    assert (tmp_path / "params.pt").exists()
    assert list(tmp_path.glob("events.out.tfevents.*"))
