"""The worker processes of evolution strategies: each holds one env (built from a cloudpickled factory), a copy of
the policy and its own copy of the noise table, and plays antithetic pairs of episodes for the main process.

A task is a perturbation (an offset into the noise table) and the env seed of its two episodes; the parameters
reach the workers once per update. Both episodes of a pair start from the same env seed, so their returns differ
only by the sign of the perturbation. Because each task carries its own seeds, its result does not depend on which
worker plays it: tasks go to whichever worker is free.

The pool (:class:`ESWorkerPool`) is written once on the worker protocol's transports
(:mod:`maze_lab.distributed.transport`): :class:`ESWorkers` runs it in local processes, ES on Ray
(:mod:`maze_lab.train.trainers.es.ray_workers`) in Ray actors, with the same worker (:func:`_build`,
:func:`_command`, :func:`_close`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import cloudpickle
import numpy as np

from maze_lab.core.log_stats.aggregation import LogStats
from maze_lab.core.utils import pickling
from maze_lab.core.utils.log import get_logger
from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.distributed.protocol import NO_REPLY, WorkerDied, WorkerError, WorkerRaised, died_message
from maze_lab.distributed.transport import ProcessTransport
from maze_lab.distributed.weights import copy_flat
from maze_lab.train.vector_env import pop_episode_stats

_log = get_logger(__name__)


class ESWorkerError(WorkerError):
    """An ES worker process failed: it raised (the message carries its traceback) or it died (killed by a
    signal, out of memory); all workers were shut down."""


@dataclass
class PairTask:
    """One perturbation to evaluate: theta + sigma * eps and theta - sigma * eps, eps = noise[offset:offset+dim]."""

    index: int
    """Position of the task in the update (results come back in this order)."""
    offset: int
    """Offset of eps in the noise table."""
    env_seed: int
    """Seed of the env reset of both episodes (and of action sampling where rollouts are not deterministic)."""


@dataclass
class PairResult:
    """The two episodes of a task: index 0 with +eps, index 1 with -eps."""

    index: int
    returns: tuple[float, float]
    lengths: tuple[int, int]
    episodes: list[LogStats] = field(default_factory=list)
    """Statistics of the episodes the worker's env finished while playing the task."""


@dataclass
class _WorkerSpec:
    """Everything a worker builds itself from (sent once, with cloudpickle)."""

    env_factory: Callable[[], Any]
    policy: Any
    noise_table_seed: int
    noise_table_size: int
    noise_stddev: float
    max_steps: int
    deterministic: bool
    normalization_statistics: Any = None
    """Observation normalization statistics of a checkpoint, given to the env instead of estimating them."""


set_flat_parameters = copy_flat
"""Copy a flat tensor into the policy's parameters (:func:`maze_lab.distributed.weights.copy_flat`)."""


def play_episode(env: Any, policy: Any, seed: int, max_steps: int, deterministic: bool) -> tuple[float, int]:
    """One episode of ``policy`` from ``env.reset(seed=seed)``; returns its return and its number of agent actions.

    :param max_steps: cut the episode after this many agent actions (0: play until the env ends it).
    """
    import torch

    if not deterministic:
        torch.manual_seed(seed)  # the same action samples for both episodes of a pair, and on every run
    obs, _ = env.reset(seed=seed)
    total, steps = 0.0, 0
    while True:
        action = policy.compute_action(obs, actor_id=env.actor_id(), deterministic=deterministic)
        obs, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        steps += 1
        if terminated or truncated or (max_steps and steps >= max_steps):
            return total, steps


@dataclass
class _Worker:
    """What a worker process holds: its env, its policy copy and the noise table; the parameters of the update."""

    env: Any
    spec: _WorkerSpec
    policy: Any
    params: list[Any]
    dim: int
    table: Any
    theta: np.ndarray | None = None


def _build(payload: bytes) -> _Worker:
    """The worker's env, policy copy and noise table, from its cloudpickled :class:`_WorkerSpec`."""
    import torch

    from maze_lab.train.trainers.es.noise_table import NoiseTable

    torch.set_num_threads(1)  # one process per core does the parallel work; intra-op threads would fight over them
    spec: _WorkerSpec = cloudpickle.loads(payload)
    env = spec.env_factory()
    if not isinstance(env, LogStatsWrapper):
        env = LogStatsWrapper.wrap(env)
    worker = _Worker(env, spec, spec.policy, [], 0, None)
    try:
        if spec.normalization_statistics:
            env.set_normalization_statistics(spec.normalization_statistics)
        worker.policy.eval()
        worker.params = list(worker.policy.parameters())
        worker.dim = sum(p.numel() for p in worker.params)
        worker.table = NoiseTable(spec.noise_table_seed, spec.noise_table_size)
        worker.table.check_fits(worker.dim)
    except BaseException:
        _close(worker)
        raise
    return worker


