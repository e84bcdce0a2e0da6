"""Policy composers: build the policy networks of every policy key and wrap them in a TorchPolicy."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import torch

from maze_lab.agent.composers.utils import build_network, specs_per_key
from maze_lab.agent.torch_policy import TorchPolicy
from maze_lab.core.env.structured_env import ActorID, StepKey
from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.distributions.distribution_mapper import DistributionMapper
from maze_lab.perception.perception_utils import space_shapes


def policy_network_keys(action_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                        agent_counts_dict: Mapping[StepKey, int] | None,
                        substeps_with_separate_agent_nets: Sequence[StepKey] | None) -> list[StepKey | ActorID]:
    """Network keys of a policy: policy keys, with one ActorID per agent for keys with separate agent nets."""
    separate = list(substeps_with_separate_agent_nets or [])
    unknown = [k for k in separate if k not in action_spaces_dict]
    if unknown:
        raise ConfigurationError(f"substeps_with_separate_agent_nets: unknown policy keys {unknown}; keys: "
                                 f"{list(action_spaces_dict)}")
    counts = agent_counts_dict or {}
    keys: list[StepKey | ActorID] = []
    for step in action_spaces_dict:
        if step in separate:
            n = counts.get(step, 1)
            if n < 1:
                raise ConfigurationError(f"separate agent nets for policy key {step!r} need a fixed agent count, "
                                         f"got {n}")
            keys.extend(ActorID(step, i) for i in range(n))
        else:
            keys.append(step)
    return keys


class BasePolicyComposer(ABC):
    """Interface of the policy composers.

    :param action_spaces_dict: Action space per policy key.
    :param observation_spaces_dict: Observation space per policy key.
    :param distribution_mapper: Maps action heads to distributions (and logits shapes).
    :param agent_counts_dict: Agents per policy key.
    :param substeps_with_separate_agent_nets: Policy keys whose agents get one network each.
    """

    def __init__(self, action_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                 observation_spaces_dict: Mapping[StepKey, gym.spaces.Dict], distribution_mapper: DistributionMapper,
                 agent_counts_dict: Mapping[StepKey, int] | None = None,
                 substeps_with_separate_agent_nets: Sequence[StepKey] | None = None):
        self.action_spaces_dict = dict(action_spaces_dict)
        self.observation_spaces_dict = dict(observation_spaces_dict)
        self.distribution_mapper = distribution_mapper
        self.agent_counts_dict = dict(agent_counts_dict or dict.fromkeys(self.action_spaces_dict, 1))
        self.substeps_with_separate_agent_nets = list(substeps_with_separate_agent_nets or [])
        policy_network_keys(self.action_spaces_dict, self.agent_counts_dict, self.substeps_with_separate_agent_nets)

    def network_keys(self) -> list[StepKey | ActorID]:
        """One key per network: the policy key, or an ActorID per agent for separate agent nets."""
        return policy_network_keys(self.action_spaces_dict, self.agent_counts_dict,
                                   self.substeps_with_separate_agent_nets)

    def action_logits_shapes(self, step_key: StepKey) -> dict[str, tuple[int, ...]]:
        """Logits shape per action head of a policy key."""
        return {h: self.distribution_mapper.required_logits_shape(h) for h in self.action_spaces_dict[step_key].spaces}

    @property
    @abstractmethod
    def policy(self) -> TorchPolicy:
        """The composed policy."""


class ProbabilisticPolicyComposer(BasePolicyComposer):
    """Builds one probabilistic policy network per policy key (or per agent) and a TorchPolicy around them.

    :param networks: Network configs (``_target_`` dicts), classes or modules: a dict by policy key, a list with one
        entry per key (in order) or a single entry used for every key. Networks are built with ``obs_shapes`` and
        ``action_logits_shapes`` as keyword arguments, plus ``action_spaces`` (space per head) for networks whose
        constructor has that parameter.
    :param device: Device of the policy.
    """

    def __init__(self, action_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                 observation_spaces_dict: Mapping[StepKey, gym.spaces.Dict], distribution_mapper: DistributionMapper,
                 networks: Any, agent_counts_dict: Mapping[StepKey, int] | None = None,
                 substeps_with_separate_agent_nets: Sequence[StepKey] | None = None,
                 device: str | torch.device = "cpu"):
        super().__init__(action_spaces_dict, observation_spaces_dict, distribution_mapper, agent_counts_dict,
                         substeps_with_separate_agent_nets)
        keys = self.network_keys()
        specs = specs_per_key(networks, keys, "ProbabilisticPolicyComposer")
        nets = {}
        for key, spec in specs.items():
            step = key.step_key if isinstance(key, ActorID) else key
            nets[key] = build_network(spec, f"policy network for {key!r}",
                                      optional_kwargs={"action_spaces": dict(self.action_spaces_dict[step].spaces)},
                                      obs_shapes=space_shapes(self.observation_spaces_dict[step]),
                                      action_logits_shapes=self.action_logits_shapes(step))
        self._policy = TorchPolicy(nets, distribution_mapper, device=device,
                                   substeps_with_separate_agent_nets=self.substeps_with_separate_agent_nets)

    @property
    def policy(self) -> TorchPolicy:
        """The composed policy."""
        return self._policy
