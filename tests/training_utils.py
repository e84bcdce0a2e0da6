"""Small builders shared by the training tests: CartPole factories and flatten-concat actor-critics."""

from __future__ import annotations

from torch import nn

from maze_lab.core.agent.torch_actor_critic import TorchActorCritic
from maze_lab.core.agent.torch_policy import TorchPolicy
from maze_lab.core.agent.torch_state_critic import TorchSharedStateCritic
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.distributions.distribution_mapper import DistributionMapper
from maze_lab.perception.models.built_in.flatten_concat import FlattenConcatPolicyNet, FlattenConcatStateValueNet


def cartpole_factory() -> GymMazeEnv:
    """CartPole-v1 as a MazeEnv (no rendering)."""
    return GymMazeEnv("CartPole-v1", render_mode=None)


def flat_actor_critic(env, hidden=(64, 64)) -> TorchActorCritic:
    """Flatten-concat policy and shared state critic with tanh layers for a flat env."""
    obs_shapes = {k: s.shape for k, s in env.observation_spaces_dict[0].spaces.items()}
    action_space = env.action_spaces_dict[0]
    logits = {k: (s.n,) for k, s in action_space.spaces.items()}
    policy = TorchPolicy({0: FlattenConcatPolicyNet(obs_shapes, logits, hidden_units=list(hidden), non_lin=nn.Tanh)},
                         DistributionMapper(action_space, []))
    critic = TorchSharedStateCritic({0: FlattenConcatStateValueNet(obs_shapes, hidden_units=list(hidden),
                                                                   non_lin=nn.Tanh)}, env.observation_spaces_dict)
    return TorchActorCritic(policy, critic)
