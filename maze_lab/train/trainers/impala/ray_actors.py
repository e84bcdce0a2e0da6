"""IMPALA's actors as Ray actors (``algorithm=impala runner=ray``): the same work as the actor processes of
:mod:`maze_lab.train.trainers.impala.actors`, on a local Ray or a cluster.

Each of ``runner.n_workers`` Ray actors steps ``runner.envs_per_worker`` envs (IMPALA's actors) with a CPU copy of
the policy; one call rolls out ``n_rollout_steps`` and returns one trajectory per env. The learner keeps one call in
flight per worker. After each update it puts the new weights into Ray's object store once (``ray.put``); a call
carries that reference only to a worker whose weights are older, and Ray hands the worker the array.

The bounded queue: a finished call's trajectories wait for the learner; while ``queue_size`` trajectories wait, no
new call starts, so a worker never runs further ahead of the learner than its call in flight.

A worker that dies (its process killed, out of memory, its node gone) is replaced by a fresh one while
``runner.max_worker_restarts`` allows: IMPALA learns from whatever trajectories arrive, so the learner goes on with
the others meanwhile; the lost call's trajectories are simply not there. A worker that raises fails the run with its
traceback (an env's error would only repeat).
"""

from __future__ import annotations

import copy
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from maze_lab.core.utils import pickling
from maze_lab.core.utils.log import get_logger
from maze_lab.distributed.ray_runtime import remote_worker_class, stop_ray_actors
from maze_lab.train.ray_config import RayWorkerSettings
from maze_lab.train.ray_rollouts import RayWorkerError, _RolloutWorker, get_from_worker
from maze_lab.train.trainers.impala.actors import (
    ImpalaActorError,
    Trajectory,
    _policy_tensors,
    flat_weights,
    load_flat_weights,
    split_rollout,
)

_log = get_logger(__name__)

RESTART_SEED_STRIDE = 1_000_003
"""A replacement worker's envs are reset with the dead one's seeds plus this times the restart count: fresh
episodes, still determined by the run's seed."""


class ImpalaRayActorError(ImpalaActorError, RayWorkerError):
    """An IMPALA Ray worker raised (the message carries its traceback) or died with no restart left; all workers
    were shut down."""


class _ImpalaRayWorker(_RolloutWorker):
    """The body of an IMPALA Ray actor: a rollout worker's vector env of its IMPALA actors' envs and policy copy,
    returning one trajectory per env and tagging them with the version of the weights that acted."""

    def __init__(self, actors: list[int], factories_payload: bytes, policy_payload: bytes, n_rollout_steps: int,
                 seed: int | None):
        super().__init__(actors[0], factories_payload, policy_payload, seed)
        self.actors = actors
        self.policy.eval()
        self.tensors = _policy_tensors(self.policy)
        self.generator.reset(seed)
        self.n_rollout_steps = n_rollout_steps
        self.version = -1

    def trajectories(self, weights: np.ndarray | None, version: int) -> list[Trajectory]:
        """Load ``weights`` (those of update ``version``; None: the worker holds them already), roll out and return
        one trajectory per env; the finished episodes' statistics travel with the first."""
        from maze_lab.train.vector_env import pop_episode_stats

        if weights is not None:
            load_flat_weights(self.tensors, weights)
            self.version = version
        rollout = self.generator.rollout(self.policy, self.n_rollout_steps)
        episodes = pop_episode_stats(self.venv.envs)
        return [Trajectory(self.actors[i], self.version, part, episodes if i == 0 else [])
                for i, part in enumerate(split_rollout(rollout))]


