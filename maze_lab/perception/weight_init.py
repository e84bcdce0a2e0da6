"""Weight initialization helpers for perception models."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn


def normc_initializer(weight: torch.Tensor, std: float = 1.0) -> None:
    """Initialize a weight tensor with normal rows rescaled to norm ``std`` (column-normalized init)."""
    with torch.no_grad():
        w = torch.randn_like(weight)
        flat = w.reshape(w.shape[0], -1)
        flat *= std / flat.norm(dim=1, keepdim=True).clamp(min=1e-8)
        weight.copy_(flat.reshape(weight.shape))


def make_module_init_normc(std: float = 1.0) -> Callable[[nn.Module], None]:
    """A function for ``module.apply`` that gives linear/conv weights normc init with ``std`` and zero biases."""

    def init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Conv1d | nn.Conv2d):
            normc_initializer(module.weight, std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    return init


def compute_sigmoid_bias(probability: float) -> float:
    """The bias that makes a sigmoid output ``probability`` for zero input (e.g. for Bernoulli action heads)."""
    if not 0.0 < probability < 1.0:
        raise ValueError(f"probability must be in (0, 1), got {probability}")
    return float(math.log(probability / (1.0 - probability)))



