"""Beta distribution rescaled to the bounds of a Box action space."""

from __future__ import annotations

import math

import gymnasium as gym
import torch
import torch.nn.functional as F

from maze_lab.distributions.base import BoxParameterDistribution
from maze_lab.distributions.utils import EPSILON, tensor_clamp


class BetaProbabilityDistribution(BoxParameterDistribution):
    """Beta(alpha, beta) per entry, mapped affinely from (0, 1) to [low, high] of a bounded Box.

    Logits (2 * size,) give ``alpha = softplus(a) + 1`` and ``beta = softplus(b) + 1`` (so the mode exists);
    the temperature divides the logits.
    """

    needs_finite_bounds = True

    def __init__(self, logits: torch.Tensor, action_space: gym.spaces.Box, temperature: float = 1.0):
        self.check_action_space(action_space)
        if temperature != 1.0:
            logits = logits / temperature
        k = int(math.prod(action_space.shape))
        batch = logits.shape[:-1]
        self.alpha = F.softplus(logits[..., :k]).reshape(*batch, *action_space.shape) + 1.0
        self.beta = F.softplus(logits[..., k:]).reshape(*batch, *action_space.shape) + 1.0
        self.low = torch.as_tensor(action_space.low, dtype=logits.dtype, device=logits.device)
        self.high = torch.as_tensor(action_space.high, dtype=logits.dtype, device=logits.device)
        self.scale = self.high - self.low
        dist = torch.distributions.Beta(self.alpha, self.beta, validate_args=False)
        super().__init__(dist, action_space, event_dims=len(action_space.shape))

    def _to_action(self, x: torch.Tensor) -> torch.Tensor:
        # the clamp keeps float rounding of low + scale * x from stepping past a bound
        return tensor_clamp(self.low + self.scale * x, self.low, self.high)

    def sample(self) -> torch.Tensor:
        """Draw an action in [low, high]."""
        return self._to_action(self.dist.sample())

    def rsample(self) -> torch.Tensor:
        """Draw a reparametrized action in [low, high]."""
        return self._to_action(self.dist.rsample())

    def deterministic_sample(self) -> torch.Tensor:
        """The mode, rescaled to [low, high]."""
        return self._to_action((self.alpha - 1.0) / (self.alpha + self.beta - 2.0).clamp(min=EPSILON))

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-density of the actions in [low, high] (includes the rescaling)."""
        x = ((actions - self.low) / self.scale).clamp(EPSILON, 1.0 - EPSILON)
        return self._reduce(self.dist.log_prob(x) - torch.log(self.scale))

    def entropy(self) -> torch.Tensor:
        """Differential entropy of the rescaled distribution."""
        return self._reduce(self.dist.entropy() + torch.log(self.scale))
