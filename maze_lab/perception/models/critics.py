"""Maze-style import path of the critic composers."""

from maze_lab.perception.composers.critics import (
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

__all__ = [
    "BaseStateActionCriticComposer",
    "BaseStateCriticComposer",
    "CriticComposerInterface",
    "DeltaStateCriticComposer",
    "SharedStateActionCriticComposer",
    "SharedStateCriticComposer",
    "StateActionCriticComposer",
    "StateCriticComposer",
    "StepStateActionCriticComposer",
    "StepStateCriticComposer",
]
