"""Task-specific networks for the masked structured Cutting-2D env: the selection policy scores every inventory
slot with one shared network (so what it learns about one piece holds for all), the cutting policy and the
critics are small MLPs. Built by ``CustomModelComposer`` from ``conf/model/cutting2d_struct_masked_slots.yaml``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

_MASKED = -1e9


def _mlp(n_in: int, hidden: Sequence[int], n_out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(n_in, h), nn.ReLU()]
        n_in = h
    layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)


class PieceSelectionNet(nn.Module):
    """Policy key 0: a logit per inventory slot from (slot piece, order, piece-minus-order, areas), masked.

    :param obs_shapes: observation shapes (``inventory`` (N, 2), ``ordered_piece`` (2,), ``inventory_mask`` (N,)).
    :param action_logits_shapes: ``{"piece_idx": (N,)}``.
    """

    def __init__(self, obs_shapes: Mapping[str, Sequence[int]], action_logits_shapes: Mapping[str, Sequence[int]],
                 hidden_units: Sequence[int] = (32, 32)):
        super().__init__()
        self.n_slots = int(obs_shapes["inventory"][0])
        if tuple(action_logits_shapes["piece_idx"]) != (self.n_slots,):
            raise ValueError(f"piece_idx logits {tuple(action_logits_shapes['piece_idx'])} must match the inventory "
                             f"slots ({self.n_slots},)")
        self.slot_net = _mlp(8, hidden_units, 1)
        self.out_keys = ["piece_idx"]

    def forward(self, obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Scores of all slots; slots whose piece does not fit the order get the lowest logit."""
        inv = obs["inventory"].float()  # (..., N, 2)
        order = obs["ordered_piece"].float().unsqueeze(-2).expand_as(inv)  # (..., N, 2)
        inv_sorted = torch.sort(inv, dim=-1).values
        order_sorted = torch.sort(order, dim=-1).values
        area = (inv[..., :1] * inv[..., 1:]) / 10.0
        order_area = (order[..., :1] * order[..., 1:]) / 10.0
        features = torch.cat([inv_sorted, order_sorted, inv_sorted - order_sorted, area, area - order_area], dim=-1)
        logits = self.slot_net(features).squeeze(-1)
        mask = obs["inventory_mask"]
        return {"piece_idx": torch.where(mask > 0.5, logits, torch.full_like(logits, _MASKED))}


class CuttingNet(nn.Module):
    """Policy key 1: rotation (masked by ``cutting_mask``) and cut order from the selected and ordered piece."""

    def __init__(self, obs_shapes: Mapping[str, Sequence[int]], action_logits_shapes: Mapping[str, Sequence[int]],
                 hidden_units: Sequence[int] = (32, 32)):
        super().__init__()
        n_in = sum(int(math.prod(obs_shapes[k])) for k in ("selected_piece", "ordered_piece", "cutting_mask"))
        self.rotation = _mlp(n_in, hidden_units, int(math.prod(action_logits_shapes["cut_rotation"])))
        self.order = _mlp(n_in, hidden_units, int(math.prod(action_logits_shapes["cut_order"])))
        self.out_keys = ["cut_rotation", "cut_order"]

    def forward(self, obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Logits of both cutting heads."""
        x = torch.cat([obs["selected_piece"].float(), obs["ordered_piece"].float(), obs["cutting_mask"].float()],
                      dim=-1)
        rotation = self.rotation(x)
        mask = obs["cutting_mask"]
        return {"cut_rotation": torch.where(mask > 0.5, rotation, torch.full_like(rotation, _MASKED)),
                "cut_order": self.order(x)}


class StructuredPolicyNet(nn.Module):
    """Dispatches to the selection or the cutting network by the observation keys of the policy key."""

    def __init__(self, obs_shapes: Mapping[str, Sequence[int]], action_logits_shapes: Mapping[str, Sequence[int]],
                 hidden_units: Sequence[int] = (32, 32)):
        super().__init__()
        if "piece_idx" in action_logits_shapes:
            self.net: nn.Module = PieceSelectionNet(obs_shapes, action_logits_shapes, hidden_units)
        else:
            self.net = CuttingNet(obs_shapes, action_logits_shapes, hidden_units)
        self.out_keys = self.net.out_keys

    def forward(self, obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The logits of this policy key's action heads."""
        return self.net(obs)
