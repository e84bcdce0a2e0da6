"""Model composers: policies, critics and distribution mapper for an env's spaces."""

from maze_lab.agent.composers.base import BaseModelComposer
from maze_lab.agent.composers.critics import (
    BaseStateActionCriticComposer,
    BaseStateCriticComposer,
    CriticComposerInterface,
    DeltaStateCriticComposer,
    SharedStateActionCriticComposer,
    SharedStateCriticComposer,
    StateActionCriticComposer,
    StateCriticComposer,
    StepStateActionCriticComposer,
    StepStateCriticComposer,
)
from maze_lab.agent.composers.custom import CustomModelComposer
from maze_lab.agent.composers.policies import BasePolicyComposer, ProbabilisticPolicyComposer
from maze_lab.agent.composers.template import TemplateModelComposer
from maze_lab.agent.composers.utils import build_model_composer

__all__ = [
    "BaseModelComposer",
    "BasePolicyComposer",
    "BaseStateActionCriticComposer",
    "BaseStateCriticComposer",
    "CriticComposerInterface",
    "CustomModelComposer",
    "DeltaStateCriticComposer",
    "ProbabilisticPolicyComposer",
    "SharedStateActionCriticComposer",
    "SharedStateCriticComposer",
    "StateActionCriticComposer",
    "StateCriticComposer",
    "StepStateActionCriticComposer",
    "StepStateCriticComposer",
    "TemplateModelComposer",
    "build_model_composer",
]
