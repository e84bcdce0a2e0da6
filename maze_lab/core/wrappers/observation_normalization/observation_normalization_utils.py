"""Estimating normalization statistics by sampling, and env factories that apply given statistics."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from maze_lab.core.wrappers.observation_normalization.normalization_strategies import StructuredStatisticsType
from maze_lab.core.wrappers.observation_normalization.observation_normalization_wrapper import (
    ObservationNormalizationWrapper,
)


def find_normalization_wrapper(env: Any) -> ObservationNormalizationWrapper | None:
    """The ObservationNormalizationWrapper in an env stack (outermost first), or None."""
    while env is not None:
        if isinstance(env, ObservationNormalizationWrapper):
            return env
        env = env.__dict__.get("env") if hasattr(env, "__dict__") else None
    return None


def _compute_action(policy: Any, observation: Any, env: ObservationNormalizationWrapper) -> Any:
    """Call ``policy.compute_action`` with the keyword arguments its signature accepts."""
    params = inspect.signature(policy.compute_action).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs: dict[str, Any] = {}
    wanted = {"actor_id": env.actor_id(), "deterministic": False}
    if getattr(policy, "needs_state", lambda: False)():
        wanted["maze_state"] = env.get_maze_state()
    if getattr(policy, "needs_env", lambda: False)():
        wanted["env"] = env
    for name, value in wanted.items():
        if takes_all or name in params:
            kwargs[name] = value
    return policy.compute_action(observation, **kwargs)


def estimate_observation_normalization_statistics(env: Any, n_samples: int, seed: int | None = None) -> None:
    """Step the env ``n_samples`` times with its sampling policy and estimate the missing statistics."""
    wrapper = find_normalization_wrapper(env)
    if wrapper is None:
        raise TypeError(f"{type(env).__name__} has no ObservationNormalizationWrapper")
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    policy = wrapper.sampling_policy
    if seed is not None and hasattr(policy, "seed"):
        policy.seed(seed)
    wrapper.set_observation_collection(True)
    try:
        obs, _ = wrapper.reset(seed=seed)
        for _ in range(n_samples):
            obs, _, terminated, truncated, _ = wrapper.step(_compute_action(policy, obs, wrapper))
            if terminated or truncated:
                obs, _ = wrapper.reset()
        wrapper.estimate_statistics()
    finally:
        wrapper.set_observation_collection(False)


def obtain_normalization_statistics(env: Any, n_samples: int, seed: int | None = None) \
        -> StructuredStatisticsType | None:
    """The normalization statistics of an env, estimated by sampling where they are not known yet.

    Returns None for envs without an ObservationNormalizationWrapper; statistics that are already known
    (default, loaded from the dump, manual) are kept and returned without sampling.

    :param env: an env stack containing an ObservationNormalizationWrapper.
    :param n_samples: env steps to sample for the estimate.
    :param seed: optional seed for the sampling episodes and the sampling policy.
    """
    wrapper = find_normalization_wrapper(env)
    if wrapper is None:
        return None
    if not wrapper.has_all_statistics():
        estimate_observation_normalization_statistics(wrapper, n_samples=n_samples, seed=seed)
    return wrapper.get_normalization_statistics()


def make_normalized_env_factory(env_factory: Callable[[], Any], normalization_statistics: StructuredStatisticsType) \
        -> Callable[[], Any]:
    """Wrap an env factory so that every env it makes uses the given normalization statistics."""

    def normalized_env_factory() -> Any:
        env = env_factory()
        wrapper = find_normalization_wrapper(env)
        if wrapper is None:
            raise TypeError(f"the env factory made a {type(env).__name__} without an ObservationNormalizationWrapper")
        wrapper.set_normalization_statistics(normalization_statistics)
        return env

    return normalized_env_factory


normalization_env_factory = make_normalized_env_factory
