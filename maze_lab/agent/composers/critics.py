"""Critic composers: which inputs each value (or Q) network sees, and the torch critic around them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from maze_lab.agent.composers.utils import build_network, specs_per_key
from maze_lab.agent.torch_state_action_critic import (
    Q_VALUE_KEY,
    Q_VALUES_SUFFIX,
    TorchSharedStateActionCritic,
    TorchStateActionCritic,
    TorchStepStateActionCritic,
    only_discrete,
    state_action_input_space,
)
from maze_lab.agent.torch_state_critic import (
    PREV_VALUE_KEY,
    TorchDeltaStateCritic,
    TorchSharedStateCritic,
    TorchStateCritic,
    TorchStepStateCritic,
)
from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.perception.perception_utils import merge_spaces, space_shapes

SHARED_CRITIC_KEY = 0
"""Critic key of shared critics."""


class CriticComposerInterface(ABC):
    """Interface of all critic composers."""

    @property
    @abstractmethod
    def critic(self) -> TorchStateCritic | TorchStateActionCritic:
        """The composed critic."""


class BaseStateCriticComposer(CriticComposerInterface):
    """Builds value networks (``obs_shapes`` -> ``{'value': (1,)}``) for the critic inputs of the critic type.

    :param observation_spaces_dict: Observation space per policy key.
    :param networks: Network configs or modules per critic key (see :meth:`critic_input_spaces`); a list with one
        entry per critic key, or one entry for all.
    :param action_spaces_dict: Unused by state critics (accepted for a uniform signature).
    :param agent_counts_dict: Agents per policy key.
    :param device: Device of the critic.
    """

    critic_class: type[TorchStateCritic] = TorchStepStateCritic

    def __init__(self, observation_spaces_dict: Mapping[StepKey, gym.spaces.Dict], networks: Any,
                 action_spaces_dict: Mapping[StepKey, gym.spaces.Dict] | None = None,
                 agent_counts_dict: Mapping[StepKey, int] | None = None, device: str | torch.device = "cpu",
                 **critic_kwargs: Any):
        self.observation_spaces_dict = dict(observation_spaces_dict)
        self.critic_kwargs = critic_kwargs
        spaces = self.critic_input_spaces(self.observation_spaces_dict, **critic_kwargs)
        specs = specs_per_key(networks, list(spaces), type(self).__name__)
        nets = {k: build_network(spec, f"value network for critic key {k!r}", obs_shapes=space_shapes(spaces[k]))
                for k, spec in specs.items()}
        self._critic = self.critic_class(nets, self.observation_spaces_dict, device=device, **critic_kwargs)

    @classmethod
    @abstractmethod
    def critic_input_spaces(cls, observation_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                            **critic_kwargs: Any) -> dict[StepKey, gym.spaces.Dict]:
        """The observation space each value network is built for, by critic key."""

    @property
    def critic(self) -> TorchStateCritic:
        """The composed critic."""
        return self._critic


class SharedStateCriticComposer(BaseStateCriticComposer):
    """One value network for all sub-steps (the default for gym-style envs).

    :param stack_observations: Feed the merged observations of all sub-steps (one value per env step) instead of
        applying the network to each sub-step's observation.
    """

    critic_class = TorchSharedStateCritic

    def __init__(self, observation_spaces_dict: Mapping[StepKey, gym.spaces.Dict], networks: Any,
                 action_spaces_dict: Mapping[StepKey, gym.spaces.Dict] | None = None,
                 agent_counts_dict: Mapping[StepKey, int] | None = None, device: str | torch.device = "cpu",
                 stack_observations: bool = False):
        super().__init__(observation_spaces_dict, networks, action_spaces_dict, agent_counts_dict, device,
                         stack_observations=stack_observations)

    @classmethod
    def critic_input_spaces(cls, observation_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                            stack_observations: bool = False, **_: Any) -> dict[StepKey, gym.spaces.Dict]:
        """The merged space when stacking, else the common space of all sub-steps."""
        if stack_observations:
            return {SHARED_CRITIC_KEY: merge_spaces(observation_spaces_dict.values())}
        spaces = list(observation_spaces_dict.values())
        if any(s != spaces[0] for s in spaces[1:]):
            raise ConfigurationError(
                "a shared critic without stack_observations applies one network to every sub-step, but the "
                f"observation spaces differ ({', '.join(map(str, observation_spaces_dict))}); set "
                "stack_observations: true or use StepStateCriticComposer"
            )
        return {SHARED_CRITIC_KEY: spaces[0]}


class StepStateCriticComposer(BaseStateCriticComposer):
    """One value network per policy key."""

    critic_class = TorchStepStateCritic

    @classmethod
    def critic_input_spaces(cls, observation_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                            **_: Any) -> dict[StepKey, gym.spaces.Dict]:
        """Each policy key's own observation space."""
        return dict(observation_spaces_dict)


