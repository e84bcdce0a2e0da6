"""The TemplateModelComposer: policy and critic networks derived from the spaces by a model builder."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from maze_lab.agent.composers.base import BaseModelComposer
from maze_lab.agent.composers.critics import (
    BaseStateActionCriticComposer,
    BaseStateCriticComposer,
    DeltaStateCriticComposer,
    SharedStateCriticComposer,
    q_network_io,
)
from maze_lab.agent.composers.policies import (
    BasePolicyComposer,
    ProbabilisticPolicyComposer,
    policy_network_keys,
)
from maze_lab.agent.composers.utils import resolve_type, split_target
from maze_lab.agent.torch_policy import TorchPolicy
from maze_lab.agent.torch_state_action_critic import TorchStateActionCritic
from maze_lab.agent.torch_state_critic import PREV_VALUE_KEY, TorchStateCritic
from maze_lab.core.env.structured_env import ActorID, StepKey
from maze_lab.core.utils.factory import ConfigurationError, Factory, _to_plain
from maze_lab.perception.action_masks import discrete_heads_of, match_action_masks
from maze_lab.perception.blocks import (
    ActionMaskingBlock,
    FunctionalBlock,
    InferenceBlock,
    LinearOutputBlock,
    PerceptionBlock,
)
from maze_lab.perception.builders.base import MASK_MODALITY, BaseModelBuilder
from maze_lab.perception.builders.concat import ConcatModelBuilderKeys
from maze_lab.perception.perception_utils import space_shapes
from maze_lab.perception.weight_init import make_module_init_normc

LATENT = ConcatModelBuilderKeys.LATENT


class _Reshape(nn.Module):
    """Reshapes flat logits to a multi-dim logits shape (kept as a module so models stay picklable)."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.shape = shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Reshape the last dim."""
        return x.reshape(*x.shape[:-1], *self.shape)


