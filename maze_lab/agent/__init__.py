"""Policies, critics and actor-critics."""

from maze_lab.agent.heuristic_policy import DummyCartPolePolicy, HeuristicPolicy, PendulumSwingUpPolicy
from maze_lab.agent.random_policy import RandomPolicy
from maze_lab.agent.torch_actor_critic import ActorCriticOutput, TorchActorCritic
from maze_lab.agent.torch_model import TorchModel
from maze_lab.agent.torch_policy import PolicySubStepOutput, TorchPolicy
from maze_lab.agent.torch_state_action_critic import (
    TorchSharedStateActionCritic,
    TorchStateActionCritic,
    TorchStepStateActionCritic,
)
from maze_lab.agent.torch_state_critic import (
    TorchDeltaStateCritic,
    TorchSharedStateCritic,
    TorchStateCritic,
    TorchStepStateCritic,
)
from maze_lab.core.policy import Policy

__all__ = [
    "ActorCriticOutput",
    "DummyCartPolePolicy",
    "PendulumSwingUpPolicy",
    "HeuristicPolicy",
    "Policy",
    "PolicySubStepOutput",
    "RandomPolicy",
    "TorchActorCritic",
    "TorchDeltaStateCritic",
    "TorchModel",
    "TorchPolicy",
    "TorchSharedStateActionCritic",
    "TorchSharedStateCritic",
    "TorchStateActionCritic",
    "TorchStateCritic",
    "TorchStepStateActionCritic",
    "TorchStepStateCritic",
]
