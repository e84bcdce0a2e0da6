"""The probability distribution interface shared by all action distributions."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import gymnasium as gym
import numpy as np
import torch


class ProbabilityDistribution(ABC):
    """An action distribution parametrized by logits produced by a policy network.

    Every distribution is built as ``cls(logits, action_space, temperature)``; ``log_prob`` and ``entropy`` reduce
    over the action's own dims, so they have the batch shape of the logits.
    """

    @classmethod
    @abstractmethod
    def required_logits_shape(cls, action_space: gym.spaces.Space) -> tuple[int, ...]:
        """The logits shape (without batch dims) a network must output for this action space."""

    @classmethod
    def check_action_space(cls, action_space: gym.spaces.Space) -> None:
        """Raise if the distribution cannot model this action space."""

    @abstractmethod
    def sample(self) -> torch.Tensor:
        """Draw a random action."""

    @abstractmethod
    def deterministic_sample(self) -> torch.Tensor:
        """The most likely action (argmax / mode)."""

    @abstractmethod
    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-probability (density) of the actions."""

    def neg_log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Negative log-probability of the actions."""
        return -self.log_prob(actions)

    @abstractmethod
    def entropy(self) -> torch.Tensor:
        """Entropy of the distribution."""

    def rsample_with_log_prob(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparametrized sample and its log-probability (SAC's policy loss differentiates through both).
        Distributions with a transform override this to compute the log-probability from the untransformed
        sample, which is exact where recovering it from the action is not (tanh near its bounds)."""
        rsample = getattr(self, "rsample", None)
        if rsample is None:
            raise TypeError(f"{type(self).__name__} has no reparametrized sample: SAC's continuous update needs "
                            "Box action heads (Gaussian, squashed Gaussian or Beta distributions)")
        action = rsample()
        return action, self.log_prob(action)

    @abstractmethod
    def kl(self, other: ProbabilityDistribution) -> torch.Tensor:
        """KL divergence KL(self || other) to a distribution of the same type."""

    def _check_same_type(self, other: Any) -> None:
        if type(other) is not type(self):
            raise TypeError(f"KL between {type(self).__name__} and {type(other).__name__} is not defined")


class TorchProbabilityDistribution(ProbabilityDistribution, ABC):
    """A distribution that wraps a ``torch.distributions.Distribution`` with event dims summed out.

    :param dist: The wrapped torch distribution (its event/action dims are reduced in log_prob/entropy).
    :param event_dims: Number of trailing action dims that are summed over.
    """

    def __init__(self, dist: torch.distributions.Distribution, action_space: gym.spaces.Space, event_dims: int):
        self.dist = dist
        self.action_space = action_space
        self.event_dims = event_dims

    def _reduce(self, t: torch.Tensor) -> torch.Tensor:
        return t.sum(dim=tuple(range(-self.event_dims, 0))) if self.event_dims else t

    def sample(self) -> torch.Tensor:
        """Draw a random action."""
        return self.dist.sample()

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-probability of the actions, summed over the action dims."""
        return self._reduce(self.dist.log_prob(actions))

    def entropy(self) -> torch.Tensor:
        """Entropy, summed over the action dims."""
        return self._reduce(self.dist.entropy())

    def kl(self, other: ProbabilityDistribution) -> torch.Tensor:
        """KL divergence to another distribution of the same type."""
        self._check_same_type(other)
        return self._reduce(torch.distributions.kl_divergence(self.dist, other.dist))  # type: ignore[attr-defined]


class BoxParameterDistribution(TorchProbabilityDistribution, ABC):
    """A distribution over a Box space with two parameters per action entry (mean and log-std, or the two
    concentrations), so its logits are ``2 * prod(shape)`` wide."""

    needs_finite_bounds = False
    """Subclasses that map onto [low, high] need finite bounds."""

    @classmethod
    def required_logits_shape(cls, action_space: gym.spaces.Space) -> tuple[int, ...]:
        """Both parameters of all entries, concatenated."""
        cls.check_action_space(action_space)
        return (2 * int(math.prod(action_space.shape)),)

    @classmethod
    def check_action_space(cls, action_space: gym.spaces.Space) -> None:
        """Only Box spaces (with finite bounds where the distribution needs them)."""
        if not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"{cls.__name__} needs a Box action space, got {action_space}")
        if cls.needs_finite_bounds and not (np.all(np.isfinite(action_space.low))
                                            and np.all(np.isfinite(action_space.high))):
            raise ValueError(f"{cls.__name__} needs finite Box bounds, got {action_space}")
