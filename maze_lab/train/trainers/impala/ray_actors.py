"""IMPALA's actors as Ray actors (``algorithm=impala runner=ray``): the same work as the actor processes of
:mod:`maze_lab.train.trainers.impala.actors`, on a local Ray or a cluster.

Each of ``runner.n_workers`` Ray actors steps ``runner.envs_per_worker`` envs (IMPALA's actors) with a CPU copy of
the policy: the actor of the actor processes (its build, rollout and close), carried by the worker protocol of
:mod:`maze_lab.distributed.ray_workers`; one ``rollout`` command rolls out ``n_rollout_steps`` and answers one
trajectory per env. The learner keeps one command in flight per worker. After each update it puts the new weights
into Ray's object store once (``ray.put``); a worker whose weights are older gets that reference first (a ``weights``
command), and Ray hands the worker the array.

The bounded queue: a finished command's trajectories wait for the learner; while ``queue_size`` trajectories wait,
no new command starts, so a worker never runs further ahead of the learner than its command in flight.

A worker that dies (its process killed, out of memory, its node gone) is replaced by a fresh one while
``runner.max_worker_restarts`` allows: IMPALA learns from whatever trajectories arrive, so the learner goes on with
the others meanwhile; the lost command's trajectories are simply not there. A worker that raises fails the run with
its traceback (an env's error would only repeat).
"""

from __future__ import annotations

import copy
import time
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NoReturn

from maze_lab.core.utils import pickling
from maze_lab.core.utils.log import get_logger
from maze_lab.distributed.protocol import WorkerDied, WorkerError, WorkerRaised
from maze_lab.distributed.ray_workers import (
    RayWorker,
    gather,
    ready_ray_workers,
    remote_worker_class,
    shutdown_ray_workers,
)
from maze_lab.distributed.weights import flat_weights
from maze_lab.train.ray_config import RayWorkerSettings
from maze_lab.train.ray_rollouts import RayWorkerError, ray_worker_error
from maze_lab.train.trainers.impala.actors import (
    ImpalaActorError,
    Trajectory,
    _build_actor,
    _close_actor,
    actor_command,
)

_log = get_logger(__name__)

RESTART_SEED_STRIDE = 1_000_003
"""A replacement worker's envs are reset with the dead one's seeds plus this times the restart count: fresh
episodes, still determined by the run's seed."""


class ImpalaRayActorError(ImpalaActorError, RayWorkerError):
    """An IMPALA Ray worker raised (the message carries its traceback) or died with no restart left; all workers
    were shut down."""


