"""Behavioural cloning (imitation learning) from recorded trajectories; checkpoints fine-tune with A2C/PPO."""

from maze_lab.train.trainers.bc.bc_trainer import BC
from maze_lab.train.trainers.bc.config import BCAlgorithmConfig
from maze_lab.train.trainers.bc.dataset import ImitationBatch, InMemoryImitationDataset
from maze_lab.train.trainers.bc.events import ImitationEvents

__all__ = ["BC", "BCAlgorithmConfig", "ImitationBatch", "ImitationEvents", "InMemoryImitationDataset"]