class DeltaStateCriticComposer(BaseStateCriticComposer):
    """The first sub-step gets a regular value network; later ones predict a change and also see ``prev_value``."""

    critic_class = TorchDeltaStateCritic

    @classmethod
    def critic_input_spaces(cls, observation_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                            **_: Any) -> dict[StepKey, gym.spaces.Dict]:
        """Observation spaces, with ``prev_value`` added after the first sub-step."""
        out = {}
        for i, (key, space) in enumerate(observation_spaces_dict.items()):
            if i == 0:
                out[key] = space
            else:
                prev = gym.spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float32)
                out[key] = gym.spaces.Dict({**space.spaces, PREV_VALUE_KEY: prev})
        return out


StateCriticComposer = SharedStateCriticComposer
"""Alias: the default state critic."""


class BaseStateActionCriticComposer(CriticComposerInterface):
    """Builds ``num_q_networks`` Q networks per critic key.

    Discrete-only action spaces: networks get ``obs_shapes`` and ``output_shapes`` ``{'<head>_q_values': (n,)}``.
    Otherwise networks get the actions as extra inputs (Discrete one-hot) and ``output_shapes`` ``{'q_value': (1,)}``.

    :param observation_spaces_dict: Observation space per policy key.
    :param action_spaces_dict: Action space per policy key.
    :param networks: Network configs or modules per critic key (one list entry per key, or one for all).
    :param num_q_networks: Q networks per critic key (2 for clipped double Q learning).
    """

    critic_class: type[TorchStateActionCritic] = TorchStepStateActionCritic

    def __init__(self, observation_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                 action_spaces_dict: Mapping[StepKey, gym.spaces.Dict], networks: Any,
                 agent_counts_dict: Mapping[StepKey, int] | None = None, num_q_networks: int = 2,
                 device: str | torch.device = "cpu"):
        self.observation_spaces_dict = dict(observation_spaces_dict)
        self.action_spaces_dict = dict(action_spaces_dict)
        spaces = self.critic_input_spaces(self.observation_spaces_dict, self.action_spaces_dict)
        specs = specs_per_key(networks, list(spaces), type(self).__name__)
        nets = {}
        for key, spec in specs.items():
            if isinstance(spec, list | tuple) and spec and all(isinstance(n, nn.Module) for n in spec):
                if len(spec) != num_q_networks:
                    raise ConfigurationError(f"{type(self).__name__}: {len(spec)} Q networks given for critic key "
                                             f"{key!r}, expected num_q_networks={num_q_networks}")
                nets[key] = list(spec)
                continue
            obs_space, act_space = spaces[key]
            in_space, out_shapes = q_network_io(obs_space, act_space)
            nets[key] = [build_network(spec, f"Q network {i} for critic key {key!r}", obs_shapes=space_shapes(in_space),
                                       output_shapes=out_shapes) for i in range(num_q_networks)]
        self._critic = self.critic_class(nets, self.observation_spaces_dict, self.action_spaces_dict, device=device)

    @classmethod
    @abstractmethod
    def critic_input_spaces(cls, observation_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                            action_spaces_dict: Mapping[StepKey, gym.spaces.Dict]
                            ) -> dict[StepKey, tuple[gym.spaces.Dict, gym.spaces.Dict]]:
        """(observation space, action space) of each critic key."""

    @property
    def critic(self) -> TorchStateActionCritic:
        """The composed critic."""
        return self._critic


def q_network_io(obs_space: gym.spaces.Dict,
                 act_space: gym.spaces.Dict) -> tuple[gym.spaces.Dict, dict[str, tuple[int, ...]]]:
    """Input space and output shapes of a Q network for these spaces."""
    if only_discrete(act_space):
        return obs_space, {f"{h}{Q_VALUES_SUFFIX}": (int(s.n),) for h, s in act_space.spaces.items()}
    return state_action_input_space(obs_space, act_space), {Q_VALUE_KEY: (1,)}


class SharedStateActionCriticComposer(BaseStateActionCriticComposer):
    """One set of Q networks on the merged observations and actions of all sub-steps."""

    critic_class = TorchSharedStateActionCritic

    @classmethod
    def critic_input_spaces(cls, observation_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                            action_spaces_dict: Mapping[StepKey, gym.spaces.Dict]
                            ) -> dict[StepKey, tuple[gym.spaces.Dict, gym.spaces.Dict]]:
        """The merged spaces under the shared critic key."""
        return {SHARED_CRITIC_KEY: (merge_spaces(observation_spaces_dict.values()),
                                    merge_spaces(action_spaces_dict.values()))}


class StepStateActionCriticComposer(BaseStateActionCriticComposer):
    """Separate Q networks per policy key."""

    critic_class = TorchStepStateActionCritic

    @classmethod
    def critic_input_spaces(cls, observation_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                            action_spaces_dict: Mapping[StepKey, gym.spaces.Dict]
                            ) -> dict[StepKey, tuple[gym.spaces.Dict, gym.spaces.Dict]]:
        """Each policy key's own spaces."""
        return {k: (observation_spaces_dict[k], action_spaces_dict[k]) for k in observation_spaces_dict}


StateActionCriticComposer = SharedStateActionCriticComposer
"""Alias: the default state-action critic."""