class TemplateModelComposer(BaseModelComposer):
    """Composes policy and critic networks from the spaces with a model builder (architecture template).

    :param action_spaces_dict: Action space per policy key.
    :param observation_spaces_dict: Observation space per policy key.
    :param agent_counts_dict: Agents per policy key.
    :param distribution_mapper_config: DistributionMapper config.
    :param model_builder: A BaseModelBuilder or its ``_target_`` config.
    :param policy: Policy composer config (``_target_`` only: templates build the networks), e.g.
        ``{"_target_": "ProbabilisticPolicyComposer", "substeps_with_separate_agent_nets": []}``.
    :param critic: Critic composer config (``_target_`` plus options such as ``stack_observations``), or None.
    :param shared_embedding_keys: Tensors of the policy networks the critic takes as input (list for all policy
        keys or dict per key); defaults to the builder's ``shared_embedding_keys``.
    :param action_masks: Observation masking each action head (``{head: obs_key}``); merged into the builder's.
        Heads not listed are masked by ``<head>_mask`` (or ``action_mask`` for a single Discrete head) where the
        observation space has it with the head's logits shape; other ``*_mask`` observations give a warning. A mask
        the builder's ``observation_modality_mapping`` leaves out is used only for masking; one it maps to a
        modality is an input feature as well.
    :param device: Device of policy and critic.
    """

    def __init__(self, action_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                 observation_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                 agent_counts_dict: Mapping[StepKey, int] | None = None,
                 distribution_mapper_config: Sequence[Mapping[str, Any]] | None = None,
                 model_builder: BaseModelBuilder | Mapping[str, Any] | None = None,
                 policy: Mapping[str, Any] | None = None, critic: Mapping[str, Any] | None = None,
                 shared_embedding_keys: Sequence[str] | Mapping[StepKey, Sequence[str]] | None = None,
                 action_masks: Mapping[str, str] | None = None, device: str | torch.device = "cpu"):
        super().__init__(action_spaces_dict, observation_spaces_dict, agent_counts_dict, distribution_mapper_config)
        if model_builder is None:
            raise ConfigurationError("TemplateModelComposer needs a model_builder (e.g. ConcatModelBuilder config)")
        if isinstance(_to_plain(model_builder), Mapping):
            target, params = split_target(model_builder, "model_builder")
            model_builder = resolve_type(target, BaseModelBuilder, "model_builder")(**params)
        self.model_builder: BaseModelBuilder = Factory(BaseModelBuilder).instantiate(model_builder)
        self.model_builder.action_masks.update(_to_plain(action_masks) or {})
        self.device = device
        all_heads = {h for space in self.action_spaces_dict.values() for h in space.spaces}
        unknown = sorted(set(self.model_builder.action_masks) - all_heads)
        if unknown:
            raise ConfigurationError(f"action_masks: {unknown} are not action heads; action heads: "
                                     f"{', '.join(sorted(all_heads))}")
        self.action_masks_dict: dict[StepKey, dict[str, str]] = {
            step: self.match_masks(obs_space, self.action_spaces_dict[step], f"policy {step!r}")
            for step, obs_space in self.observation_spaces_dict.items()}
        for masks in self.action_masks_dict.values():
            for key in masks.values():
                # a matched mask the config does not map is only used for masking (no "not used" warning)
                self.model_builder.observation_modality_mapping.setdefault(key, MASK_MODALITY)
        keys = _to_plain(shared_embedding_keys if shared_embedding_keys is not None
                         else self.model_builder.shared_embedding_keys) or []
        if isinstance(keys, Mapping):
            self.shared_embedding_keys = {k: list(keys.get(k, [])) for k in self.action_spaces_dict}
        else:
            self.shared_embedding_keys = {k: list(keys) for k in self.action_spaces_dict}

        # --- policy ---
        policy = _to_plain(policy) or {"_target_": ProbabilisticPolicyComposer}
        target, params = split_target(policy, "policy")
        if "networks" in params:
            raise ConfigurationError("template models build their own networks: remove 'networks' from the policy "
                                     "config (or use the CustomModelComposer)")
        self._policy_composer_type = resolve_type(target, BasePolicyComposer, "policy")
        separate = list(params.pop("substeps_with_separate_agent_nets", None) or [])
        policy_nets: dict[StepKey | ActorID, InferenceBlock] = {}
        for key in policy_network_keys(self.action_spaces_dict, self.agent_counts_dict, separate):
            step = key.step_key if isinstance(key, ActorID) else key
            policy_nets[key] = self.template_policy_net(self.observation_spaces_dict[step],
                                                        self.action_spaces_dict[step],
                                                        self.shared_embedding_keys.get(step, []),
                                                        action_masks=self.action_masks_dict[step])
        self._policy_composer = self._policy_composer_type(
            action_spaces_dict=self.action_spaces_dict, observation_spaces_dict=self.observation_spaces_dict,
            distribution_mapper=self.distribution_mapper, networks=policy_nets,
            agent_counts_dict=self.agent_counts_dict, substeps_with_separate_agent_nets=separate, device=device,
            **params)

        # --- critic ---
        self._critic_composer: BaseStateCriticComposer | BaseStateActionCriticComposer | None = None
        critic = _to_plain(critic)
        if critic:
            target, params = split_target(critic, "critic")
            if "networks" in params:
                raise ConfigurationError("template models build their own networks: remove 'networks' from the "
                                         "critic config (or use the CustomModelComposer)")
            ctype = resolve_type(target, (BaseStateCriticComposer, BaseStateActionCriticComposer), "critic")
            if issubclass(ctype, BaseStateCriticComposer):
                nets = self._state_critic_nets(ctype, params, policy_nets)
                self._critic_composer = ctype(observation_spaces_dict=self.observation_spaces_dict, networks=nets,
                                              action_spaces_dict=self.action_spaces_dict,
                                              agent_counts_dict=self.agent_counts_dict, device=device, **params)
            else:
                num_q = int(params.pop("num_q_networks", 2))
                spaces = ctype.critic_input_spaces(self.observation_spaces_dict, self.action_spaces_dict)
                nets_q = {k: [self.template_q_value_net(o, a) for _ in range(num_q)] for k, (o, a) in spaces.items()}
                self._critic_composer = ctype(observation_spaces_dict=self.observation_spaces_dict,
                                              action_spaces_dict=self.action_spaces_dict,
                                              networks=nets_q, agent_counts_dict=self.agent_counts_dict,
                                              num_q_networks=num_q, device=device, **params)

    # ---- networks ------------------------------------------------------------------------------------------

    def template_perception_net(self, observation_space: gym.spaces.Dict) -> InferenceBlock:
        """The builder's perception network (observations -> ``latent``), normc-initialized."""
        net = self.model_builder.from_observation_space(observation_space)
        net.apply(make_module_init_normc(1.0))
        return net

    def match_masks(self, observation_space: gym.spaces.Dict, action_space: gym.spaces.Dict,
                    what: str = "policy") -> dict[str, str]:
        """Action head -> mask observation, by the rule of :mod:`maze_lab.perception.action_masks`; warns for
        ``*_mask`` observations (and observations of modality ``mask``) that match no head."""
        heads = {h: tuple(self.distribution_mapper.required_logits_shape(h)) for h in action_space.spaces}
        explicit = {h: k for h, k in self.model_builder.action_masks.items() if h in heads}
        mask_like = [k for k in observation_space.spaces if self.model_builder.modality_of(k) == MASK_MODALITY]
        return match_action_masks(space_shapes(observation_space), heads, discrete_heads_of(action_space), explicit,
                                  what=f"TemplateModelComposer {what}", mask_like=mask_like)

    def template_policy_net(self, observation_space: gym.spaces.Dict, action_space: gym.spaces.Dict,
                            shared_embedding_keys: Sequence[str] = (),
                            action_masks: Mapping[str, str] | None = None) -> InferenceBlock:
        """Perception network plus one linear head per action, masked where an observation masks the head.

        :param action_masks: Head -> mask observation; None: matched by :meth:`match_masks`.
        """
        masks = dict(action_masks) if action_masks is not None else self.match_masks(observation_space, action_space)
        emb = self.template_perception_net(observation_space)
        blocks: dict[str, PerceptionBlock] = dict(emb.perception_dict.items())
        in_keys, in_shapes = list(emb.in_keys), list(emb.in_shapes)
        latent_shape = emb.out_shapes()[0]
        for head in action_space.spaces:
            logits_shape = tuple(self.distribution_mapper.required_logits_shape(head))
            units = int(math.prod(logits_shape))
            mask_key = masks.get(head)
            out_key = f"{head}_logits" if mask_key else head
            flat_key = out_key if len(logits_shape) == 1 else f"{out_key}_flat"
            head_block = LinearOutputBlock(LATENT, flat_key, latent_shape, output_units=units)
            head_block.apply(make_module_init_normc(0.01))
            blocks[flat_key] = head_block
            if flat_key != out_key:
                blocks[out_key] = FunctionalBlock(flat_key, out_key, (units,), func=_Reshape(logits_shape))
            if mask_key:
                mask_shape = tuple(observation_space.spaces[mask_key].shape)
                if mask_key not in in_keys:
                    in_keys.append(mask_key)
                    in_shapes.append(mask_shape)
                blocks[head] = ActionMaskingBlock([out_key, mask_key], head, [logits_shape, mask_shape])
        tensors = set(in_keys) | {k for b in blocks.values() for k in b.out_keys}
        missing = [k for k in shared_embedding_keys if k not in tensors]
        if missing:
            raise ConfigurationError(f"shared_embedding_keys {missing} are not tensors of the policy network; "
                                     f"available: {sorted(tensors)}")
        out_keys = list(action_space.spaces) + [k for k in shared_embedding_keys if k not in action_space.spaces]
        return InferenceBlock(in_keys=in_keys, out_keys=out_keys, in_shapes=in_shapes, perception_blocks=blocks)

    def template_value_net(self, observation_space: gym.spaces.Dict) -> InferenceBlock:
        """Perception network plus a linear ``value`` head."""
        emb = self.template_perception_net(observation_space)
        blocks: dict[str, PerceptionBlock] = dict(emb.perception_dict.items())
        blocks["value"] = LinearOutputBlock(LATENT, "value", emb.out_shapes()[0], output_units=1)
        blocks["value"].apply(make_module_init_normc(0.01))
        return InferenceBlock(in_keys=emb.in_keys, out_keys="value", in_shapes=emb.in_shapes,
                              perception_blocks=blocks)

    def template_shared_value_net(self, policy_net: InferenceBlock, observation_space: gym.spaces.Dict,
                                  shared_keys: Sequence[str]) -> InferenceBlock:
        """A value network on top of the policy's shared embedding tensors (fresh weights after them)."""
        fresh = self.template_perception_net(observation_space)
        derived = set(shared_keys)
        blocks: dict[str, PerceptionBlock] = {}
        for names in fresh.execution_plan.values():
            for name in names:
                block = fresh.perception_dict[name]
                if any(k in derived for k in block.in_keys) and not set(block.out_keys) <= derived:
                    if not all(k in derived for k in block.in_keys):
                        raise ConfigurationError(f"shared_embedding_keys {list(shared_keys)}: block '{name}' after "
                                                 f"them also needs {[k for k in block.in_keys if k not in derived]}")
                    blocks[name] = block
                    derived |= set(block.out_keys)
        if LATENT not in derived:
            raise ConfigurationError(f"shared_embedding_keys {list(shared_keys)} do not lead to '{LATENT}'")
        shapes = policy_net.tensor_shapes()
        blocks["value"] = LinearOutputBlock(LATENT, "value", shapes.get(LATENT) or fresh.out_shapes()[0],
                                            output_units=1)
        blocks["value"].apply(make_module_init_normc(0.01))
        return InferenceBlock(in_keys=list(shared_keys), out_keys="value",
                              in_shapes=[shapes[k] for k in shared_keys], perception_blocks=blocks)

    def template_q_value_net(self, observation_space: gym.spaces.Dict, action_space: gym.spaces.Dict) -> InferenceBlock:
        """Q network: ``<head>_q_values`` heads for discrete-only actions, else ``q_value`` on obs + actions."""
        in_space, out_shapes = q_network_io(observation_space, action_space)
        builder = self.model_builder
        added = []
        if in_space is not observation_space:
            # actions are inputs: give unmapped action keys the first feature modality so they are embedded
            default = next((m for m in builder.block_types if m not in getattr(builder, "PRESETS", ())), None)
            for head in action_space.spaces:
                if builder.modality_of(head) is None and default is not None:
                    builder.observation_modality_mapping[head] = default
                    added.append(head)
        try:
            emb = self.template_perception_net(in_space)
        finally:
            for head in added:
                del builder.observation_modality_mapping[head]
        blocks: dict[str, PerceptionBlock] = dict(emb.perception_dict.items())
        for key, shape in out_shapes.items():
            blocks[key] = LinearOutputBlock(LATENT, key, emb.out_shapes()[0], output_units=int(math.prod(shape)))
            blocks[key].apply(make_module_init_normc(0.01))
        return InferenceBlock(in_keys=emb.in_keys, out_keys=list(out_shapes), in_shapes=emb.in_shapes,
                              perception_blocks=blocks)

    def _state_critic_nets(self, ctype: type[BaseStateCriticComposer], params: dict[str, Any],
                           policy_nets: Mapping[StepKey | ActorID, InferenceBlock]) -> dict[StepKey, nn.Module]:
        spaces = ctype.critic_input_spaces(self.observation_spaces_dict, **params)
        shared = {k: v for k, v in self.shared_embedding_keys.items() if v}
        if not shared:
            added = False
            if issubclass(ctype, DeltaStateCriticComposer) and self.model_builder.modality_of(PREV_VALUE_KEY) is None:
                default = next((m for m in self.model_builder.block_types
                                if m not in getattr(self.model_builder, "PRESETS", ())), None)
                if default is not None:
                    self.model_builder.observation_modality_mapping[PREV_VALUE_KEY] = default
                    added = True
            try:
                return {k: self.template_value_net(space) for k, space in spaces.items()}
            finally:
                if added:
                    del self.model_builder.observation_modality_mapping[PREV_VALUE_KEY]
        if issubclass(ctype, DeltaStateCriticComposer):
            raise ConfigurationError("shared embeddings are not supported with the delta state critic")
        if issubclass(ctype, SharedStateCriticComposer) and params.get("stack_observations") and \
                len(self.action_spaces_dict) > 1:
            raise ConfigurationError("shared embeddings need one critic input per policy key; use the step critic "
                                     "or a shared critic without stack_observations")
        nets = {}
        for critic_key, space in spaces.items():
            step = critic_key if critic_key in self.action_spaces_dict else next(iter(self.action_spaces_dict))
            policy_net = policy_nets.get(step) or next(n for k, n in policy_nets.items()
                                                        if getattr(k, "step_key", None) == step)
            nets[critic_key] = self.template_shared_value_net(policy_net, space, self.shared_embedding_keys[step])
        return nets

    # ---- composer interface ----------------------------------------------------------------------------------

    @property
    def policy(self) -> TorchPolicy:
        """The composed policy."""
        return self._policy_composer.policy

    @property
    def critic(self) -> TorchStateCritic | TorchStateActionCritic | None:
        """The composed critic (None without critic config)."""
        return None if self._critic_composer is None else self._critic_composer.critic
