"""Flatten-and-concatenate networks: every observation is flattened, all are concatenated, then a dense stack."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import gymnasium as gym
import torch
from torch import nn

from maze_lab.perception.action_masks import discrete_heads_of, match_action_masks
from maze_lab.perception.blocks import (
    ActionMaskingBlock,
    ConcatenationBlock,
    DenseBlock,
    FlattenBlock,
    FunctionalBlock,
    InferenceBlock,
    LinearOutputBlock,
    PerceptionBlock,
)
from maze_lab.perception.blocks.utils import NonLinType
from maze_lab.perception.weight_init import make_module_init_normc


def _unsqueeze_last(x: torch.Tensor) -> torch.Tensor:
    return x.unsqueeze(-1)


class FlattenConcatBaseNet(nn.Module):
    """Flattens each observation to a vector, concatenates them and applies a DenseBlock (tensor ``latent``).

    :param obs_shapes: Shape per observation.
    :param hidden_units: Units of the dense layers.
    :param non_lin: Activation class or name.
    """

    def __init__(self, obs_shapes: Mapping[str, Sequence[int]], hidden_units: Sequence[int],
                 non_lin: NonLinType = nn.ReLU):
        super().__init__()
        self.obs_shapes = {k: tuple(v) for k, v in obs_shapes.items()}
        self.perception_dict: dict[str, PerceptionBlock] = {}
        flat_keys, flat_shapes = [], []
        for key, shape in self.obs_shapes.items():
            out_key = f"{key}_flat"
            if len(shape) == 0:
                block: PerceptionBlock = FunctionalBlock(key, out_key, shape, func=_unsqueeze_last)
            elif len(shape) == 1:
                flat_keys.append(key)
                flat_shapes.append(shape)
                continue
            else:
                block = FlattenBlock(key, out_key, shape, num_flatten_dims=len(shape))
            self.perception_dict[out_key] = block
            flat_keys.append(out_key)
            flat_shapes.append(block.out_shapes()[0])
        self.perception_dict["concat"] = ConcatenationBlock(flat_keys, "concat", flat_shapes, concat_dim=-1)
        self.perception_dict["latent"] = DenseBlock("concat", "latent", self.perception_dict["concat"].out_shapes(),
                                                    hidden_units=hidden_units, non_lin=non_lin)
        self.latent_shape = self.perception_dict["latent"].out_shapes()[0]

    def _compile(self, out_keys: Sequence[str], in_keys: Sequence[str] | None = None) -> InferenceBlock:
        keys = list(in_keys or self.obs_shapes)
        net = InferenceBlock(in_keys=keys, out_keys=list(out_keys), in_shapes=[self.obs_shapes[k] for k in keys],
                             perception_blocks=self.perception_dict)
        return net

    def forward(self, x: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Run the inference graph."""
        return self.perception_net(x)


class FlattenConcatPolicyNet(FlattenConcatBaseNet):
    """Flatten-concat policy: one linear output per action head, masked where an observation masks the head.

    Masks are matched by :func:`maze_lab.perception.action_masks.match_action_masks` (``<head>_mask``, or
    ``action_mask`` for a single Discrete head, or ``action_masks``); a matched mask stays an input feature as well
    (it tells the network which actions are available). Observations named ``*_mask`` that match no head give a
    warning.

    :param action_logits_shapes: Logits shape per action head.
    :param action_masks: Explicit ``{action head: mask observation}`` pairs.
    :param action_spaces: Action space per head (given by the policy composer; decides which heads are Discrete).
    """

    def __init__(self, obs_shapes: Mapping[str, Sequence[int]], action_logits_shapes: Mapping[str, Sequence[int]],
                 hidden_units: Sequence[int], non_lin: NonLinType = nn.ReLU,
                 action_masks: Mapping[str, str] | None = None,
                 action_spaces: Mapping[str, gym.spaces.Space] | None = None):
        super().__init__(obs_shapes, hidden_units, non_lin)
        discrete = discrete_heads_of(action_spaces) if action_spaces is not None else None
        self.action_masks = match_action_masks(self.obs_shapes, action_logits_shapes, discrete, action_masks,
                                               what=type(self).__name__)
        for head, shape in action_logits_shapes.items():
            units = int(math.prod(shape))
            # the linear block keeps the head's name, so that checkpoints of unmasked nets still load
            out_key = f"{head}_logits" if head in self.action_masks else head
            self.perception_dict[head] = LinearOutputBlock("latent", out_key, self.latent_shape, output_units=units)
            if head in self.action_masks:
                mask_key = self._flat_mask(self.action_masks[head])
                self.perception_dict[f"{head}_masking"] = ActionMaskingBlock([out_key, mask_key], head,
                                                                             [(units,), (units,)])
        self.perception_net = self._compile(list(action_logits_shapes))
        self.perception_net.apply(make_module_init_normc(1.0))
        for head in action_logits_shapes:
            self.perception_dict[head].apply(make_module_init_normc(0.01))

    def _flat_mask(self, mask_key: str) -> str:
        """The mask as a vector tensor (multi-dim masks go through the flatten block of their feature)."""
        shape = self.obs_shapes[mask_key]
        return mask_key if len(shape) == 1 else f"{mask_key}_flat"


