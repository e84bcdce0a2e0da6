"""The model composer interface: policy, critic and distribution mapper built for an env's spaces."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from maze_lab.agent.torch_actor_critic import TorchActorCritic
from maze_lab.agent.torch_policy import TorchPolicy
from maze_lab.agent.torch_state_action_critic import TorchStateActionCritic
from maze_lab.agent.torch_state_critic import TorchStateCritic
from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.distributions.distribution_mapper import DistributionMapper
from maze_lab.perception.perception_utils import flat_structured_space


def check_spaces(action_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                 observation_spaces_dict: Mapping[StepKey, gym.spaces.Dict]) -> None:
    """Raise unless both dicts have the same policy keys and hold Dict spaces."""
    if list(action_spaces_dict) != list(observation_spaces_dict):
        raise ValueError(f"action and observation spaces need the same policy keys; got {list(action_spaces_dict)} "
                         f"and {list(observation_spaces_dict)}")
    for kind, spaces in (("action", action_spaces_dict), ("observation", observation_spaces_dict)):
        for key, space in spaces.items():
            if not isinstance(space, gym.spaces.Dict):
                raise TypeError(f"{kind} space of policy key {key!r} must be a gymnasium Dict space, got {space}")
    for key, space in observation_spaces_dict.items():
        for name, entry in space.spaces.items():
            _check_numeric(entry, name, key)


NUMERIC_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
"""Observation spaces a network takes: numbers of a fixed shape (nested in Dict or Tuple spaces)."""


def _short(space: gym.spaces.Space) -> str:
    if isinstance(space, gym.spaces.Text):
        return f"Text(min_length={space.min_length}, max_length={space.max_length})"
    text = repr(space)
    return text if len(text) <= 100 else f"{type(space).__name__}({text[len(type(space).__name__) + 1:90]}...)"


def _check_numeric(space: gym.spaces.Space, name: str, policy_key: StepKey) -> None:
    """Refuse an observation entry that is not numbers of a fixed shape (Text, Graph, Sequence, OneOf, ...), when
    the model is built rather than at the first step, naming it and the ways out."""
    if isinstance(space, NUMERIC_SPACES):
        return
    if isinstance(space, gym.spaces.Dict):
        for inner, sub in space.spaces.items():
            _check_numeric(sub, f"{name}.{inner}", policy_key)
        return
    if isinstance(space, gym.spaces.Tuple):
        for i, sub in enumerate(space.spaces):
            _check_numeric(sub, f"{name}[{i}]", policy_key)
        return
    raise ConfigurationError(
        f"observation '{name}' (policy key {policy_key!r}) is a {_short(space)} space, which a network cannot take: "
        f"observations must be numbers of a fixed shape (Box, Discrete, MultiDiscrete, MultiBinary); drop the "
        f"key before maze-lab wraps the env (e.g. gymnasium.wrappers.FilterObservation(env, filter_keys=[...] "
        f"without '{name.split('.')[0].split('[')[0]}')) or encode it as numbers with an ObservationWrapper "
        f"(e.g. a Box of token ids or a one-hot)")


class BaseModelComposer(ABC):
    """Holds the spaces, the distribution mapper, the policy and (optionally) the critic of a model.

    :param action_spaces_dict: Action space per policy key.
    :param observation_spaces_dict: Observation space per policy key.
    :param agent_counts_dict: Agents per policy key (defaults to one each).
    :param distribution_mapper_config: Config of the DistributionMapper (see there).
    """

    def __init__(self, action_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                 observation_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                 agent_counts_dict: Mapping[StepKey, int] | None = None,
                 distribution_mapper_config: Sequence[Mapping[str, Any]] | None = None):
        check_spaces(action_spaces_dict, observation_spaces_dict)
        self.action_spaces_dict = dict(action_spaces_dict)
        self.observation_spaces_dict = dict(observation_spaces_dict)
        self.agent_counts_dict = dict(agent_counts_dict or dict.fromkeys(self.action_spaces_dict, 1))
        self.distribution_mapper = DistributionMapper(flat_structured_space(self.action_spaces_dict),
                                                      distribution_mapper_config)

    @property
    @abstractmethod
    def policy(self) -> TorchPolicy:
        """The policy."""

    @property
    @abstractmethod
    def critic(self) -> TorchStateCritic | TorchStateActionCritic | None:
        """The critic (None where none was configured)."""

    def actor_critic(self, device: str | torch.device = "cpu") -> TorchActorCritic:
        """Policy and critic bundled for actor-critic trainers."""
        return TorchActorCritic(self.policy, self.critic, device=device)

    def graph(self) -> Any:
        """Model graphs of all policy and critic networks as one drawing."""
        from maze_lab.agent.graph import model_graph

        return model_graph(self)

    def _repr_svg_(self) -> str:
        return self.graph().to_svg()

    def save_graphs(self, directory: str | Path) -> list[Path]:
        """Write one SVG per network (``policy_<key>.svg``, ``critic_<key>.svg``) into ``directory``."""
        from maze_lab.agent.graph import composer_graphs

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, graph in composer_graphs(self).items():
            path = directory / f"{name}.svg"
            graph.save(path)
            paths.append(path)
        return paths
