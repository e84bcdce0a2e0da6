"""Maze-style import path of the policy composers."""

from maze_lab.perception.composers.policies import BasePolicyComposer, ProbabilisticPolicyComposer

__all__ = ["BasePolicyComposer", "ProbabilisticPolicyComposer"]
