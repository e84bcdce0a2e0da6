"""The workers of evolution strategies as Ray actors (``algorithm=es runner=ray``): the same work as the local
worker processes of :mod:`maze_lab.train.trainers.es.workers`, on a local Ray or a cluster.

The pool and the worker are those of the local processes
(:class:`~maze_lab.train.trainers.es.workers.ESWorkerPool`), on the Ray transport of the worker protocol
(:mod:`maze_lab.distributed.transport`): each actor builds its env from a cloudpickled factory, keeps a CPU copy of
the policy and builds the noise table from its seed. Per update the driver puts theta into Ray's object store once
(``ray.put``) and hands each actor that plays a pair the same reference; then the pair tasks (noise offset, env seed)
go to whichever actor is free. A task's result depends only on its seeds and theta, and the results are put back in
task order, so the update equals the one of the local worker processes with the same seed and number of workers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from maze_lab.distributed.protocol import WorkerError
from maze_lab.distributed.transport import RayTransport
from maze_lab.train.ray_config import RayWorkerSettings
from maze_lab.train.ray_rollouts import RayWorkerError, ray_worker_error
from maze_lab.train.trainers.es.workers import ESWorkerError, ESWorkerPool


class ESRayWorkerError(ESWorkerError, RayWorkerError):
    """An ES Ray worker raised (the message carries its traceback) or died (the message names it); all ES actors
    were shut down."""


class ESRayWorkers(ESWorkerPool):
    """ES workers as Ray actors, one per env factory (:class:`~maze_lab.train.trainers.es.workers.ESWorkerPool` on
    the Ray transport). Ray must be initialized (the trainer calls ``ensure_ray``).

    :param env_factories: one factory per actor (cloudpickled: lambdas and notebook functions work).
    :param policy: the policy; each actor gets a CPU copy.
    :param noise_table_seed: seed of the noise table every actor builds.
    :param noise_table_size: floats in that table.
    :param noise_stddev: sigma, the scale of the perturbations.
    :param max_steps: cut episodes after this many agent actions (0: never).
    :param deterministic: act with the most likely action in the episodes.
    :param normalization_statistics: observation normalization statistics every env gets (None: the envs' own).
    :param settings: the CPUs and GPUs each actor reserves, and ``max_worker_restarts``: a dead actor is replaced by
        a fresh one while restarts are left, and its pair task is played again.
    :param owns_ray: whether Ray was started for this run (a local Ray never grows: too few CPUs is an error).
    :param on_restart: called with a message each time a dead actor was replaced.
    """

    label = "ES Ray workers"

    def __init__(self, env_factories: Sequence[Callable[[], Any]], policy: Any, noise_table_seed: int,
                 noise_table_size: int, noise_stddev: float, max_steps: int = 0, deterministic: bool = True,
                 normalization_statistics: Any = None, settings: RayWorkerSettings | None = None,
                 owns_ray: bool = False, on_restart: Callable[[str], None] | None = None):
        if not env_factories:
            raise ValueError("ES needs at least one env factory (one per Ray worker)")
        settings = settings if settings is not None else RayWorkerSettings()
        # the actors' processes are titled ray::_ESActor
        transport = RayTransport("_ESActor", len(env_factories), settings.num_cpus_per_worker,
                                 settings.num_gpus_per_worker, owns_ray, "ES on Ray")
        super().__init__(transport, "ES Ray worker", env_factories, policy, noise_table_seed, noise_table_size,
                         noise_stddev, max_steps, deterministic, normalization_statistics,
                         settings.max_worker_restarts, on_restart)

    @property
    def actors(self) -> list[Any]:
        """The Ray actors of the workers."""
        return [worker.actor for worker in self.workers]

    def _error(self, failure: WorkerError, during: str) -> ESRayWorkerError:
        self.close()
        return ray_worker_error(ESRayWorkerError, failure, during, "ES Ray workers")
