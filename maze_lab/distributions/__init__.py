"""Probability distributions for action spaces and the DistributionMapper linking them to action heads."""

from maze_lab.distributions.base import ProbabilityDistribution, TorchProbabilityDistribution
from maze_lab.distributions.bernoulli import BernoulliProbabilityDistribution
from maze_lab.distributions.beta import BetaProbabilityDistribution
from maze_lab.distributions.categorical import (
    CategoricalProbabilityDistribution,
    MultiCategoricalProbabilityDistribution,
)
from maze_lab.distributions.dict_distribution import DictProbabilityDistribution
from maze_lab.distributions.distribution_mapper import (
    DEFAULT_BOUNDED_BOX_DISTRIBUTION,
    DEFAULT_DISTRIBUTIONS,
    DISTRIBUTIONS,
    DistributionMapper,
    default_distribution,
    distribution_from_name,
    is_bounded_box,
)
from maze_lab.distributions.gaussian import DiagonalGaussianProbabilityDistribution
from maze_lab.distributions.squashed_gaussian import SquashedGaussianProbabilityDistribution

__all__ = [
    "DEFAULT_BOUNDED_BOX_DISTRIBUTION",
    "DEFAULT_DISTRIBUTIONS",
    "DISTRIBUTIONS",
    "BernoulliProbabilityDistribution",
    "BetaProbabilityDistribution",
    "CategoricalProbabilityDistribution",
    "DiagonalGaussianProbabilityDistribution",
    "DictProbabilityDistribution",
    "DistributionMapper",
    "MultiCategoricalProbabilityDistribution",
    "ProbabilityDistribution",
    "SquashedGaussianProbabilityDistribution",
    "TorchProbabilityDistribution",
    "default_distribution",
    "distribution_from_name",
    "is_bounded_box",
]
