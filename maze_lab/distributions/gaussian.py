"""Diagonal Gaussian distribution for (unbounded) Box action spaces."""

from __future__ import annotations

import math

import gymnasium as gym
import torch

from maze_lab.distributions.base import BoxParameterDistribution
from maze_lab.distributions.utils import MAX_LOG_STD, MIN_LOG_STD


def split_mean_log_std(logits: torch.Tensor, action_space: gym.spaces.Box) -> tuple[torch.Tensor, torch.Tensor]:
    """Split (..., 2k) logits into mean and log-std shaped like the action space."""
    k = int(math.prod(action_space.shape))
    batch = logits.shape[:-1]
    mean = logits[..., :k].reshape(*batch, *action_space.shape)
    log_std = logits[..., k:].reshape(*batch, *action_space.shape)
    return mean, log_std.clamp(MIN_LOG_STD, MAX_LOG_STD)


class DiagonalGaussianProbabilityDistribution(BoxParameterDistribution):
    """Independent normal per action entry; logits are the means and log-stds, shape (2 * size,).

    The temperature multiplies the standard deviation; log-stds are clamped to [-20, 2].
    """

    def __init__(self, logits: torch.Tensor, action_space: gym.spaces.Box, temperature: float = 1.0):
        mean, log_std = split_mean_log_std(logits, action_space)
        std = log_std.exp()
        if temperature != 1.0:
            std = std * temperature
        dist = torch.distributions.Normal(mean, std, validate_args=False)
        super().__init__(dist, action_space, event_dims=len(action_space.shape))

    def sample(self) -> torch.Tensor:
        """Draw an action (not reparametrized)."""
        return self.dist.sample()

    def rsample(self) -> torch.Tensor:
        """Draw a reparametrized action (gradients flow to the logits)."""
        return self.dist.rsample()

    def deterministic_sample(self) -> torch.Tensor:
        """The mean."""
        return self.dist.mean
