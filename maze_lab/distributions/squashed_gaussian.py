"""Tanh-squashed diagonal Gaussian for bounded Box action spaces."""

from __future__ import annotations

import math

import gymnasium as gym
import torch
import torch.nn.functional as F

from maze_lab.distributions.base import BoxParameterDistribution
from maze_lab.distributions.gaussian import split_mean_log_std
from maze_lab.distributions.utils import EPSILON, atanh


class SquashedGaussianProbabilityDistribution(BoxParameterDistribution):
    """A Gaussian whose samples pass through tanh and are rescaled to [low, high].

    ``log_prob`` includes the change of variables; ``entropy`` (no closed form after squashing) is the entropy of
    the underlying Gaussian. The temperature multiplies the standard deviation.
    """

    needs_finite_bounds = True

    def __init__(self, logits: torch.Tensor, action_space: gym.spaces.Box, temperature: float = 1.0):
        self.check_action_space(action_space)
        mean, log_std = split_mean_log_std(logits, action_space)
        std = log_std.exp()
        if temperature != 1.0:
            std = std * temperature
        low = torch.as_tensor(action_space.low, dtype=logits.dtype, device=logits.device)
        high = torch.as_tensor(action_space.high, dtype=logits.dtype, device=logits.device)
        self.center = (high + low) / 2.0
        self.half_range = (high - low) / 2.0
        super().__init__(torch.distributions.Normal(mean, std, validate_args=False), action_space,
                         event_dims=len(action_space.shape))

    def _squash(self, u: torch.Tensor) -> torch.Tensor:
        return self.center + self.half_range * torch.tanh(u)

    def sample(self) -> torch.Tensor:
        """Draw an action in [low, high]."""
        return self._squash(self.dist.sample())

    def rsample(self) -> torch.Tensor:
        """Draw a reparametrized action in [low, high]."""
        return self._squash(self.dist.rsample())

    def deterministic_sample(self) -> torch.Tensor:
        """The squashed mean."""
        return self._squash(self.dist.mean)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-density of actions in [low, high], with the tanh and rescaling Jacobians."""
        y = ((actions - self.center) / self.half_range).clamp(-1.0 + EPSILON, 1.0 - EPSILON)
        u = atanh(y)
        # log(1 - tanh(u)^2) written in a form that stays finite for large |u|
        log_det = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
        return self._reduce(self.dist.log_prob(u) - log_det - torch.log(self.half_range))
