"""Policies, critics and actor-critics, the model composers (``maze_lab.agent.composers``), the model graph
(``maze_lab.agent.graph``) and agent deployment (``maze_lab.agent.deployment``).

The names below import on first use (PEP 562): reading a run's model drawings or importing the random policy does
not import torch."""

from __future__ import annotations

import importlib
from typing import Any

_MODULE_OF = {
    "ActorCriticOutput": "maze_lab.agent.torch_actor_critic",
    "DummyCartPolePolicy": "maze_lab.agent.heuristic_policy",
    "HeuristicPolicy": "maze_lab.agent.heuristic_policy",
    "PendulumSwingUpPolicy": "maze_lab.agent.heuristic_policy",
    "Policy": "maze_lab.core.policy",
    "PolicySubStepOutput": "maze_lab.agent.torch_policy",
    "RandomPolicy": "maze_lab.agent.random_policy",
    "TorchActorCritic": "maze_lab.agent.torch_actor_critic",
    "TorchDeltaStateCritic": "maze_lab.agent.torch_state_critic",
    "TorchModel": "maze_lab.agent.torch_model",
    "TorchPolicy": "maze_lab.agent.torch_policy",
    "TorchSharedStateActionCritic": "maze_lab.agent.torch_state_action_critic",
    "TorchSharedStateCritic": "maze_lab.agent.torch_state_critic",
    "TorchStateActionCritic": "maze_lab.agent.torch_state_action_critic",
    "TorchStateCritic": "maze_lab.agent.torch_state_critic",
    "TorchStepStateActionCritic": "maze_lab.agent.torch_state_action_critic",
    "TorchStepStateCritic": "maze_lab.agent.torch_state_critic",
}

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


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))
