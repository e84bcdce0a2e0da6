"""The workers of evolution strategies as Ray actors (``algorithm=es runner=ray``): the same work as the local
worker processes of :mod:`maze_lab.train.trainers.es.workers`, on a local Ray or a cluster.

Each actor builds its env from a cloudpickled factory, keeps a CPU copy of the policy and builds the noise table
from its seed. Per update the driver puts theta into Ray's object store once (``ray.put``) and hands every actor the
same reference; then the pair tasks (noise offset, env seed) go to whichever actor is free. A task's result depends
only on its seeds and theta, and the results are put back in task order, so the update equals the one of the local
worker processes with the same seed and number of workers.
"""

from __future__ import annotations

import copy
import os
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import numpy as np

from maze_lab.core.utils import pickling
from maze_lab.core.utils.log import get_logger
from maze_lab.distributed.ray_runtime import remote_worker_class, stop_ray_actors
from maze_lab.train.ray_config import RayWorkerSettings
from maze_lab.train.ray_rollouts import RayWorkerError, get_from_worker
from maze_lab.train.trainers.es.workers import (
    ESWorkerError,
    PairResult,
    PairTask,
    _WorkerSpec,
    play_episode,
    set_flat_parameters,
)

_log = get_logger(__name__)


class ESRayWorkerError(ESWorkerError, RayWorkerError):
    """An ES Ray worker raised (the message carries its traceback) or died (the message names it); all ES actors
    were shut down."""


