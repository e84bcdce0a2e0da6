"""Checks of the ``runner=ray`` settings, torch- and Ray-free (run by ``validate_config`` before anything heavy)."""

from __future__ import annotations

from typing import Any

from maze_lab.core.utils.factory import ConfigurationError

RAY_ALGORITHMS = ("PPOAlgorithmConfig", "A2CAlgorithmConfig", "ESAlgorithmConfig")
"""The algorithm configs that run on Ray: A2C and PPO (a Ray rollout generator), ES (its workers as Ray actors)."""


def validate_ray_runner(runner: Any, algorithm: Any) -> None:
    """Refuse ``runner=ray`` settings that cannot work, naming what would.

    :param runner: the ``runner`` config section.
    :param algorithm: the algorithm config object.
    """
    name = type(algorithm).__name__
    if name not in RAY_ALGORITHMS:
        raise ConfigurationError(f"runner=ray runs A2C, PPO and ES (algorithm=a2c / ppo / es) on Ray; {name} runs "
                                 f"its envs its own way (IMPALA, SAC and BC are not available on Ray): use runner=dev "
                                 f"or runner=local with it")
    for key in ("n_workers", "envs_per_worker"):
        value = runner.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(f"runner.{key} must be an int >= 1, got {value!r}")
    for key in ("num_cpus_per_worker", "num_gpus_per_worker"):
        value = runner.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ConfigurationError(f"runner.{key} must be a number >= 0, got {value!r}")
    address = runner.get("address")
    if address is not None and (not isinstance(address, str) or not address.strip()):
        raise ConfigurationError(f"runner.address must be null (a local Ray), 'auto', 'host:6379' or "
                                 f"'ray://host:10001', got {address!r}")
