"""Maps action heads to probability distributions, by action space type and by head name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from maze_lab.core.utils.factory import ConfigurationError, _to_plain, locate
from maze_lab.distributions.base import ProbabilityDistribution
from maze_lab.distributions.bernoulli import BernoulliProbabilityDistribution
from maze_lab.distributions.beta import BetaProbabilityDistribution
from maze_lab.distributions.categorical import (
    CategoricalProbabilityDistribution,
    MultiCategoricalProbabilityDistribution,
)
from maze_lab.distributions.dict_distribution import DictProbabilityDistribution
from maze_lab.distributions.gaussian import DiagonalGaussianProbabilityDistribution
from maze_lab.distributions.squashed_gaussian import SquashedGaussianProbabilityDistribution

DISTRIBUTIONS: dict[str, type[ProbabilityDistribution]] = {
    "categorical": CategoricalProbabilityDistribution,
    "multi_categorical": MultiCategoricalProbabilityDistribution,
    "bernoulli": BernoulliProbabilityDistribution,
    "gaussian": DiagonalGaussianProbabilityDistribution,
    "diagonal_gaussian": DiagonalGaussianProbabilityDistribution,
    "beta": BetaProbabilityDistribution,
    "squashed_gaussian": SquashedGaussianProbabilityDistribution,
}
"""Built-in distributions by short name (class names and dotted paths are accepted too)."""

DEFAULT_DISTRIBUTIONS: dict[type[gym.spaces.Space], type[ProbabilityDistribution]] = {
    gym.spaces.Discrete: CategoricalProbabilityDistribution,
    gym.spaces.MultiDiscrete: MultiCategoricalProbabilityDistribution,
    gym.spaces.MultiBinary: BernoulliProbabilityDistribution,
    gym.spaces.Box: DiagonalGaussianProbabilityDistribution,
}
"""The distribution used for each action space type unless the config says otherwise (a Box whose bounds are all
finite gets :data:`DEFAULT_BOUNDED_BOX_DISTRIBUTION` instead, see :func:`default_distribution`)."""

DEFAULT_BOUNDED_BOX_DISTRIBUTION: type[ProbabilityDistribution] = SquashedGaussianProbabilityDistribution
"""The default of a Box with finite bounds on every entry: its samples (and its deterministic action) always lie in
[low, high], so an env that checks its action bounds accepts them and training uses the action the env received."""


def is_bounded_box(space: gym.spaces.Space) -> bool:
    """Whether ``space`` is a Box with finite low and high bounds on every entry."""
    return (isinstance(space, gym.spaces.Box) and bool(np.all(np.isfinite(space.low)))
            and bool(np.all(np.isfinite(space.high))))


def default_distribution(space: gym.spaces.Space) -> type[ProbabilityDistribution] | None:
    """The distribution an action head of this space gets without a config entry (None: no default exists).

    A Box with finite bounds gets a tanh-squashed Gaussian rescaled to [low, high]; an unbounded Box a diagonal
    Gaussian; the discrete spaces their categorical / Bernoulli distributions.
    """
    if is_bounded_box(space):
        return DEFAULT_BOUNDED_BOX_DISTRIBUTION
    return next((d for t, d in DEFAULT_DISTRIBUTIONS.items() if isinstance(space, t)), None)

_SPACES = {cls.__name__: cls for cls in (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary,
                                          gym.spaces.Box, gym.spaces.Dict)}


def distribution_from_name(name: str | type) -> type[ProbabilityDistribution]:
    """Resolve a distribution from a short name, class name, dotted path (maze_lab or Maze) or class."""
    if isinstance(name, type) and issubclass(name, ProbabilityDistribution):
        return name
    by_class = {cls.__name__: cls for cls in DISTRIBUTIONS.values()}
    if isinstance(name, str):
        short = name.rsplit(".", 1)[-1]
        if name in DISTRIBUTIONS:
            return DISTRIBUTIONS[name]
        if short in by_class and (name == short or name.startswith(("maze.", "maze_lab."))):
            return by_class[short]
        if "." in name:
            try:
                cls = locate(name)
            except ConfigurationError:
                cls = None
            if isinstance(cls, type) and issubclass(cls, ProbabilityDistribution):
                return cls
    raise ConfigurationError(
        f"unknown distribution {name!r}; valid names: {', '.join(sorted(DISTRIBUTIONS))}, "
        f"{', '.join(sorted(by_class))} (or a dotted path to a ProbabilityDistribution subclass)"
    )


def space_type_from_name(name: str | type) -> type[gym.spaces.Space]:
    """Resolve 'gym.spaces.Box', 'gymnasium.spaces.Box', 'Box' or the class to the gymnasium space class."""
    if isinstance(name, type) and issubclass(name, gym.spaces.Space):
        return name
    if isinstance(name, str) and name.rsplit(".", 1)[-1] in _SPACES:
        return _SPACES[name.rsplit(".", 1)[-1]]
    raise ConfigurationError(f"unknown action space type {name!r}; valid: {', '.join(sorted(_SPACES))} "
                             f"(optionally prefixed with gym.spaces. or gymnasium.spaces.)")


class DistributionMapper:
    """Decides the distribution of every action head of a Dict action space.

    Precedence: an ``action_head`` entry beats any ``action_space`` entry, which beats the defaults; among entries
    of the same kind the later one wins. The defaults (:func:`default_distribution`): categorical for Discrete,
    multi-categorical for MultiDiscrete, Bernoulli for MultiBinary, a tanh-squashed Gaussian for a Box with finite
    bounds and a diagonal Gaussian for an unbounded Box.

    :param action_space: The (merged) Dict action space.
    :param distribution_mapper_config: A list of ``{"action_space": <type>, "distribution": <name>}`` and
        ``{"action_head": <key>, "distribution": <name>}`` entries.
    """

    def __init__(self, action_space: gym.spaces.Dict,
                 distribution_mapper_config: Sequence[Mapping[str, Any]] | None = None):
        if not isinstance(action_space, gym.spaces.Dict):
            raise TypeError(f"DistributionMapper needs a gymnasium Dict action space, got {action_space}")
        self.action_space = action_space
        config = _to_plain(distribution_mapper_config) or []
        by_space: list[tuple[type[gym.spaces.Space], type[ProbabilityDistribution]]] = []
        by_head: dict[str, type[ProbabilityDistribution]] = {}
        for i, entry in enumerate(config):
            if not isinstance(entry, Mapping):
                raise ConfigurationError(f"distribution_mapper_config[{i}] must be a dict, got {entry!r}")
            keys = set(entry)
            if "distribution" not in keys or len(keys & {"action_space", "action_head"}) != 1 or len(keys) != 2:
                raise ConfigurationError(
                    f"distribution_mapper_config[{i}] has keys {sorted(keys)}; each entry needs 'distribution' and "
                    f"exactly one of 'action_space' or 'action_head'"
                )
            dist = distribution_from_name(entry["distribution"])
            if "action_head" in entry:
                head = entry["action_head"]
                if head not in action_space.spaces:
                    raise ConfigurationError(f"distribution_mapper_config[{i}]: unknown action head '{head}'; "
                                             f"valid heads: {', '.join(map(str, action_space.spaces))}")
                by_head[head] = dist
            else:
                by_space.append((space_type_from_name(entry["action_space"]), dist))

        self._head_distribution: dict[str, type[ProbabilityDistribution]] = {}
        for head, space in action_space.spaces.items():
            if isinstance(space, gym.spaces.Dict):
                raise ConfigurationError(f"action head '{head}' is a nested Dict space; nested dict action spaces "
                                         f"are not supported, flatten them into one Dict")
            cls = by_head.get(head)
            if cls is None:
                for space_type, dist in by_space:
                    if isinstance(space, space_type):
                        cls = dist
            if cls is None:
                cls = default_distribution(space)
            if cls is None:
                raise ConfigurationError(f"no distribution for action head '{head}' with space {space}; add a "
                                         f"distribution_mapper_config entry for it")
            try:
                cls.check_action_space(space)
            except (TypeError, ValueError) as err:
                raise ConfigurationError(f"action head '{head}': {err}") from err
            self._head_distribution[head] = cls
        # (head, class, space) triples for the hot path of logits_dict_to_distribution
        self._heads = [(h, self._head_distribution[h], action_space.spaces[h]) for h in action_space.spaces]

    def distribution_class(self, action_head: str) -> type[ProbabilityDistribution]:
        """The distribution class of an action head."""
        self._check_head(action_head)
        return self._head_distribution[action_head]

    def _check_head(self, action_head: str) -> None:
        if action_head not in self._head_distribution:
            raise KeyError(f"unknown action head '{action_head}'; valid heads: "
                           f"{', '.join(map(str, self._head_distribution))}")

    def required_logits_shape(self, action_head: str) -> tuple[int, ...]:
        """The logits shape a network must output for this action head."""
        self._check_head(action_head)
        return self._head_distribution[action_head].required_logits_shape(self.action_space.spaces[action_head])

    def action_head_distribution(self, action_head: str, logits: torch.Tensor,
                                 temperature: float = 1.0) -> ProbabilityDistribution:
        """The distribution of one action head for the given logits."""
        self._check_head(action_head)
        return self._head_distribution[action_head](logits, self.action_space.spaces[action_head], temperature)

    def logits_dict_to_distribution(self, logits_dict: Mapping[str, torch.Tensor],
                                    temperature: float = 1.0) -> DictProbabilityDistribution:
        """The joint distribution for the logits of all heads present in ``logits_dict``."""
        dists = {}
        for head, cls, space in self._heads:
            logits = logits_dict.get(head)
            if logits is not None:
                dists[head] = cls(logits, space, temperature)
        if len(dists) != len(logits_dict):
            unknown = [k for k in logits_dict if k not in self._head_distribution]
            raise KeyError(f"logits for unknown action heads {unknown}; valid heads: "
                           f"{', '.join(map(str, self._head_distribution))}")
        return DictProbabilityDistribution(dists)

    def __repr__(self) -> str:
        rows = [f"  {h}: {space} -> {cls.__name__}" for h, cls, space in self._heads]
        return "DistributionMapper(\n" + "\n".join(rows) + "\n)"
