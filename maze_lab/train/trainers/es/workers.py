"""The worker processes of evolution strategies: each holds one env (built from a cloudpickled factory), a copy of
the policy and its own copy of the noise table, and plays antithetic pairs of episodes for the main process.

A task is a perturbation (an offset into the noise table) and the env seed of its two episodes; the parameters
reach the workers once per update. Both episodes of a pair start from the same env seed, so their returns differ
only by the sign of the perturbation. Because each task carries its own seeds, its result does not depend on which
worker plays it: tasks go to whichever worker is free.

ES on Ray (:mod:`maze_lab.train.trainers.es.ray_workers`) runs the same worker (:func:`_build`, :func:`_command`,
:func:`_close`) in Ray actors.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import numpy as np

from maze_lab.core.log_stats.aggregation import LogStats
from maze_lab.core.utils import pickling
from maze_lab.core.utils.main_guard import check_main_guard
from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.distributed.processes import (
    NO_REPLY,
    WorkerDied,
    WorkerError,
    WorkerProcess,
    WorkerRaised,
    died_message,
    ready_workers,
    serve,
    shutdown_workers,
)
from maze_lab.train.vector_env import pop_episode_stats


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


def set_flat_parameters(params: Sequence[Any], flat: Any) -> None:
    """Copy a flat tensor into ``params`` (in place: the parameters never share memory with ``flat``)."""
    import torch

    start = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(flat[start:start + n].view_as(p))
            start += n


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


def _worker_main(conn: Any, payload: bytes) -> None:
    """Entry point of a worker process: build the env and the policy copy, then play the tasks of the main process
    until it sends ``close`` (or goes away); the env is flushed and closed at the end."""
    serve(conn, lambda: _build(payload), _command, close=_close)


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


class ESWorkers:
    """A pool of ES worker processes, one per env factory (``spawn`` start method: safe in kernels with threads).

    :param env_factories: one factory per worker (cloudpickled: lambdas and notebook functions work).
    :param policy: the policy (a TorchPolicy); each worker gets a cpu copy.
    :param noise_table_seed: seed of the noise table every worker builds.
    :param noise_table_size: floats in that table.
    :param noise_stddev: sigma, the scale of the perturbations.
    :param max_steps: cut episodes after this many agent actions (0: never).
    :param deterministic: act with the most likely action in the episodes.
    :param normalization_statistics: observation normalization statistics every env gets (None: the envs'
        own, estimated at their first reset).
    """

    def __init__(self, env_factories: Sequence[Callable[[], Any]], policy: Any, noise_table_seed: int,
                 noise_table_size: int, noise_stddev: float, max_steps: int = 0, deterministic: bool = True,
                 start_method: str = "spawn", normalization_statistics: Any = None):
        import copy

        if not env_factories:
            raise ValueError("ES needs at least one env factory (one per worker process)")
        cpu_policy = copy.deepcopy(policy)
        cpu_policy.to("cpu")
        check_main_guard(start_method, "ES workers")
        ctx = mp.get_context(start_method)
        self.workers: list[WorkerProcess] = []
        self._closed = False
        self._lock = threading.Lock()  # one exchange at a time (a checkpoint may be written from another thread)
        try:
            for index, factory in enumerate(env_factories):
                payload = pickling.dumps(_WorkerSpec(factory, cpu_policy, int(noise_table_seed),
                                                        int(noise_table_size), float(noise_stddev), int(max_steps),
                                                        bool(deterministic), normalization_statistics))
                self.workers.append(WorkerProcess.start(ctx, f"ES worker {index}", _worker_main, payload,
                                                        process_name=f"maze-lab-es-worker-{index}"))
            for index in range(len(self.workers)):
                self._receive(index)
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self.workers)

    @property
    def processes(self) -> list[Any]:
        """The worker processes."""
        return [worker.process for worker in self.workers]

    def evaluate(self, theta: np.ndarray, tasks: Sequence[PairTask]) -> list[PairResult]:
        """Play the pairs of ``tasks`` with the parameters ``theta``; results in the order of the tasks.

        Any failure (a worker's exception, a dead worker, an interrupt) shuts all workers down: the pipes would be
        out of step for the next update.
        """
        if self._closed:
            raise RuntimeError("these ES workers are closed (after close() or a worker failure)")
        position = {task.index: i for i, task in enumerate(tasks)}
        results: list[PairResult | None] = [None] * len(tasks)
        with self._lock:
            self._exchange(theta, tasks, position, results)
        return [r for r in results if r is not None]

    def _exchange(self, theta: np.ndarray, tasks: Sequence[PairTask], position: dict[int, int],
                  results: list[PairResult | None]) -> None:
        """Send the parameters, then the tasks to whichever worker is free, and fill in ``results``."""
        try:
            theta = np.ascontiguousarray(theta, dtype=np.float32)
            for index in range(len(self.workers)):
                self._send(index, ("params", theta))
            pending = list(tasks)[::-1]
            busy: dict[WorkerProcess, int] = {}
            for index, worker in enumerate(self.workers):
                if not pending:
                    break
                self._send(index, ("pair", pending.pop()))
                busy[worker] = index
            while busy:
                for worker in ready_workers(list(busy)):
                    index = busy.pop(worker)
                    result: PairResult = self._receive(index)
                    results[position[result.index]] = result
                    if pending:
                        self._send(index, ("pair", pending.pop()))
                        busy[worker] = index
        except BaseException:
            self.close()
            raise

    def normalization_statistics(self) -> Any:
        """The observation normalization statistics of worker 0's env (all workers' are the same: they are
        estimated with one sampling seed or given); None where the env does not normalize observations."""
        if self._closed:
            raise RuntimeError("these ES workers are closed (after close() or a worker failure)")
        try:
            with self._lock:
                self._send(0, ("normalization", None))
                return self._receive(0)
        except BaseException:
            self.close()
            raise

    def _send(self, index: int, message: Any) -> None:
        try:
            self.workers[index].send(message)
        except WorkerDied as died:
            raise self._died(died) from None

    def _receive(self, index: int) -> Any:
        try:
            return self.workers[index].receive()
        except WorkerDied as died:
            raise self._died(died) from None
        except WorkerRaised as raised:
            self.close()
            raise ESWorkerError(f"{raised.worker.describe()} raised; all workers were shut down. The worker's "
                                f"traceback:\n{raised.trace}") from None

    def _died(self, died: WorkerDied) -> ESWorkerError:
        """The error for a worker whose pipe broke: how it ended (signal or exit code); shuts the others down."""
        self.close()
        how = died.how
        how = f"killed by {how}" if how and how.startswith("signal") else how or "it stopped answering"
        return ESWorkerError(died_message(died.worker.describe(), how, "all workers were shut down"))

    def close(self) -> None:
        """Stop all workers (each flushes and closes its env first); idempotent. Processes that do not exit in
        time are terminated, then killed."""
        if self._closed:
            return
        self._closed = True
        shutdown_workers(self.workers, timeout=10.0)  # a worker finishes the episode it is in, then reads the close

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
