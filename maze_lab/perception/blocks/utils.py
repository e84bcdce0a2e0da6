"""Helpers shared by the blocks: resolving non-linearities and per-layer parameters."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from maze_lab.core.utils.factory import ConfigurationError, locate

NonLinType = str | type[nn.Module]

_ACTIVATIONS = {
    name: getattr(nn, name)
    for name in (
        "ReLU", "ReLU6", "LeakyReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "Tanh", "Sigmoid",
        "Softplus", "Softsign", "Hardtanh", "Hardswish", "Hardsigmoid", "PReLU", "Identity", "LogSigmoid", "Tanhshrink",
    )
}


def resolve_non_lin(non_lin: NonLinType) -> type[nn.Module]:
    """Resolve ``'torch.nn.ReLU'``, ``'ReLU'`` or ``nn.ReLU`` to the activation class."""
    if isinstance(non_lin, type) and issubclass(non_lin, nn.Module):
        return non_lin
    if isinstance(non_lin, str):
        short = non_lin.rsplit(".", 1)[-1]
        if short in _ACTIVATIONS:
            return _ACTIVATIONS[short]
        try:
            cls = locate(non_lin)
        except ConfigurationError:
            cls = None
        if isinstance(cls, type) and issubclass(cls, nn.Module):
            return cls
    raise ConfigurationError(
        f"unknown non-linearity {non_lin!r}; valid names: {', '.join(sorted(_ACTIVATIONS))} "
        f"(or a dotted path / class of a torch.nn.Module)"
    )


def per_layer(value: Any, n_layers: int, name: str) -> list[Any]:
    """Broadcast a scalar parameter to ``n_layers`` entries, or check the length of a list."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        values = list(value)
        if len(values) != n_layers:
            raise ConfigurationError(f"{name} has {len(values)} entries, expected one per layer ({n_layers})")
        return values
    return [value] * n_layers


def resolve_callable(func: Callable | str) -> Callable:
    """Resolve a callable or a dotted path to one."""
    if isinstance(func, str):
        func = locate(func)
    if not callable(func):
        raise ConfigurationError(f"{func!r} is not callable")
    return func


def conv_module(dim: int) -> type[nn.Module]:
    """The convolution class for 1d or 2d inputs."""
    if dim == 1:
        return nn.Conv1d
    if dim == 2:
        return nn.Conv2d
    raise ConfigurationError(f"convolution_dimension must be 1 or 2, got {dim}")


def finfo_min(t: torch.Tensor) -> float:
    """The most negative finite value of the tensor's floating dtype."""
    return torch.finfo(t.dtype).min
