"""Categorical distribution for Discrete action spaces (and its multi-categorical extension)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from maze_lab.distributions.base import ProbabilityDistribution


class CategoricalProbabilityDistribution(ProbabilityDistribution):
    """Categorical distribution over the ``n`` options of a Discrete space; logits shape (n,).

    Logits are divided by the temperature. Logits at the lowest finite value (see ActionMaskingBlock) get
    probability zero.
    """

    def __init__(self, logits: torch.Tensor, action_space: gym.spaces.Discrete, temperature: float = 1.0):
        self.logits = logits if temperature == 1.0 else logits / temperature
        self.action_space = action_space
        self.n = int(action_space.n)
        self.start = int(getattr(action_space, "start", 0))
        self._log_probs: torch.Tensor | None = None
        self._probs: torch.Tensor | None = None

    @classmethod
    def required_logits_shape(cls, action_space: gym.spaces.Space) -> tuple[int, ...]:
        """One logit per option."""
        cls.check_action_space(action_space)
        return (int(action_space.n),)

    @classmethod
    def check_action_space(cls, action_space: gym.spaces.Space) -> None:
        """Only Discrete spaces."""
        if not isinstance(action_space, gym.spaces.Discrete):
            raise TypeError(f"{cls.__name__} needs a Discrete action space, got {action_space}")

    @property
    def log_probs(self) -> torch.Tensor:
        """Normalized log-probabilities (..., n)."""
        if self._log_probs is None:
            self._log_probs = torch.log_softmax(self.logits, dim=-1)
        return self._log_probs

    @property
    def probs(self) -> torch.Tensor:
        """Probabilities (..., n)."""
        if self._probs is None:
            self._probs = torch.softmax(self.logits, dim=-1)
        return self._probs

    def sample(self) -> torch.Tensor:
        """Draw an option index."""
        probs = self.probs
        idx = torch.multinomial(probs.reshape(-1, self.n), 1).reshape(probs.shape[:-1])
        return idx + self.start if self.start else idx

    def deterministic_sample(self) -> torch.Tensor:
        """The most likely option."""
        idx = self.logits.argmax(dim=-1)
        return idx + self.start if self.start else idx

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-probability of the chosen options."""
        idx = actions.long() - self.start if self.start else actions.long()
        return self.log_probs.gather(-1, idx.unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        """Entropy in nats (zero-probability options contribute nothing)."""
        p = self.probs
        return -torch.where(p > 0, p * self.log_probs, torch.zeros_like(p)).sum(-1)

    def kl(self, other: ProbabilityDistribution) -> torch.Tensor:
        """KL(self || other)."""
        self._check_same_type(other)
        p = self.probs
        diff = self.log_probs - other.log_probs  # type: ignore[attr-defined]
        return torch.where(p > 0, p * diff, torch.zeros_like(p)).sum(-1)


class MultiCategoricalProbabilityDistribution(ProbabilityDistribution):
    """Independent categoricals for the entries of a MultiDiscrete space; logits shape (sum(nvec),)."""

    def __init__(self, logits: torch.Tensor, action_space: gym.spaces.MultiDiscrete, temperature: float = 1.0):
        self.action_space = action_space
        nvec = np.asarray(action_space.nvec).reshape(-1)
        starts = np.asarray(getattr(action_space, "start", np.zeros_like(nvec))).reshape(-1)
        chunks = torch.split(logits, [int(n) for n in nvec], dim=-1)
        self.categoricals = [
            CategoricalProbabilityDistribution(c, gym.spaces.Discrete(int(n), start=int(s)), temperature)
            for c, n, s in zip(chunks, nvec, starts, strict=True)
        ]

    @classmethod
    def required_logits_shape(cls, action_space: gym.spaces.Space) -> tuple[int, ...]:
        """The logits of all entries, concatenated."""
        cls.check_action_space(action_space)
        return (int(np.sum(action_space.nvec)),)

    @classmethod
    def check_action_space(cls, action_space: gym.spaces.Space) -> None:
        """Only one-dimensional MultiDiscrete spaces."""
        if not isinstance(action_space, gym.spaces.MultiDiscrete) or np.asarray(action_space.nvec).ndim != 1:
            raise TypeError(f"{cls.__name__} needs a 1-d MultiDiscrete action space, got {action_space}")

    def sample(self) -> torch.Tensor:
        """Draw one index per entry (..., len(nvec))."""
        return torch.stack([c.sample() for c in self.categoricals], dim=-1)

    def deterministic_sample(self) -> torch.Tensor:
        """The most likely index per entry."""
        return torch.stack([c.deterministic_sample() for c in self.categoricals], dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Sum of the entries' log-probabilities."""
        return sum(c.log_prob(actions[..., i]) for i, c in enumerate(self.categoricals))  # type: ignore[return-value]

    def entropy(self) -> torch.Tensor:
        """Sum of the entries' entropies."""
        return sum(c.entropy() for c in self.categoricals)  # type: ignore[return-value]

    def kl(self, other: ProbabilityDistribution) -> torch.Tensor:
        """Sum of the entries' KL divergences."""
        self._check_same_type(other)
        return sum(a.kl(b) for a, b in zip(self.categoricals, other.categoricals, strict=True))  # type: ignore
