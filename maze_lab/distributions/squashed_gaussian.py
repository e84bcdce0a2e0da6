"""Tanh-squashed diagonal Gaussian for bounded Box action spaces."""

from __future__ import annotations

import math

import gymnasium as gym
import torch

from maze_lab.distributions.base import BoxParameterDistribution, ProbabilityDistribution
from maze_lab.distributions.gaussian import split_mean_log_std
from maze_lab.distributions.utils import EPSILON, atanh

_BOUNDS_CACHE: dict[tuple[int, torch.dtype, torch.device], tuple[gym.spaces.Box, tuple[torch.Tensor, ...]]] = {}


def _bounds(space: gym.spaces.Box, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
    """(low, high, center, half range, log of the half range) of a Box as tensors, cached per space object: a
    distribution is built for every step of a rollout and every minibatch."""
    key = (id(space), dtype, device)
    hit = _BOUNDS_CACHE.get(key)
    if hit is not None and hit[0] is space:
        return hit[1]
    SquashedGaussianProbabilityDistribution.check_action_space(space)
    # normal tensors even when first asked for inside a rollout's inference_mode: the cached bounds are reused by
    # losses that differentiate through them (SAC's reparametrized actions)
    with torch.inference_mode(False):
        low = torch.as_tensor(space.low, dtype=dtype, device=device)
        high = torch.as_tensor(space.high, dtype=dtype, device=device)
        half_range = (high - low) / 2.0
        bounds = (low, high, (high + low) / 2.0, half_range, half_range.log())
    if len(_BOUNDS_CACHE) >= 64:
        _BOUNDS_CACHE.clear()
    _BOUNDS_CACHE[key] = (space, bounds)
    return bounds


class SquashedGaussianProbabilityDistribution(BoxParameterDistribution):
    """A Gaussian whose samples pass through tanh and are rescaled to [low, high].

    ``log_prob`` includes the change of variables; ``entropy`` (no closed form after squashing) is the entropy of
    the underlying Gaussian, and ``kl`` the KL divergence of the underlying Gaussians. The temperature multiplies
    the standard deviation. The default distribution of a Box with finite bounds: every sample, and the
    deterministic action tanh(mean), lies in [low, high].
    """

    needs_finite_bounds = True

    def __init__(self, logits: torch.Tensor, action_space: gym.spaces.Box, temperature: float = 1.0):
        # the Gaussian is computed by hand, not with torch.distributions.Normal: this runs on every rollout step
        self.low, self.high, self.center, self.half_range, self._log_half_range = _bounds(
            action_space, logits.dtype, logits.device)
        self.mean, self.log_std = split_mean_log_std(logits, action_space)
        self.std = self.log_std.exp()
        if temperature != 1.0:
            self.std = self.std * temperature
            self.log_std = self.std.log()
        self.action_space = action_space
        self.event_dims = len(action_space.shape)

    @property
    def dist(self) -> torch.distributions.Normal:
        """The underlying (unsquashed) Gaussian as a torch distribution."""
        return torch.distributions.Normal(self.mean, self.std, validate_args=False)

    def _squash(self, u: torch.Tensor) -> torch.Tensor:
        # the clamp keeps float rounding of center + half_range * tanh(u) from stepping past a bound
        return torch.clamp(self.center + self.half_range * torch.tanh(u), self.low, self.high)

    def sample(self) -> torch.Tensor:
        """Draw an action in [low, high]."""
        with torch.no_grad():
            return self._squash(self.mean + self.std * torch.randn_like(self.mean))

    def rsample(self) -> torch.Tensor:
        """Draw a reparametrized action in [low, high]."""
        return self._squash(self.mean + self.std * torch.randn_like(self.mean))

    def rsample_with_log_prob(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparametrized action in [low, high] and its log-density, computed from the Gaussian sample u (no
        atanh of the action): log N(u) - log(half_range) - log(1 - tanh(u)^2), the last term in the overflow-free
        form 2 (log 2 - u - softplus(-2u))."""
        noise = torch.randn_like(self.mean)
        u = self.mean + self.std * noise
        log_p = (-0.5 * noise * noise - self.log_std - _HALF_LOG_2PI - self._log_half_range
                 - 2.0 * (_LOG_2 - u - torch.nn.functional.softplus(-2.0 * u)))
        return self._squash(u), self._reduce(log_p)

    def deterministic_sample(self) -> torch.Tensor:
        """The squashed mean."""
        return self._squash(self.mean)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-density of actions in [low, high], with the tanh and rescaling Jacobians."""
        y = ((actions - self.center) / self.half_range).clamp(-1.0 + EPSILON, 1.0 - EPSILON)
        u = atanh(y)
        z = (u - self.mean) / self.std
        # Gaussian log-density of u minus log|d action / d u| = log(half_range) + log(1 - tanh(u)^2)
        log_p = -0.5 * z * z - self.log_std - _HALF_LOG_2PI - torch.log1p(-y * y) - self._log_half_range
        return self._reduce(log_p)

    def entropy(self) -> torch.Tensor:
        """Entropy of the underlying Gaussian (the squashed one has no closed form)."""
        return self._reduce(self.log_std + (0.5 + _HALF_LOG_2PI))

    def kl(self, other: ProbabilityDistribution) -> torch.Tensor:
        """KL divergence of the underlying Gaussians (the squashing is the same invertible map for both)."""
        self._check_same_type(other)
        assert isinstance(other, SquashedGaussianProbabilityDistribution)
        var_ratio = (self.std / other.std).pow(2)
        t = ((self.mean - other.mean) / other.std).pow(2)
        return self._reduce(0.5 * (var_ratio + t - 1.0 - var_ratio.log()))


_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)