class RayActorPool:
    """IMPALA's actors on Ray; the methods the learner calls on
    :class:`~maze_lab.train.trainers.impala.actors.ActorPool` (``publish``, ``get``, ``qsize``, ``close``,
    ``closed``). Ray must be initialized (the trainer connects).

    :param env_factories: one factory per IMPALA actor (env), ``settings.envs_per_worker`` of them per Ray worker
        (the last worker takes the rest where they do not divide evenly).
    :param policy: the learner's policy; each worker gets a CPU copy.
    :param n_rollout_steps: agent actions per trajectory.
    :param queue_size: trajectories that may wait for the learner; no command starts while this many wait.
    :param seed: the envs of IMPALA actor i are reset with ``seed + i`` (as in the actor processes); None: unseeded.
    :param settings: workers, resources, restarts (``runner`` keys).
    :param owns_ray: whether this run started Ray (a local Ray never grows: too few CPUs is an error).
    :param on_restart: called with a message each time a dead worker was replaced (the trainer counts restarts).
    """

    def __init__(self, env_factories: Sequence[Callable[[], Any]], policy: Any, n_rollout_steps: int,
                 queue_size: int, seed: int | None, settings: RayWorkerSettings, owns_ray: bool = False,
                 on_restart: Callable[[str], None] | None = None):
        n = len(env_factories)
        k = max(1, min(settings.envs_per_worker, n))
        n_workers = max(1, n // k)
        self.groups = [list(range(w * k, (w + 1) * k)) for w in range(n_workers)]
        self.groups[-1].extend(range(n_workers * k, n))
        self.factories = list(env_factories)
        self.n_rollout_steps, self.queue_size, self.seed = n_rollout_steps, queue_size, seed
        self.max_restarts = settings.max_worker_restarts
        self.restarts = 0
        self.on_restart = on_restart
        cpu_policy = policy if policy.device.type == "cpu" else copy.deepcopy(policy).to("cpu")
        self._policy_payload = pickling.dumps(cpu_policy)
        # the actors' processes are titled ray::_ImpalaRayWorker
        self._actor_class = remote_worker_class("_ImpalaRayWorker", n_workers, settings.num_cpus_per_worker,
                                                settings.num_gpus_per_worker, owns_ray, "IMPALA on Ray")
        self.workers: list[RayWorker] = []
        self.pids: list[int | None] = [None] * n_workers
        self._held = [-2] * n_workers  # the weights' version each worker holds (or will, once its commands ran)
        self._busy: set[int] = set()  # the workers with a rollout in flight
        self._received: deque[Trajectory] = deque()
        self._weights_ref: Any = None
        self._version = -1
        self.closed = False
        try:
            for w, group in enumerate(self.groups):
                self.workers.append(RayWorker.start(self._actor_class, f"IMPALA Ray worker {w}", self._build(w),
                                                    partial(actor_command, group), close=_close_actor,
                                                    detail=f"actors {group}"))
            try:
                gather(self.workers)  # each worker answers once its envs are built
            except WorkerError as failure:
                self._raise(failure, "starting")
            self.pids = [worker.pid for worker in self.workers]
        except BaseException:
            self.close()
            raise

    # ---- workers ---------------------------------------------------------------------------------------------
    def _build(self, w: int, restarts: int = 0) -> Callable[[], Any]:
        """How worker ``w`` builds its actor: after ``restarts`` deaths with fresh envs and other seeds."""
        group = self.groups[w]
        seed = None if self.seed is None else self.seed + group[0] + RESTART_SEED_STRIDE * restarts
        return partial(_build_actor, pickling.dumps([self.factories[i] for i in group]), self._policy_payload, seed)

    def describe(self, w: int) -> str:
        """Names worker ``w``: its index, pid and IMPALA actors."""
        return self.workers[w].describe()

    def _raise(self, failure: WorkerError, during: str) -> NoReturn:
        """Shut all workers down and raise the error of the worker that raised or died, naming it."""
        self.close()
        raise ray_worker_error(ImpalaRayActorError, failure, during, "IMPALA Ray workers") from None

    # ---- the learner's side ----------------------------------------------------------------------------------
    def publish(self, policy: Any, version: int) -> None:
        """Put the learner's weights (after update ``version``) into the object store, once; idle workers start
        their next rollout with them."""
        import ray

        self._weights_ref = ray.put(flat_weights(policy))
        self._version = version
        self._launch_idle()

    def _launch_idle(self) -> None:
        """Start a rollout on every worker without one in flight, while the queue has room."""
        if self._weights_ref is None:
            return
        for w, worker in enumerate(self.workers):
            if len(self._received) >= self.queue_size:
                return
            if w in self._busy:
                continue
            if self._held[w] != self._version:
                worker.send(("weights", self._weights_ref))  # not answered: a failure shows in the rollout's answer
                self._held[w] = self._version
            worker.send(("rollout", (self.n_rollout_steps, self._held[w])))
            self._busy.add(w)

    def get(self, timeout: float) -> Trajectory:
        """The next trajectory; raises ImpalaRayActorError where a worker failed or died with no restart left, or
        none came in ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            if self._received:
                trajectory = self._received.popleft()
                self._launch_idle()  # the queue has room again
                return trajectory
            self._launch_idle()
            if not self._busy:
                raise RuntimeError("no IMPALA Ray worker is rolling out (the pool is closed, or no weights were "
                                   "published yet)")
            index = {self.workers[w]: w for w in self._busy}
            for worker in ready_ray_workers(list(index), timeout=0.25):
                self._collect(index[worker])
            if not self._received and time.monotonic() > deadline:
                self.close()
                raise ImpalaRayActorError(
                    f"no trajectory reached the learner for {timeout:.0f} s although the IMPALA Ray workers are "
                    f"alive (stuck envs, or a cluster without room for them?); the workers were shut down. Raise "
                    f"algorithm.actor_start_timeout for envs whose rollouts take longer")

    def _collect(self, w: int) -> None:
        """Take worker ``w``'s finished rollout: its trajectories, or its death (replaced while restarts are
        left)."""
        self._busy.discard(w)
        try:
            self._received.extend(self.workers[w].receive())
        except WorkerDied as died:
            if self.restarts >= self.max_restarts:
                self._raise(died, "rolling out")
            self._replace(w, died)
        except WorkerRaised as raised:
            self._raise(raised, "rolling out")

    def _replace(self, w: int, died: WorkerDied) -> None:
        """Replace dead worker ``w`` by a fresh one (its trajectories in flight are lost)."""
        self.restarts += 1
        worker = self.workers[w]
        old = worker.describe()
        worker.restart(self._build(w, worker.restarts + 1))
        self._held[w] = -2
        try:
            worker.receive()  # built
        except WorkerError as failure:
            self._raise(failure, "starting again after a death")
        self.pids[w] = worker.pid
        message = (f"{old} died ({(died.how or '')[:160]}); replaced it by a fresh worker (pid {worker.pid}), restart "
                   f"{self.restarts} of runner.max_worker_restarts={self.max_restarts}")
        _log.warning(message)
        if self.on_restart is not None:
            self.on_restart(message)

    def qsize(self) -> int:
        """Trajectories waiting for the learner."""
        return len(self._received)

    def close(self) -> None:
        """Stop the workers (those that still answer flush their envs' event logs first); idempotent."""
        if self.closed:
            return
        self.closed = True
        workers, self.workers = self.workers, []
        self._busy.clear()
        shutdown_ray_workers(workers)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
