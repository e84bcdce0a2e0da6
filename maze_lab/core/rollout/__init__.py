"""Rollout runners: run a policy on an env for a number of episodes, with statistics and trajectory recording."""

from maze_lab.core.rollout.sequential import RolloutResult, SequentialRolloutRunner

__all__ = ["RolloutResult", "SequentialRolloutRunner"]