class RayActorPool:
    """IMPALA's actors on Ray; the methods the learner calls on
    :class:`~maze_lab.train.trainers.impala.actors.ActorPool` (``publish``, ``get``, ``qsize``, ``close``,
    ``closed``). Ray must be initialized (the trainer connects).

    :param env_factories: one factory per IMPALA actor (env), ``settings.envs_per_worker`` of them per Ray worker
        (the last worker takes the rest where they do not divide evenly).
    :param policy: the learner's policy; each worker gets a CPU copy.
    :param n_rollout_steps: agent actions per trajectory.
    :param queue_size: trajectories that may wait for the learner; no call starts while this many wait.
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
        self._restarts_of = [0] * n_workers
        self.on_restart = on_restart
        cpu_policy = policy if policy.device.type == "cpu" else copy.deepcopy(policy).to("cpu")
        self._policy_payload = pickling.dumps(cpu_policy)
        self._remote = remote_worker_class(_ImpalaRayWorker, n_workers, settings.num_cpus_per_worker,
                                           settings.num_gpus_per_worker, owns_ray, "IMPALA on Ray")
        self.workers: list[Any] = [None] * n_workers
        self.pids: list[int | None] = [None] * n_workers
        self._held = [-2] * n_workers  # the weights' version each worker holds (or will, once its call runs)
        self._in_flight: dict[Any, int] = {}  # a worker's rollout call -> the worker
        self._received: deque[Trajectory] = deque()
        self._weights_ref: Any = None
        self._version = -1
        self.closed = False
        try:
            for w in range(n_workers):
                self._start(w)
            for w in range(n_workers):
                self.pids[w] = self._get(w, self.workers[w].pid.remote(), "starting")
        except BaseException:
            self.close()
            raise

    # ---- workers ---------------------------------------------------------------------------------------------
    def _start(self, w: int) -> None:
        """Create worker ``w`` (again, after a death: fresh envs, other seeds)."""
        group = self.groups[w]
        seed = None if self.seed is None else self.seed + group[0] + RESTART_SEED_STRIDE * self._restarts_of[w]
        payload = pickling.dumps([self.factories[i] for i in group])
        self.workers[w] = self._remote.remote(group, payload, self._policy_payload, self.n_rollout_steps, seed)
        self._held[w] = -2

    def describe(self, w: int) -> str:
        """Names worker ``w``: its index, pid and IMPALA actors."""
        return f"IMPALA Ray worker {w} (pid {self.pids[w]}, actors {self.groups[w]})"

    def _get(self, w: int, ref: Any, during: str) -> Any:
        return get_from_worker(ref, f"IMPALA Ray worker {w} (actors {self.groups[w]})", self.pids[w], during,
                               "IMPALA Ray workers", ImpalaRayActorError, self.close)

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
        busy = set(self._in_flight.values())
        for w, worker in enumerate(self.workers):
            if len(self._received) >= self.queue_size:
                return
            if w in busy or self._weights_ref is None:
                continue
            weights = self._weights_ref if self._held[w] != self._version else None
            self._held[w] = self._version
            self._in_flight[worker.trajectories.remote(weights, self._version)] = w

    def get(self, timeout: float) -> Trajectory:
        """The next trajectory; raises ImpalaRayActorError where a worker failed or died with no restart left, or
        none came in ``timeout`` seconds."""
        import ray

        deadline = time.monotonic() + timeout
        while True:
            if self._received:
                trajectory = self._received.popleft()
                self._launch_idle()  # the queue has room again
                return trajectory
            self._launch_idle()
            ready, _ = ray.wait(list(self._in_flight), num_returns=1, timeout=0.25)
            for ref in ready:
                self._collect(self._in_flight.pop(ref), ref)
            if not self._received and time.monotonic() > deadline:
                self.close()
                raise ImpalaRayActorError(
                    f"no trajectory reached the learner for {timeout:.0f} s although the IMPALA Ray workers are "
                    f"alive (stuck envs, or a cluster without room for them?); the workers were shut down. Raise "
                    f"algorithm.actor_start_timeout for envs whose rollouts take longer")

    def _collect(self, w: int, ref: Any) -> None:
        """Take worker ``w``'s finished call: its trajectories, or its death (replaced while restarts are left)."""
        import ray

        try:
            self._received.extend(ray.get(ref))
            return
        except ray.exceptions.RayActorError as err:
            if "creation task" in str(err) or self.restarts >= self.max_restarts:
                pass  # named by get_from_worker below
            else:
                self._replace(w, err)
                return
        except ray.exceptions.RayTaskError:
            pass  # the worker raised: get_from_worker raises it with the worker's traceback
        self._get(w, ref, "rolling out")

    def _replace(self, w: int, err: Exception) -> None:
        """Replace dead worker ``w`` by a fresh one (its trajectories in flight are lost)."""
        import ray

        self.restarts += 1
        self._restarts_of[w] += 1
        old = self.describe(w)
        try:
            ray.kill(self.workers[w])
        except Exception:  # noqa: BLE001 - it is gone already
            pass
        self._start(w)
        self.pids[w] = self._get(w, self.workers[w].pid.remote(), "starting again after a death")
        message = (f"{old} died ({' '.join(str(err).split())[:160]}); replaced it by a fresh worker (pid "
                   f"{self.pids[w]}), restart {self.restarts} of runner.max_worker_restarts={self.max_restarts}")
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
        workers, self.workers = [w for w in self.workers if w is not None], []
        self._in_flight.clear()
        stop_ray_actors(workers)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
