"""A2C/PPO rollouts in local worker processes (``runner=processes``): the local counterpart of ``runner=ray``.

Why: with ``runner=dev`` the training thread steps the envs and runs the policy for every env step, all of it
Python under the interpreter lock that a Jupyter kernel's cells need too; ``runner=local`` moves only the env steps
out (the policy still runs in the kernel, one pipe round trip per step). Here each of ``n_workers`` processes holds
``envs_per_worker`` envs and a CPU copy of the policy and rolls out a whole update by itself; the learner in the
kernel only publishes the weights once per update, waits (without the interpreter lock) and merges the workers'
packed rollouts. The run (RunContext, trainer, learner) stays in the kernel.

:class:`ProcessEnvGroup` is the group of rollout workers of :mod:`maze_lab.train.worker_rollouts` (the worker, the
generator, the packing and merging are shared with ``runner=ray``) on the local transport of the worker protocol
(:mod:`maze_lab.distributed.transport`): a pipe per worker for commands and rollouts, and the weights in one
shared-memory array. Seeds as with Ray: the same seed and number of workers repeat a run exactly.

This module imports neither torch nor Ray at import time (``validate_process_runner`` runs before anything heavy).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

from maze_lab.core.log_stats.writers import LogStatsWriter
from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.distributed.processes import WorkerDied, WorkerError, WorkerRaised, died_message, shutdown_workers
from maze_lab.distributed.transport import ProcessTransport
from maze_lab.train.ray_config import check_worker_counts
from maze_lab.train.worker_rollouts import (
    EnvFactory,
    WorkerEnvGroup,
    WorkerRolloutGenerator,
    worker_group_parts,
)

PROCESS_ALGORITHMS = ("PPOAlgorithmConfig", "A2CAlgorithmConfig")
"""The algorithm configs whose rollouts run in the worker processes (A2C and PPO take a rollout generator)."""

_CLOSE_TIMEOUT = 10.0
"""Seconds the workers get to flush their envs' event logs and exit before they are terminated."""


class ProcessWorkerError(WorkerError):
    """A rollout worker process raised (the message carries its traceback) or died (the message says how)."""


def rollout_worker_error(failure: WorkerError, during: str, after_death: str | None = None) -> ProcessWorkerError:
    """The error of a rollout worker process that raised or died ``during`` something (``starting``: building its envs
    or policy), all rollout workers having been shut down; ``after_death``: a sentence added to a death's message."""
    name = failure.worker.describe()
    if isinstance(failure, WorkerRaised):
        if during == "starting":
            return ProcessWorkerError(f"{name} failed to start (building its envs or policy raised); all rollout "
                                      f"workers were shut down. The worker's traceback:\n{failure.trace}")
        return ProcessWorkerError(f"{name} raised while {during}; all rollout workers were shut down. The "
                                  f"worker's traceback:\n{failure.trace}")
    how = failure.how if isinstance(failure, WorkerDied) else None
    aftermath = "all rollout workers were shut down" + (f". {after_death}" if after_death else "")
    return ProcessWorkerError(died_message(name, how or "its pipe closed", aftermath, during))


# ---- configuration --------------------------------------------------------------------------------------------


def validate_process_runner(runner: Any, algorithm: Any) -> None:
    """Refuse ``runner=processes`` settings that cannot work, naming what would (torch-free).

    :param runner: the ``runner`` config section.
    :param algorithm: the algorithm config object.
    """
    name = type(algorithm).__name__
    if name not in PROCESS_ALGORITHMS:
        raise ConfigurationError(f"runner=processes rolls out A2C and PPO (algorithm=a2c / ppo) in worker processes; "
                                 f"{name} runs its envs its own way: use runner=dev or runner=local with it")
    check_worker_counts(runner)


# ---- the driver side ------------------------------------------------------------------------------------------


class ProcessEnvGroup(WorkerEnvGroup):
    """The training envs in local worker processes (``runner=processes``): a
    :class:`~maze_lab.train.worker_rollouts.WorkerEnvGroup` on the local transport. ``workers`` (and ``actors``) hold
    the worker processes (empty until the first rollout and after close), ``pids`` their ids.

    :param env_factories: one picklable factory per env (``n_workers * envs_per_worker``).
    :param n_workers: processes; worker w holds factories ``w * envs_per_worker ... (w+1) * envs_per_worker - 1``.
    :param spaces: (observation_spaces_dict, action_spaces_dict, agent_counts_dict); None: read from an env built
        here by the first factory.
    :param start_method: multiprocessing start method (``spawn``: safe in a kernel with threads).
    """

    worker_label = "rollout worker"
    error_type = ProcessWorkerError

    def __init__(self, env_factories: Sequence[EnvFactory], n_workers: int, logging_prefix: str = "train",
                 writers: list[LogStatsWriter] | None = None, spaces: tuple[dict, dict, dict] | None = None,
                 start_method: str = "spawn"):
        super().__init__(env_factories, n_workers, logging_prefix, writers, spaces)
        self.start_method = start_method
        self._finalizer: Any = None

    def _make_transport(self, n_weights: int) -> ProcessTransport:
        # the weights go through one shared-memory array: a new set costs the learner one flat copy, not a pickled
        # copy per worker
        return ProcessTransport(self.start_method, "rollout worker processes (runner=processes)",
                                "maze-lab-rollout-worker", _CLOSE_TIMEOUT, broadcast_size=n_weights)

    def _workers_started(self) -> None:
        # a group dropped without close() (a trainer garbage-collected in a test) still ends its workers; the
        # finalizer holds no reference to the group
        self._finalizer = weakref.finalize(self, shutdown_workers, list(self.workers), _CLOSE_TIMEOUT)

    def _interrupted(self) -> None:
        self._stop_actors()  # the pipes would be out of step: the next rollout starts fresh workers

    def _start_failed(self) -> None:
        self._stop_actors()  # no worker is left running; the next rollout may start fresh ones

    def _error(self, failure: WorkerError, during: str) -> ProcessWorkerError:
        return rollout_worker_error(failure, during, "The last checkpoint stays as it was")

    def _stop_actors(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        super()._stop_actors()


class ProcessRolloutGenerator(WorkerRolloutGenerator):
    """The generator of A2C/PPO whose envs live in :class:`ProcessEnvGroup` workers."""


# ---- the run layer's entry ------------------------------------------------------------------------------------


def process_rollout_generator(runner: Any, trainer_cls: type, env_factory: Callable[[int], EnvFactory],
                              writers: list[LogStatsWriter], spaces_env: Any = None) -> ProcessRolloutGenerator:
    """The generator of ``runner.n_workers * runner.envs_per_worker`` envs in worker processes (started at the first
    rollout, so that a failed build leaves no process behind).

    :param runner: the ``runner`` config (``n_workers``, ``envs_per_worker``).
    :param trainer_cls: the trainer; it must take a ``rollout_generator`` (A2C, PPO).
    :param env_factory: env index -> a picklable factory of that training env.
    :param spaces_env: an env (e.g. the evaluation env) with the spaces of the training envs; None: build one.
    """
    factories, n_workers, spaces = worker_group_parts(runner, trainer_cls, env_factory, spaces_env, "runner=processes")
    return ProcessRolloutGenerator(ProcessEnvGroup(factories, n_workers, "train", writers, spaces))
