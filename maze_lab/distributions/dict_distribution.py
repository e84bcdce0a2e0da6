"""A joint distribution over the heads of a Dict action space."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from maze_lab.distributions.base import ProbabilityDistribution


class DictProbabilityDistribution(ProbabilityDistribution):
    """Independent distributions, one per action head; methods return dicts keyed by action head.

    :param distribution_dict: The distribution of every action head.
    """

    def __init__(self, distribution_dict: Mapping[str, ProbabilityDistribution]):
        self.distribution_dict = dict(distribution_dict)

    @classmethod
    def required_logits_shape(cls, action_space: object) -> tuple[int, ...]:
        """Not defined: a dict distribution takes one logits tensor per head (see DistributionMapper)."""
        raise NotImplementedError("DictProbabilityDistribution takes a logits dict; ask the DistributionMapper for "
                                  "the logits shape of each action head")

    def __getitem__(self, action_head: str) -> ProbabilityDistribution:
        return self.distribution_dict[action_head]

    def keys(self) -> list[str]:
        """The action heads."""
        return list(self.distribution_dict)

    def sample(self) -> dict[str, torch.Tensor]:  # type: ignore[override]
        """Draw an action per head."""
        return {k: d.sample() for k, d in self.distribution_dict.items()}

    def rsample(self) -> dict[str, torch.Tensor]:
        """Draw a reparametrized action per head (continuous heads only)."""
        return {k: d.rsample() for k, d in self.distribution_dict.items()}  # type: ignore[attr-defined]

    def rsample_with_log_prob(self) -> tuple[dict[str, torch.Tensor], torch.Tensor]:  # type: ignore[override]
        """A reparametrized action per head and their joint log-probability."""
        actions, log_prob = {}, None
        for k, d in self.distribution_dict.items():
            actions[k], lp = d.rsample_with_log_prob()
            log_prob = lp if log_prob is None else log_prob + lp
        return actions, log_prob

    def deterministic_sample(self) -> dict[str, torch.Tensor]:  # type: ignore[override]
        """The most likely action per head."""
        return {k: d.deterministic_sample() for k, d in self.distribution_dict.items()}

    def log_prob(self, actions: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:  # type: ignore[override]
        """Log-probability per head."""
        return {k: d.log_prob(actions[k]) for k, d in self.distribution_dict.items()}

    def neg_log_prob(self, actions: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:  # type: ignore[override]
        """Negative log-probability per head."""
        return {k: -v for k, v in self.log_prob(actions).items()}

    def entropy(self) -> dict[str, torch.Tensor]:  # type: ignore[override]
        """Entropy per head."""
        return {k: d.entropy() for k, d in self.distribution_dict.items()}

    def kl(self, other: ProbabilityDistribution) -> dict[str, torch.Tensor]:  # type: ignore[override]
        """KL divergence per head."""
        self._check_same_type(other)
        return {k: d.kl(other.distribution_dict[k]) for k, d in self.distribution_dict.items()}  # type: ignore

    def joint_log_prob(self, actions: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Log-probability of the joint action (sum over heads)."""
        return _sum(self.log_prob(actions).values())

    def joint_entropy(self) -> torch.Tensor:
        """Entropy of the joint action (sum over heads)."""
        return _sum(self.entropy().values())

    def joint_kl(self, other: DictProbabilityDistribution) -> torch.Tensor:
        """KL divergence of the joint action (sum over heads)."""
        return _sum(self.kl(other).values())


def _sum(values: object) -> torch.Tensor:
    it = iter(values)  # type: ignore[call-overload]
    total = next(it)
    for v in it:
        total = total + v
    return total
