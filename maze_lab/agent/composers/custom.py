"""The CustomModelComposer: user networks (by ``_target_``) for policy and critic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import torch

from maze_lab.agent.composers.base import BaseModelComposer
from maze_lab.agent.composers.critics import (
    BaseStateActionCriticComposer,
    BaseStateCriticComposer,
    CriticComposerInterface,
)
from maze_lab.agent.composers.policies import BasePolicyComposer
from maze_lab.agent.composers.utils import resolve_type, split_target
from maze_lab.agent.torch_policy import TorchPolicy
from maze_lab.agent.torch_state_action_critic import TorchStateActionCritic
from maze_lab.agent.torch_state_critic import TorchStateCritic
from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.utils.factory import ConfigurationError, _to_plain


class CustomModelComposer(BaseModelComposer):
    """Composes models from explicitly given networks.

    Policy networks are built with ``obs_shapes`` and ``action_logits_shapes``, value networks with ``obs_shapes``
    and Q networks with ``obs_shapes`` and ``output_shapes`` (plus the parameters in their config).

    :param action_spaces_dict: Action space per policy key.
    :param observation_spaces_dict: Observation space per policy key.
    :param agent_counts_dict: Agents per policy key.
    :param distribution_mapper_config: DistributionMapper config.
    :param policy: ``{"_target_": <policy composer>, "networks": [...], ...}`` or a ready policy composer.
    :param critic: ``{"_target_": <critic composer>, "networks": [...], ...}``, a ready critic composer, or None.
    :param device: Device of policy and critic.
    """

    def __init__(self, action_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                 observation_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                 agent_counts_dict: Mapping[StepKey, int] | None = None,
                 distribution_mapper_config: Sequence[Mapping[str, Any]] | None = None,
                 policy: Mapping[str, Any] | BasePolicyComposer | None = None,
                 critic: Mapping[str, Any] | CriticComposerInterface | None = None,
                 device: str | torch.device = "cpu"):
        super().__init__(action_spaces_dict, observation_spaces_dict, agent_counts_dict, distribution_mapper_config)
        if policy is None:
            raise ConfigurationError("CustomModelComposer needs a policy config with '_target_' and 'networks'")
        if isinstance(policy, BasePolicyComposer):
            self._policy_composer = policy
        else:
            target, params = split_target(policy, "policy")
            cls = resolve_type(target, BasePolicyComposer, "policy")
            params.setdefault("agent_counts_dict", self.agent_counts_dict)
            self._policy_composer = cls(action_spaces_dict=self.action_spaces_dict,
                                        observation_spaces_dict=self.observation_spaces_dict,
                                        distribution_mapper=self.distribution_mapper, device=device, **params)
        self._critic_composer: CriticComposerInterface | None = None
        critic = critic if isinstance(critic, CriticComposerInterface) else _to_plain(critic)
        if isinstance(critic, CriticComposerInterface):
            self._critic_composer = critic
        elif critic:
            target, params = split_target(critic, "critic")
            cls = resolve_type(target, (BaseStateCriticComposer, BaseStateActionCriticComposer), "critic")
            params.setdefault("agent_counts_dict", self.agent_counts_dict)
            self._critic_composer = cls(observation_spaces_dict=self.observation_spaces_dict,
                                        action_spaces_dict=self.action_spaces_dict, device=device, **params)

    @property
    def policy(self) -> TorchPolicy:
        """The composed policy."""
        return self._policy_composer.policy

    @property
    def critic(self) -> TorchStateCritic | TorchStateActionCritic | None:
        """The composed critic (None without critic config)."""
        return None if self._critic_composer is None else self._critic_composer.critic
