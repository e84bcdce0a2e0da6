"""The workers of evolution strategies as Ray actors (``algorithm=es runner=ray``): the same work as the local
worker processes of :mod:`maze_lab.train.trainers.es.workers`, on a local Ray or a cluster.

Each actor runs the worker of the local processes (its build, its commands, its close), carried by the worker
protocol of :mod:`maze_lab.distributed.ray_workers`: it builds its env from a cloudpickled factory, keeps a CPU copy of
the policy and builds the noise table from its seed. Per update the driver puts theta into Ray's object store once
(``ray.put``) and hands each actor that plays a pair the same reference; then the pair tasks (noise offset, env seed)
go to whichever actor is free. A task's result depends only on its seeds and theta, and the results are put back in
task order, so the update equals the one of the local worker processes with the same seed and number of workers.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from maze_lab.core.utils import pickling
from maze_lab.core.utils.log import get_logger
from maze_lab.distributed.protocol import WorkerDied, WorkerError
from maze_lab.distributed.ray_workers import (
    RayWorker,
    gather,
    ready_ray_workers,
    remote_worker_class,
    shutdown_ray_workers,
)
from maze_lab.train.ray_config import RayWorkerSettings
from maze_lab.train.ray_rollouts import RayWorkerError, ray_worker_error
from maze_lab.train.trainers.es.workers import (
    ESWorkerError,
    PairResult,
    PairTask,
    _build,
    _close,
    _command,
    _WorkerSpec,
)

_log = get_logger(__name__)


class ESRayWorkerError(ESWorkerError, RayWorkerError):
    """An ES Ray worker raised (the message carries its traceback) or died (the message names it); all ES actors
    were shut down."""


class ESRayWorkers:
    """ES workers as Ray actors, one per env factory; the methods the ES trainer calls on
    :class:`~maze_lab.train.trainers.es.workers.ESWorkers` (``len``, ``evaluate``, ``normalization_statistics``,
    ``close``). Ray must be initialized (the trainer calls ``ensure_ray``).

    :param env_factories: one factory per actor (cloudpickled: lambdas and notebook functions work).
    :param policy: the policy; each actor gets a CPU copy.
    :param noise_table_seed: seed of the noise table every actor builds.
    :param noise_table_size: floats in that table.
    :param noise_stddev: sigma, the scale of the perturbations.
    :param max_steps: cut episodes after this many agent actions (0: never).
    :param deterministic: act with the most likely action in the episodes.
    :param normalization_statistics: observation normalization statistics every env gets (None: the envs' own).
    :param settings: the CPUs and GPUs each actor reserves, and ``max_worker_restarts``: a dead actor is replaced by
        a fresh one while restarts are left, and its pair task is played again (a task's result depends only on its
        seeds and theta, so the update stays what it would have been).
    :param owns_ray: whether Ray was started for this run (a local Ray never grows: too few CPUs is an error).
    :param on_restart: called with a message each time a dead actor was replaced.
    """

    def __init__(self, env_factories: Sequence[Callable[[], Any]], policy: Any, noise_table_seed: int,
                 noise_table_size: int, noise_stddev: float, max_steps: int = 0, deterministic: bool = True,
                 normalization_statistics: Any = None, settings: RayWorkerSettings | None = None,
                 owns_ray: bool = False, on_restart: Callable[[str], None] | None = None):
        if not env_factories:
            raise ValueError("ES needs at least one env factory (one per Ray worker)")
        settings = settings if settings is not None else RayWorkerSettings()
        n = len(env_factories)
        cpu_policy = copy.deepcopy(policy)
        cpu_policy.to("cpu")
        # the actors' processes are titled ray::_ESActor
        actor_class = remote_worker_class("_ESActor", n, settings.num_cpus_per_worker, settings.num_gpus_per_worker,
                                          owns_ray, "ES on Ray")
        self.n_workers = n
        self.max_restarts, self.restarts = settings.max_worker_restarts, 0
        self.on_restart = on_restart
        self.workers: list[RayWorker] = []
        self._closed = False
        self._lock = threading.Lock()  # one exchange at a time (a checkpoint may be written from another thread)
        try:
            for index, factory in enumerate(env_factories):
                payload = pickling.dumps(_WorkerSpec(factory, cpu_policy, int(noise_table_seed),
                                                        int(noise_table_size), float(noise_stddev), int(max_steps),
                                                        bool(deterministic), normalization_statistics))
                self.workers.append(RayWorker.start(actor_class, f"ES Ray worker {index}", partial(_build, payload),
                                                    _command, close=_close))
            try:
                gather(self.workers)  # each worker answers once its env is built
            except WorkerError as failure:
                raise self._error(failure, "starting") from None
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return self.n_workers

    @property
    def actors(self) -> list[Any]:
        """The Ray actors of the workers."""
        return [worker.actor for worker in self.workers]

    @property
    def pids(self) -> list[int | None]:
        """The workers' process ids."""
        return [worker.pid for worker in self.workers]

    def evaluate(self, theta: np.ndarray, tasks: Sequence[PairTask]) -> list[PairResult]:
        """Play the pairs of ``tasks`` with the parameters ``theta``; results in the order of the tasks. Any failure
        shuts all actors down."""
        import ray

        if self._closed:
            raise RuntimeError("these ES Ray workers are closed (after close() or a worker failure)")
        position = {task.index: i for i, task in enumerate(tasks)}
        results: list[PairResult | None] = [None] * len(tasks)
        with self._lock:
            try:
                theta_ref = ray.put(np.ascontiguousarray(theta, dtype=np.float32))  # once: every actor reads it
                pending = list(tasks)[::-1]
                busy: dict[RayWorker, PairTask] = {}
                for worker in self.workers:
                    if not pending:
                        break
                    # an actor runs its commands in the order they were sent: the parameters come before the pair
                    worker.send(("params", theta_ref))
                    busy[worker] = self._play(worker, pending.pop())
                while busy:
                    for worker in ready_ray_workers(list(busy)):
                        task = busy.pop(worker)
                        try:
                            result: PairResult = worker.receive()
                        except WorkerDied as died:
                            if self.restarts >= self.max_restarts:
                                raise self._error(died, "playing a pair of episodes") from None
                            self._replace(worker, died)  # the fresh worker plays the same pair
                            worker.send(("params", theta_ref))
                            busy[worker] = self._play(worker, task)
                            continue
                        except WorkerError as failure:
                            raise self._error(failure, "playing a pair of episodes") from None
                        results[position[result.index]] = result
                        if pending:
                            busy[worker] = self._play(worker, pending.pop())
            except BaseException:
                self.close()
                raise
        return [r for r in results if r is not None]

    @staticmethod
    def _play(worker: RayWorker, task: PairTask) -> PairTask:
        worker.send(("pair", task))
        return task

    def normalization_statistics(self) -> Any:
        """The observation normalization statistics of actor 0's env (all are alike); None where it does not
        normalize observations."""
        if self._closed:
            raise RuntimeError("these ES Ray workers are closed (after close() or a worker failure)")
        with self._lock:
            try:
                try:
                    return self.workers[0].request("normalization")
                except WorkerError as failure:
                    raise self._error(failure, "reading normalization statistics") from None
            except BaseException:
                self.close()
                raise

    def _replace(self, worker: RayWorker, died: WorkerDied) -> None:
        """Replace the dead ``worker`` by a fresh one (built as the dead one was)."""
        self.restarts += 1
        old = worker.describe()
        worker.restart()
        try:
            worker.receive()  # built
        except WorkerError as failure:
            raise self._error(failure, "starting again after a death") from None
        message = (f"{old} died ({(died.how or '')[:160]}); replaced it by a fresh worker (pid {worker.pid}) that "
                   f"plays its pair again, restart {self.restarts} of runner.max_worker_restarts={self.max_restarts}")
        _log.warning(message)
        if self.on_restart is not None:
            self.on_restart(message)

    def _error(self, failure: WorkerError, during: str) -> ESRayWorkerError:
        """The error of a worker that raised, failed to start or died, naming it (after all actors were shut
        down)."""
        self.close()
        return ray_worker_error(ESRayWorkerError, failure, during, "ES Ray workers")

    def close(self) -> None:
        """Stop the actors (those that still answer flush and close their env first); idempotent. Ray itself is
        left running: the trainer shuts down a Ray it started."""
        if self._closed:
            return
        self._closed = True
        workers, self.workers = self.workers, []
        shutdown_ray_workers(workers)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
