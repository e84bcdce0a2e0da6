"""Task-specific networks for the masked structured Cutting-2D env; in both models the selection policy scores every
inventory slot with one shared network, so what it learns about one piece holds for all.

- The Maze-like model (``MazeLike*``, ``conf/model/cutting2d_struct_masked_maze.yaml``), built as the seed's tutorial
  model is: raw inventory rows and the raw order are embedded, a slot's logit is the dot product of the two
  embeddings; nothing is computed for the networks.
- The engineered model (``PieceSelectionNet``, ``CuttingNet``, ``StructuredPolicyNet``,
  ``conf/model/cutting2d_struct_masked_slots.yaml``): the slot network gets sorted sizes, differences to the order
  and areas as features. A score falling with area is already the greedy policy, so it learns the task trivially.

Both are built by ``CustomModelComposer``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from maze_lab.perception.blocks.utils import NonLinType, resolve_non_lin
from maze_lab.perception.weight_init import make_module_init_normc

_MASKED = -1e9


def _mlp(n_in: int, hidden: Sequence[int], n_out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(n_in, h), nn.ReLU()]
        n_in = h
    layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)


class PieceSelectionNet(nn.Module):
    """Policy key 0 of the engineered model: a logit per inventory slot from engineered features (sorted slot piece
    and order, their difference, slot area and area minus the order's area), masked.

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


# ---- the Maze-like model: raw inputs, learned comparison ------------------------------------------------------
# The networks below see only what the env observes (raw piece sizes; ``obs_scale`` can divide them, as the range
# normalization of the seed's tutorial wrappers does with 3) and learn how a slot relates to the order: no sorted
# sizes, no areas, no differences are computed for them. Output layers start small (normc std 0.01), so the
# untrained policy is close to uniform over the allowed choices.


def _dense(n_in: int, hidden_units: Sequence[int], non_lin: NonLinType) -> tuple[nn.Sequential, int]:
    """A stack of linear layers, each followed by the non-linearity; returns it and its output width."""
    act = resolve_non_lin(non_lin)
    layers: list[nn.Module] = []
    for h in hidden_units:
        layers += [nn.Linear(n_in, int(h)), act()]
        n_in = int(h)
    return nn.Sequential(*layers), n_in


def _init_normc(body: Sequence[nn.Module], heads: Sequence[nn.Module], output_std: float) -> None:
    """normc init: std 1 for hidden layers, ``output_std`` for the output layers; zero biases."""
    for m in body:
        m.apply(make_module_init_normc(1.0))
    for m in heads:
        m.apply(make_module_init_normc(output_std))


class MazeLikeSelectionNet(nn.Module):
    """Policy key 0: every inventory row and the order are embedded; a slot's logit compares the two embeddings.

    :param obs_shapes: observation shapes (``inventory`` (N, 2), ``ordered_piece`` (2,), ``inventory_mask`` (N,)).
    :param action_logits_shapes: ``{"piece_idx": (N,)}``.
    :param hidden_units: hidden layers of the slot and the order embedding nets.
    :param embedding_dim: width of both embeddings.
    :param comparison: ``dot`` (logit = dot product of the embeddings, as the seed's tutorial model does) or
        ``mlp`` (an MLP on the concatenated embeddings).
    :param obs_scale: piece sizes are divided by this (1: raw sizes; the seed's tutorial wrappers divide by 3).
    :param output_std: normc std of the output layers.
    """

    def __init__(self, obs_shapes: Mapping[str, Sequence[int]], action_logits_shapes: Mapping[str, Sequence[int]],
                 hidden_units: Sequence[int] = (32,), embedding_dim: int = 7, comparison: str = "dot",
                 obs_scale: float = 1.0, output_std: float = 0.01, non_lin: NonLinType = nn.ReLU):
        super().__init__()
        self.n_slots = int(obs_shapes["inventory"][0])
        if tuple(action_logits_shapes["piece_idx"]) != (self.n_slots,):
            raise ValueError(f"piece_idx logits {tuple(action_logits_shapes['piece_idx'])} must match the inventory "
                             f"slots ({self.n_slots},)")
        if comparison not in ("dot", "mlp"):
            raise ValueError(f"comparison must be 'dot' or 'mlp', got {comparison!r}")
        self.comparison = comparison
        self.obs_scale = float(obs_scale)
        self.slot_body, n_slot = _dense(int(obs_shapes["inventory"][-1]), hidden_units, non_lin)
        self.order_body, n_order = _dense(int(math.prod(obs_shapes["ordered_piece"])), hidden_units, non_lin)
        self.slot_embed = nn.Linear(n_slot, embedding_dim)
        self.order_embed = nn.Linear(n_order, embedding_dim)
        heads: list[nn.Module] = [self.slot_embed, self.order_embed]
        self.score: nn.Module | None = None
        if comparison == "mlp":
            body, n_out = _dense(2 * embedding_dim, hidden_units, non_lin)
            self.score = nn.Sequential(body, nn.Linear(n_out, 1))
            _init_normc([self.slot_body, self.order_body, self.slot_embed, self.order_embed, body], [self.score[-1]],
                        output_std)
        else:
            _init_normc([self.slot_body, self.order_body], heads, output_std)
        self.out_keys = ["piece_idx"]

    def forward(self, obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Masked logits of all slots (slots whose piece does not fit the order get the lowest logit)."""
        slots = self.slot_embed(self.slot_body(obs["inventory"].float() / self.obs_scale))  # (..., N, E)
        order = self.order_embed(self.order_body(obs["ordered_piece"].float() / self.obs_scale)).unsqueeze(-2)
        if self.score is None:
            logits = (slots * order).sum(-1)
        else:
            logits = self.score(torch.cat([slots, order.expand_as(slots)], dim=-1)).squeeze(-1)
        mask = obs["inventory_mask"]
        return {"piece_idx": torch.where(mask > 0.5, logits, torch.full_like(logits, _MASKED))}


class MazeLikeCuttingNet(nn.Module):
    """Policy key 1: selected piece and order embedded separately, concatenated, two linear heads (rotation masked).

    :param obs_shapes: observation shapes (``selected_piece`` (2,), ``ordered_piece`` (2,), ``cutting_mask`` (2,)).
    :param action_logits_shapes: ``{"cut_rotation": (2,), "cut_order": (2,)}``.
    """

    def __init__(self, obs_shapes: Mapping[str, Sequence[int]], action_logits_shapes: Mapping[str, Sequence[int]],
                 hidden_units: Sequence[int] = (32,), obs_scale: float = 1.0, output_std: float = 0.01,
                 non_lin: NonLinType = nn.ReLU):
        super().__init__()
        self.obs_scale = float(obs_scale)
        self.selected_body, n_sel = _dense(int(math.prod(obs_shapes["selected_piece"])), hidden_units, non_lin)
        self.order_body, n_order = _dense(int(math.prod(obs_shapes["ordered_piece"])), hidden_units, non_lin)
        self.rotation = nn.Linear(n_sel + n_order, int(math.prod(action_logits_shapes["cut_rotation"])))
        self.order = nn.Linear(n_sel + n_order, int(math.prod(action_logits_shapes["cut_order"])))
        _init_normc([self.selected_body, self.order_body], [self.rotation, self.order], output_std)
        self.out_keys = ["cut_rotation", "cut_order"]

    def forward(self, obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Logits of both cutting heads; rotations the order does not fit get the lowest logit."""
        latent = torch.cat([self.selected_body(obs["selected_piece"].float() / self.obs_scale),
                            self.order_body(obs["ordered_piece"].float() / self.obs_scale)], dim=-1)
        rotation = self.rotation(latent)
        mask = obs["cutting_mask"]
        return {"cut_rotation": torch.where(mask > 0.5, rotation, torch.full_like(rotation, _MASKED)),
                "cut_order": self.order(latent)}


class MazeLikeValueNet(nn.Module):
    """State value of either sub-step: each piece observation (``inventory``, ``ordered_piece``, ``selected_piece``)
    embedded by its own dense layer, concatenated, one linear output; masks and the inventory size are not used.

    :param obs_shapes: observation shapes of the sub-step.
    :param inventory_pooling: ``flatten`` (the inventory as one vector, as the seed's tutorial critic does) or
        ``sum`` (every row embedded alike, the embeddings summed: the value does not depend on the slot order).
    """

    PIECE_KEYS = ("inventory", "selected_piece", "ordered_piece")

    def __init__(self, obs_shapes: Mapping[str, Sequence[int]], hidden_units: Sequence[int] = (32,),
                 obs_scale: float = 1.0, output_std: float = 0.01, non_lin: NonLinType = nn.ReLU,
                 inventory_pooling: str = "flatten"):
        super().__init__()
        self.keys = [k for k in self.PIECE_KEYS if k in obs_shapes]
        if not self.keys:
            raise ValueError(f"MazeLikeValueNet needs one of {list(self.PIECE_KEYS)}, got {list(obs_shapes)}")
        if inventory_pooling not in ("flatten", "sum"):
            raise ValueError(f"inventory_pooling must be 'flatten' or 'sum', got {inventory_pooling!r}")
        self.obs_scale = float(obs_scale)
        self.pool_rows = inventory_pooling == "sum"
        # dims flattened into one vector per key (a summed inventory keeps its rows)
        self.event_dims = {k: 1 if (k == "inventory" and self.pool_rows) else len(obs_shapes[k]) for k in self.keys}
        bodies, width = {}, 0
        for k in self.keys:
            n_in = int(obs_shapes[k][-1]) if (k == "inventory" and self.pool_rows) else int(math.prod(obs_shapes[k]))
            bodies[k], n_out = _dense(n_in, hidden_units, non_lin)
            width += n_out
        self.bodies = nn.ModuleDict(bodies)
        self.value = nn.Linear(width, 1)
        _init_normc(list(self.bodies.values()), [self.value], output_std)

    def forward(self, obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``{"value": (..., 1)}``."""
        feats = []
        for k in self.keys:
            x = obs[k].float().flatten(start_dim=obs[k].dim() - self.event_dims[k]) / self.obs_scale
            h = self.bodies[k](x)
            feats.append(h.sum(-2) if (k == "inventory" and self.pool_rows) else h)
        return {"value": self.value(torch.cat(feats, dim=-1))}