def _command(worker: _Worker, cmd: str, data: Any) -> Any:
    """The worker's answer to one command of the main process (the parameters are not answered)."""
    import torch

    if cmd == "params":
        theta = np.asarray(data, dtype=np.float32)
        if theta.shape != (worker.dim,):
            raise ValueError(f"the main process sent {theta.shape} parameters; this worker's policy has {worker.dim}")
        worker.theta = theta
        return NO_REPLY
    if cmd == "pair":
        if worker.theta is None:
            raise RuntimeError("a task arrived before the parameters of its update")
        task: PairTask = data
        spec = worker.spec
        eps = worker.table.get(task.offset, worker.dim)
        returns, lengths = [], []
        with torch.no_grad():
            for sign in (1.0, -1.0):
                set_flat_parameters(worker.params, torch.from_numpy(worker.theta + sign * spec.noise_stddev * eps))
                ret, length = play_episode(worker.env, worker.policy, task.env_seed, spec.max_steps,
                                           spec.deterministic)
                returns.append(ret)
                lengths.append(length)
        episodes = pop_episode_stats([worker.env])
        return PairResult(task.index, (returns[0], returns[1]), (lengths[0], lengths[1]), episodes)
    if cmd == "normalization":
        getter = getattr(worker.env, "get_normalization_statistics", None)
        return getter() if getter is not None else None
    raise ValueError(f"unknown command {cmd!r}")


def _close(worker: _Worker) -> None:
    """Flush and close the worker's env (a failing one must not hide how the worker ended)."""
    for name in ("flush_event_logs", "close"):
        with contextlib.suppress(Exception):
            getattr(worker.env, name, lambda: None)()


