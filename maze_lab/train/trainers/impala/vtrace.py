"""V-trace (Espeholt et al. 2018, section 4.1): value targets and policy-gradient advantages for trajectories that
a behaviour policy mu produced and a target policy pi learns from.

With the importance weights ``rho_t = pi(a_t|x_t) / mu(a_t|x_t)``, their clipped versions
``rho'_t = min(rho_bar, rho_t)`` and ``c_t = min(c_bar, rho_t)``, and the per-step discount ``g_t`` (gamma, or 0 where
the episode ended at step t)::

    delta_t = rho'_t * (r_t + g_t * V(x_{t+1}) - V(x_t))
    v_t     = V(x_t) + delta_t + g_t * c_t * (v_{t+1} - V(x_{t+1}))        (v_T = V(x_T), the bootstrap value)
    A_t     = min(pg_rho_bar, rho_t) * (r_t + g_t * v_{t+1} - V(x_t))

``v_t`` are the targets of the value function, ``A_t`` the advantages the policy gradient weights ``log pi(a_t|x_t)``
with. On-policy (all ``rho_t = 1``, thresholds >= 1) ``v_t`` is the n-step return bootstrapped at the end of the
trajectory (lambda = 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class VTraceReturns:
    """The results of :func:`vtrace`, each of shape (T, B)."""

    vs: torch.Tensor
    """Targets of the value function."""
    pg_advantages: torch.Tensor
    """Advantages of the policy gradient."""
    rhos: torch.Tensor
    """The importance weights pi / mu before clipping."""
    clipped_rhos: torch.Tensor
    """The importance weights of the value targets after clipping."""


def vtrace(behaviour_log_prob: torch.Tensor, target_log_prob: torch.Tensor, rewards: torch.Tensor,
           values: torch.Tensor, bootstrap_value: torch.Tensor, discounts: torch.Tensor,
           clip_rho_threshold: float | None = 1.0, clip_pg_rho_threshold: float | None = 1.0,
           clip_c_threshold: float | None = 1.0) -> VTraceReturns:
    """V-trace targets and advantages of a batch of trajectories (time first); no gradients flow through them.

    :param behaviour_log_prob: (T, B) log mu(a_t|x_t) of the actions taken, as the actors recorded them.
    :param target_log_prob: (T, B) log pi(a_t|x_t) under the learner's current policy.
    :param rewards: (T, B) rewards (after any clipping).
    :param values: (T, B) the learner's V(x_t).
    :param bootstrap_value: (B,) V(x_T), the value of the state after the last step.
    :param discounts: (T, B) the discount after step t: gamma, 0 where the episode ended at step t (1 between the
        sub-steps of one env step of a structured env).
    :param clip_rho_threshold: rho-bar, the clipping of the value targets' importance weights (None: none).
    :param clip_pg_rho_threshold: the clipping of the advantages' importance weights (None: none).
    :param clip_c_threshold: c-bar, the clipping of the trace coefficients (None: none).
    """
    shapes = {t.shape for t in (behaviour_log_prob, target_log_prob, rewards, values, discounts)}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(f"vtrace expects (T, B) tensors of one shape for log-probabilities, rewards, values and "
                         f"discounts; got {sorted(tuple(s) for s in shapes)}")
    if bootstrap_value.shape != values.shape[1:]:
        raise ValueError(f"bootstrap_value must have the shape (B,) = {tuple(values.shape[1:])}, got "
                         f"{tuple(bootstrap_value.shape)}")
    with torch.no_grad():
        rhos = torch.exp(target_log_prob - behaviour_log_prob)
        clipped_rhos = rhos if clip_rho_threshold is None else rhos.clamp(max=clip_rho_threshold)
        cs = rhos if clip_c_threshold is None else rhos.clamp(max=clip_c_threshold)
        next_values = torch.cat([values[1:], bootstrap_value.unsqueeze(0)])
        deltas = clipped_rhos * (rewards + discounts * next_values - values)
        # backwards through time: v_t - V(x_t) = delta_t + g_t c_t (v_{t+1} - V(x_{t+1}))
        corrections = torch.empty_like(values)
        carry = torch.zeros_like(bootstrap_value)
        decay = discounts * cs
        for t in range(values.shape[0] - 1, -1, -1):
            carry = deltas[t] + decay[t] * carry
            corrections[t] = carry
        vs = values + corrections
        next_vs = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)])
        pg_rhos = rhos if clip_pg_rho_threshold is None else rhos.clamp(max=clip_pg_rho_threshold)
        pg_advantages = pg_rhos * (rewards + discounts * next_vs - values)
    return VTraceReturns(vs, pg_advantages, rhos, clipped_rhos)


def clip_rewards(rewards: torch.Tensor, mode: str | None) -> torch.Tensor:
    """Rewards clipped as ``reward_clipping`` says.

    :param mode: ``None``/``"None"``: unchanged; ``abs_one``: clipped to [-1, 1]; ``soft_asymmetric``: squashed by
        ``5 tanh(r / 5)``, with negative rewards scaled by 0.3 (the paper's Atari setting: losses count less).
    """
    if mode is None or mode == "None":
        return rewards
    if mode == "abs_one":
        return rewards.clamp(-1.0, 1.0)
    if mode == "soft_asymmetric":
        squashed = 5.0 * torch.tanh(rewards / 5.0)
        return torch.where(rewards < 0, 0.3 * squashed, squashed)
    raise ValueError(f"reward_clipping must be 'None', 'abs_one' or 'soft_asymmetric', got {mode!r}")
