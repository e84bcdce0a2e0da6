"""Numerical helpers for the distributions."""

from __future__ import annotations

import torch

EPSILON = 1e-6
"""Keeps squashed and Beta actions strictly inside their open intervals."""

MIN_LOG_STD = -20.0
"""Lower clamp of log standard deviations produced by networks."""

MAX_LOG_STD = 2.0
"""Upper clamp of log standard deviations produced by networks."""


def atanh(x: torch.Tensor) -> torch.Tensor:
    """Inverse hyperbolic tangent."""
    return 0.5 * (torch.log1p(x) - torch.log1p(-x))


def tensor_clamp(x: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """Clamp with tensor bounds that broadcast against ``x``."""
    return torch.maximum(torch.minimum(x, high), low)


def sum_trailing(t: torch.Tensor, n_dims: int) -> torch.Tensor:
    """Sum over the last ``n_dims`` dims (no-op for 0)."""
    return t.sum(dim=tuple(range(-n_dims, 0))) if n_dims else t
