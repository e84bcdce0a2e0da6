"""Bernoulli distribution for MultiBinary action spaces."""

from __future__ import annotations

import gymnasium as gym
import torch

from maze_lab.distributions.base import TorchProbabilityDistribution


class BernoulliProbabilityDistribution(TorchProbabilityDistribution):
    """Independent Bernoulli variables, one logit per binary action entry; actions are int8 like MultiBinary."""

    def __init__(self, logits: torch.Tensor, action_space: gym.spaces.MultiBinary, temperature: float = 1.0):
        self.logits = logits if temperature == 1.0 else logits / temperature
        dist = torch.distributions.Bernoulli(logits=self.logits, validate_args=False)
        super().__init__(dist, action_space, event_dims=len(action_space.shape))

    @classmethod
    def required_logits_shape(cls, action_space: gym.spaces.Space) -> tuple[int, ...]:
        """One logit per binary entry."""
        cls.check_action_space(action_space)
        return tuple(int(d) for d in action_space.shape)

    @classmethod
    def check_action_space(cls, action_space: gym.spaces.Space) -> None:
        """Only MultiBinary spaces."""
        if not isinstance(action_space, gym.spaces.MultiBinary):
            raise TypeError(f"{cls.__name__} needs a MultiBinary action space, got {action_space}")

    def sample(self) -> torch.Tensor:
        """Draw binary actions."""
        return self.dist.sample().to(torch.int8)

    def deterministic_sample(self) -> torch.Tensor:
        """1 where the probability exceeds 0.5."""
        return (self.logits > 0).to(torch.int8)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Summed log-probability of the binary entries."""
        return self._reduce(self.dist.log_prob(actions.to(self.logits.dtype)))


