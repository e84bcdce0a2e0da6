"""Checks of the ``runner=ray`` settings, torch- and Ray-free (run by ``validate_config`` before anything heavy)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from maze_lab.core.utils.factory import ConfigurationError

RAY_ALGORITHMS = ("PPOAlgorithmConfig", "A2CAlgorithmConfig", "ESAlgorithmConfig", "ImpalaAlgorithmConfig")
"""The algorithm configs that run on Ray: A2C and PPO (a Ray rollout generator), ES (its workers as Ray actors),
IMPALA (its actors as Ray actors)."""

RESTARTING_ALGORITHMS = ("ESAlgorithmConfig", "ImpalaAlgorithmConfig")
"""Those whose Ray workers may be replaced when they die (``runner.max_worker_restarts``): an ES pair task is a pure
function of its seeds and is played again; IMPALA's learner goes on with the trajectories of the other actors. A2C
and PPO wait for every worker's part of each synchronous rollout, so a dead worker fails the run."""


@dataclass
class RayWorkerSettings:
    """How a trainer's own workers run on Ray (``runner=ray`` for ES and IMPALA): the ``runner`` section's keys."""

    n_workers: int = 2
    """Ray actors."""
    envs_per_worker: int = 1
    """Envs each actor steps (IMPALA: actors in the paper's sense; ES: always one)."""
    num_cpus_per_worker: float = 1.0
    """CPUs Ray reserves for each actor."""
    num_gpus_per_worker: float = 0.0
    """GPUs Ray reserves for each actor (the policy still acts on the actor's CPU)."""
    address: str | None = None
    """None: a local Ray (or the one already initialized); ``auto``, ``host:6379``, ``ray://host:10001``: a cluster."""
    max_worker_restarts: int = 0
    """Workers that may die during a run and are replaced by fresh ones (0: the first death fails the run)."""

    @classmethod
    def from_runner(cls, runner: Any) -> RayWorkerSettings:
        """The settings of a validated ``runner`` config section."""
        return cls(int(runner.n_workers), int(runner.get("envs_per_worker", 1)),
                   float(runner.get("num_cpus_per_worker", 1)), float(runner.get("num_gpus_per_worker", 0)),
                   runner.get("address") or None, int(runner.get("max_worker_restarts", 0) or 0))


def check_worker_counts(runner: Any) -> None:
    """Refuse ``runner.n_workers`` / ``runner.envs_per_worker`` that are not ints >= 1 (runner=ray and processes)."""
    for key in ("n_workers", "envs_per_worker"):
        value = runner.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(f"runner.{key} must be an int >= 1, got {value!r}")


def validate_ray_runner(runner: Any, algorithm: Any) -> None:
    """Refuse ``runner=ray`` settings that cannot work, naming what would.

    :param runner: the ``runner`` config section.
    :param algorithm: the algorithm config object.
    """
    name = type(algorithm).__name__
    if name not in RAY_ALGORITHMS:
        raise ConfigurationError(f"runner=ray runs A2C, PPO, ES and IMPALA (algorithm=a2c / ppo / es / impala) on "
                                 f"Ray; {name} runs its envs its own way (SAC and BC are not available on Ray): use "
                                 f"runner=dev or runner=local with it")
    check_worker_counts(runner)
    for key in ("num_cpus_per_worker", "num_gpus_per_worker"):
        value = runner.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ConfigurationError(f"runner.{key} must be a number >= 0, got {value!r}")
    restarts = runner.get("max_worker_restarts", 0)
    if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
        raise ConfigurationError(f"runner.max_worker_restarts must be an int >= 0 (0: a dead worker fails the run), "
                                 f"got {restarts!r}")
    if restarts and name not in RESTARTING_ALGORITHMS:
        raise ConfigurationError(f"runner.max_worker_restarts={restarts}: {name} waits for every worker's part of "
                                 f"each rollout, so a dead Ray worker fails the run; worker restarts are for ES and "
                                 f"IMPALA. Set runner.max_worker_restarts=0")
    address = runner.get("address")
    if address is not None and (not isinstance(address, str) or not address.strip()):
        raise ConfigurationError(f"runner.address must be null (a local Ray), 'auto', 'host:6379' or "
                                 f"'ray://host:10001', got {address!r}")