class ESWorkerPool:
    """ES workers on a transport of the worker protocol, one per env factory: what the ES trainer calls (``len``,
    ``evaluate``, ``normalization_statistics``, ``close``). :class:`ESWorkers` (local processes) and
    :class:`~maze_lab.train.trainers.es.ray_workers.ESRayWorkers` (Ray actors) say which transport and how a failure
    is worded.

    :param transport: what carries the workers (made for ``len(env_factories)`` workers; local processes with
        ``broadcast_size`` = the policy's parameter count).
    :param name: how a worker is named (``ES worker``), its index added.
    :param env_factories: one factory per worker (cloudpickled: lambdas and notebook functions work).
    :param policy: the policy (a TorchPolicy); each worker gets a CPU copy.
    :param noise_table_seed: seed of the noise table every worker builds.
    :param noise_table_size: floats in that table.
    :param noise_stddev: sigma, the scale of the perturbations.
    :param max_steps: cut episodes after this many agent actions (0: never).
    :param deterministic: act with the most likely action in the episodes.
    :param normalization_statistics: observation normalization statistics every env gets (None: the envs'
        own, estimated at their first reset).
    :param max_restarts: dead workers replaced by fresh ones (each plays its pair again: a task's result depends only
        on its seeds and theta, so the update stays what it would have been); more deaths fail the run.
    :param on_restart: called with a message each time a dead worker was replaced.
    """

    label = "ES workers"
    """The workers, for messages (``ES Ray workers``)."""

    def __init__(self, transport: Any, name: str, env_factories: Sequence[Callable[[], Any]], policy: Any,
                 noise_table_seed: int, noise_table_size: int, noise_stddev: float, max_steps: int = 0,
                 deterministic: bool = True, normalization_statistics: Any = None, max_restarts: int = 0,
                 on_restart: Callable[[str], None] | None = None):
        import copy

        cpu_policy = copy.deepcopy(policy)
        cpu_policy.to("cpu")
        self.transport = transport
        self.n_workers = len(env_factories)
        self.max_restarts, self.restarts = max_restarts, 0
        self.on_restart = on_restart
        self.workers: list[Any] = []
        self._closed = False
        self._lock = threading.Lock()  # one exchange at a time (a checkpoint may be written from another thread)
        try:
            for index, factory in enumerate(env_factories):
                payload = pickling.dumps(_WorkerSpec(factory, cpu_policy, int(noise_table_seed),
                                                        int(noise_table_size), float(noise_stddev), int(max_steps),
                                                        bool(deterministic), normalization_statistics))
                self.workers.append(transport.start(f"{name} {index}", partial(_build, payload), _command,
                                                    close=_close))
            try:
                transport.gather(self.workers)  # each worker answers once its env is built
            except WorkerError as failure:
                raise self._error(failure, "starting") from None
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return self.n_workers

    @property
    def pids(self) -> list[int | None]:
        """The workers' process ids."""
        return [worker.pid for worker in self.workers]

    def _error(self, failure: WorkerError, during: str) -> Exception:
        """The error of a worker that raised, failed to start or died ``during`` something, naming it (after all
        workers were shut down)."""
        raise NotImplementedError

    def evaluate(self, theta: np.ndarray, tasks: Sequence[PairTask]) -> list[PairResult]:
        """Play the pairs of ``tasks`` with the parameters ``theta``; results in the order of the tasks.

        The parameters go to the workers once (stored once for all of them), then the tasks to whichever worker is
        free. A worker that dies is replaced while restarts are left; any other failure (a worker's exception, an
        interrupt) shuts all workers down: they would be out of step for the next update.
        """
        if self._closed:
            raise RuntimeError(f"these {self.label} are closed (after close() or a worker failure)")
        position = {task.index: i for i, task in enumerate(tasks)}
        results: list[PairResult | None] = [None] * len(tasks)
        theta = np.ascontiguousarray(theta, dtype=np.float32)
        with self._lock:
            try:
                pending = list(tasks)[::-1]
                first = self.workers[:len(pending)]
                # a worker runs its commands in the order they were sent: the parameters come before the pair
                self.transport.broadcast(first, "params", theta)
                busy = {worker: self._play(worker, pending.pop()) for worker in first}
                while busy:
                    for worker in self.transport.ready(list(busy)):
                        task = busy.pop(worker)
                        try:
                            result: PairResult = worker.receive()
                        except WorkerDied as died:
                            if self.restarts >= self.max_restarts:
                                raise self._error(died, "playing a pair of episodes") from None
                            self._replace(worker, died)  # the fresh worker plays the same pair
                            self.transport.broadcast([worker], "params", theta)
                            busy[worker] = self._play(worker, task)
                            continue
                        except WorkerError as failure:
                            raise self._error(failure, "playing a pair of episodes") from None
                        results[position[result.index]] = result
                        if pending:
                            busy[worker] = self._play(worker, pending.pop())
            except (WorkerDied, WorkerRaised) as failure:  # a message to a dead local worker fails at once
                raise self._error(failure, "playing a pair of episodes") from None
            except BaseException:
                self.close()
                raise
        return [r for r in results if r is not None]

    @staticmethod
    def _play(worker: Any, task: PairTask) -> PairTask:
        worker.send(("pair", task))
        return task

    def normalization_statistics(self) -> Any:
        """The observation normalization statistics of worker 0's env (all workers' are the same: they are
        estimated with one sampling seed or given); None where the env does not normalize observations."""
        if self._closed:
            raise RuntimeError(f"these {self.label} are closed (after close() or a worker failure)")
        with self._lock:
            try:
                try:
                    return self.workers[0].request("normalization")
                except WorkerError as failure:
                    raise self._error(failure, "reading normalization statistics") from None
            except BaseException:
                self.close()
                raise

    def _replace(self, worker: Any, died: WorkerDied) -> None:
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

    def close(self) -> None:
        """Stop all workers (each flushes and closes its env first, after the episode it is in); idempotent. Those
        that do not end in time are ended by force. Ray itself is left running: the trainer shuts down a Ray it
        started."""
        if self._closed:
            return
        self._closed = True
        workers, self.workers = self.workers, []
        self.transport.shutdown(workers)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class ESWorkers(ESWorkerPool):
    """ES workers in local processes, one per env factory: :class:`ESWorkerPool` on the local transport (the other
    parameters are the pool's).

    :param start_method: the ``multiprocessing`` start method (``spawn``: safe in kernels with threads).
    """

    def __init__(self, env_factories: Sequence[Callable[[], Any]], policy: Any, noise_table_seed: int,
                 noise_table_size: int, noise_stddev: float, max_steps: int = 0, deterministic: bool = True,
                 start_method: str = "spawn", normalization_statistics: Any = None):
        if not env_factories:
            raise ValueError("ES needs at least one env factory (one per worker process)")
        # the parameters of each update go through one shared-memory array that every worker reads
        transport = ProcessTransport(start_method, "ES workers", "maze-lab-es-worker", close_timeout=10.0,
                                     broadcast_size=sum(p.numel() for p in policy.parameters()))
        super().__init__(transport, "ES worker", env_factories, policy, noise_table_seed, noise_table_size,
                         noise_stddev, max_steps, deterministic, normalization_statistics)

    @property
    def processes(self) -> list[Any]:
        """The worker processes."""
        return [worker.process for worker in self.workers]

    def _error(self, failure: WorkerError, during: str) -> ESWorkerError:
        self.close()
        name = failure.worker.describe()
        if isinstance(failure, WorkerRaised):
            return ESWorkerError(f"{name} raised; all workers were shut down. The worker's traceback:\n"
                                 f"{failure.trace}")
        how = failure.how if isinstance(failure, WorkerDied) else None
        how = f"killed by {how}" if how and how.startswith("signal") else how or "it stopped answering"
        return ESWorkerError(died_message(name, how, "all workers were shut down"))