class FlattenConcatMaskedPolicyNet(FlattenConcatBaseNet):
    """Flatten-concat policy whose heads are masked by their mask observations, by default used only for masking.

    Masks are matched as in :class:`FlattenConcatPolicyNet` (``<head>_mask``, ``action_mask`` for a single Discrete
    head, or ``action_masks``).

    :param remove_mask_from_obs: Use masks only for masking, not as network input features.
    :param action_masks: Explicit ``{action head: mask observation}`` pairs.
    :param action_spaces: Action space per head (given by the policy composer; decides which heads are Discrete).
    """

    def __init__(self, obs_shapes: Mapping[str, Sequence[int]], action_logits_shapes: Mapping[str, Sequence[int]],
                 hidden_units: Sequence[int], non_lin: NonLinType = nn.ReLU, remove_mask_from_obs: bool = True,
                 action_masks: Mapping[str, str] | None = None,
                 action_spaces: Mapping[str, gym.spaces.Space] | None = None):
        all_shapes = {k: tuple(v) for k, v in obs_shapes.items()}
        discrete = discrete_heads_of(action_spaces) if action_spaces is not None else None
        masks = match_action_masks(all_shapes, action_logits_shapes, discrete, action_masks, what=type(self).__name__)
        features = {k: v for k, v in all_shapes.items() if not (remove_mask_from_obs and k in masks.values())}
        super().__init__(features, hidden_units, non_lin)
        self.obs_shapes = all_shapes
        self.action_masks = masks
        for head, shape in action_logits_shapes.items():
            units = int(math.prod(shape))
            if head in masks:
                mask_key, mask_shape = masks[head], self.obs_shapes[masks[head]]
                if len(mask_shape) != 1:
                    self.perception_dict[f"{mask_key}_vector"] = FlattenBlock(mask_key, f"{mask_key}_vector",
                                                                              mask_shape, len(mask_shape))
                    mask_key = f"{mask_key}_vector"
                self.perception_dict[f"{head}_logits"] = LinearOutputBlock("latent", f"{head}_logits",
                                                                           self.latent_shape, output_units=units)
                self.perception_dict[head] = ActionMaskingBlock([f"{head}_logits", mask_key], head,
                                                                [(units,), (units,)])
            else:
                self.perception_dict[head] = LinearOutputBlock("latent", head, self.latent_shape, output_units=units)
        self.perception_net = self._compile(list(action_logits_shapes), in_keys=list(self.obs_shapes))
        self.perception_net.apply(make_module_init_normc(1.0))
        for head in action_logits_shapes:
            key = f"{head}_logits" if head in masks else head
            self.perception_dict[key].apply(make_module_init_normc(0.01))


class FlattenConcatStateValueNet(FlattenConcatBaseNet):
    """Flatten-concat state value network: output ``value`` (1,)."""

    def __init__(self, obs_shapes: Mapping[str, Sequence[int]], hidden_units: Sequence[int],
                 non_lin: NonLinType = nn.ReLU):
        super().__init__(obs_shapes, hidden_units, non_lin)
        self.perception_dict["value"] = LinearOutputBlock("latent", "value", self.latent_shape, output_units=1)
        self.perception_net = self._compile(["value"])
        self.perception_net.apply(make_module_init_normc(1.0))
        self.perception_dict["value"].apply(make_module_init_normc(0.01))


class FlattenConcatStateActionValueNet(FlattenConcatBaseNet):
    """Flatten-concat Q network: one linear output per entry of ``output_shapes``.

    :param output_shapes: Output shape per key (``<head>_q_values`` or ``q_value``).
    """

    def __init__(self, obs_shapes: Mapping[str, Sequence[int]], output_shapes: Mapping[str, Sequence[int]],
                 hidden_units: Sequence[int], non_lin: NonLinType = nn.ReLU):
        super().__init__(obs_shapes, hidden_units, non_lin)
        for key, shape in output_shapes.items():
            self.perception_dict[key] = LinearOutputBlock("latent", key, self.latent_shape,
                                                          output_units=int(math.prod(shape)))
        self.perception_net = self._compile(list(output_shapes))
        self.perception_net.apply(make_module_init_normc(1.0))
        for key in output_shapes:
            self.perception_dict[key].apply(make_module_init_normc(0.01))