class _ESActor:
    """The body of an ES Ray actor: one env, a CPU copy of the policy and the noise table."""

    def __init__(self, index: int, payload: bytes):
        import torch

        from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
        from maze_lab.train.trainers.es.noise_table import NoiseTable

        torch.set_num_threads(1)  # one core per actor: intra-op threads would only contend with the other actors
        self.index = index
        spec: _WorkerSpec = cloudpickle.loads(payload)
        env = spec.env_factory()
        if not isinstance(env, LogStatsWrapper):
            env = LogStatsWrapper.wrap(env)
        if spec.normalization_statistics:
            env.set_normalization_statistics(spec.normalization_statistics)
        self.env, self.spec = env, spec
        self.policy = spec.policy
        self.policy.eval()
        self.params = list(self.policy.parameters())
        self.dim = sum(p.numel() for p in self.params)
        self.table = NoiseTable(spec.noise_table_seed, spec.noise_table_size)
        self.table.check_fits(self.dim)
        self.theta: np.ndarray | None = None

    def pid(self) -> int:
        """The actor's process id (named in errors)."""
        return os.getpid()

    def set_theta(self, theta: np.ndarray) -> None:
        """Keep the update's parameters (Ray resolves the driver's one object-store reference to them)."""
        theta = np.asarray(theta, dtype=np.float32)
        if theta.shape != (self.dim,):
            raise ValueError(f"the driver sent {theta.shape} parameters; this worker's policy has {self.dim}")
        self.theta = theta

    def pair(self, task: PairTask) -> PairResult:
        """Play the antithetic pair of ``task`` (theta + sigma * eps, then theta - sigma * eps)."""
        import torch

        from maze_lab.train.vector_env import pop_episode_stats

        if self.theta is None:
            raise RuntimeError("a task arrived before the parameters of its update")
        eps = self.table.get(task.offset, self.dim)
        returns, lengths = [], []
        with torch.no_grad():
            for sign in (1.0, -1.0):
                set_flat_parameters(self.params, torch.from_numpy(self.theta + sign * self.spec.noise_stddev * eps))
                ret, length = play_episode(self.env, self.policy, task.env_seed, self.spec.max_steps,
                                           self.spec.deterministic)
                returns.append(ret)
                lengths.append(length)
        return PairResult(task.index, (returns[0], returns[1]), (lengths[0], lengths[1]),
                          pop_episode_stats([self.env]))

    def normalization(self) -> Any:
        """The env's observation normalization statistics (None where it does not normalize)."""
        getter = getattr(self.env, "get_normalization_statistics", None)
        return getter() if getter is not None else None

    def close(self) -> None:
        """Flush the env's event logs and close it."""
        for name in ("flush_event_logs", "close"):
            try:
                getattr(self.env, name, lambda: None)()
            except Exception:  # noqa: BLE001 - a failing close must not hide the others' work
                traceback.print_exc()


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
        self._remote = remote_worker_class(_ESActor, n, settings.num_cpus_per_worker, settings.num_gpus_per_worker,
                                           owns_ray, "ES on Ray")
        self.n_workers = n
        self.max_restarts, self.restarts = settings.max_worker_restarts, 0
        self.on_restart = on_restart
        self._payloads = [pickling.dumps(_WorkerSpec(factory, cpu_policy, int(noise_table_seed),
                                                        int(noise_table_size), float(noise_stddev), int(max_steps),
                                                        bool(deterministic), normalization_statistics))
                          for factory in env_factories]
        self.actors: list[Any] = []
        self.pids: list[int | None] = []
        self._generation = [0] * n  # how often each actor was replaced
        self._closed = False
        self._lock = threading.Lock()  # one exchange at a time (a checkpoint may be written from another thread)
        try:
            for index in range(n):
                self.actors.append(self._remote.remote(index, self._payloads[index]))
            self.pids = [None] * n
            for index, actor in enumerate(self.actors):
                self.pids[index] = self._get(index, actor.pid.remote(), "starting")
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return self.n_workers

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
                setup = [(actor.set_theta.remote(theta_ref), w, self._generation[w])
                         for w, actor in enumerate(self.actors)]
                pending = list(tasks)[::-1]
                busy: dict[Any, tuple[int, PairTask, int]] = {}  # a pair call -> (actor, its task, actor generation)
                for w, actor in enumerate(self.actors):
                    if not pending:
                        break
                    # an actor runs its calls in the order they were made: set_theta comes before the pair
                    task = pending.pop()
                    busy[actor.pair.remote(task)] = (w, task, self._generation[w])
                for ref, w, generation in setup:
                    self._outcome(w, generation, ref, "receiving the parameters", theta_ref)
                while busy:
                    ready, _ = ray.wait(list(busy), num_returns=1)
                    w, task, generation = busy.pop(ready[0])
                    done, result = self._outcome(w, generation, ready[0], "playing a pair of episodes", theta_ref)
                    if not done:  # the actor died and was replaced: the fresh one plays the same pair
                        busy[self.actors[w].pair.remote(task)] = (w, task, self._generation[w])
                        continue
                    results[position[result.index]] = result
                    if pending:
                        task = pending.pop()
                        busy[self.actors[w].pair.remote(task)] = (w, task, self._generation[w])
            except BaseException:
                self.close()
                raise
        return [r for r in results if r is not None]

    def normalization_statistics(self) -> Any:
        """The observation normalization statistics of actor 0's env (all are alike); None where it does not
        normalize observations."""
        if self._closed:
            raise RuntimeError("these ES Ray workers are closed (after close() or a worker failure)")
        with self._lock:
            try:
                return self._get(0, self.actors[0].normalization.remote(), "reading normalization statistics")
            except BaseException:
                self.close()
                raise

    def _outcome(self, w: int, generation: int, ref: Any, during: str, theta_ref: Any) -> tuple[bool, Any]:
        """(True, value) of actor ``w``'s call ``ref``; (False, None) where the actor died and was replaced (now, or
        already: ``generation`` is the actor's generation when the call was made). An actor that raised, failed to
        start, or died with no restart left is raised as an ESRayWorkerError naming it."""
        import ray

        try:
            return True, ray.get(ref)
        except ray.exceptions.RayActorError as err:
            if generation < self._generation[w]:
                return False, None  # a call of the actor that was replaced already
            if "creation task" not in str(err) and self.restarts < self.max_restarts:
                self._replace(w, err, theta_ref)
                return False, None
        except ray.exceptions.RayTaskError:
            pass  # raised below with the actor's traceback
        return True, self._get(w, ref, during)

    def _replace(self, w: int, err: Exception, theta_ref: Any) -> None:
        """Replace dead actor ``w`` by a fresh one holding the update's parameters."""
        import ray

        self.restarts += 1
        self._generation[w] += 1
        old = f"ES Ray worker {w} (pid {self.pids[w]})"
        try:
            ray.kill(self.actors[w])
        except Exception:  # noqa: BLE001 - it is gone already
            pass
        self.actors[w] = self._remote.remote(w, self._payloads[w])
        self.pids[w] = self._get(w, self.actors[w].pid.remote(), "starting again after a death")
        self._get(w, self.actors[w].set_theta.remote(theta_ref), "receiving the parameters")
        message = (f"{old} died ({' '.join(str(err).split())[:160]}); replaced it by a fresh worker (pid "
                   f"{self.pids[w]}) that plays its pair again, restart {self.restarts} of "
                   f"runner.max_worker_restarts={self.max_restarts}")
        _log.warning(message)
        if self.on_restart is not None:
            self.on_restart(message)

    def _get(self, index: int, ref: Any, during: str) -> Any:
        """``ray.get`` of actor ``index``'s reference; its exception or death becomes an ESRayWorkerError naming it
        (after all actors were shut down)."""
        return get_from_worker(ref, f"ES Ray worker {index}", self.pids[index] if index < len(self.pids) else None,
                               during, "ES Ray workers", ESRayWorkerError, self.close)

    def close(self) -> None:
        """Stop the actors (those that still answer flush and close their env first); idempotent. Ray itself is
        left running: the trainer shuts down a Ray it started."""
        if self._closed:
            return
        self._closed = True
        actors, self.actors = self.actors, []
        stop_ray_actors(actors)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
