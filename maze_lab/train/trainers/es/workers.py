"""The worker processes of evolution strategies: each holds one env (built from a cloudpickled factory), a copy of
the policy and its own copy of the noise table, and plays antithetic pairs of episodes for the main process.

A task is a perturbation (an offset into the noise table) and the env seed of its two episodes; the parameters
reach the workers once per update. Both episodes of a pair start from the same env seed, so their returns differ
only by the sign of the perturbation. Because each task carries its own seeds, its result does not depend on which
worker plays it: tasks go to whichever worker is free.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import signal
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import numpy as np

from maze_lab.core.log_stats.aggregation import LogStats
from maze_lab.core.utils import pickling
from maze_lab.core.utils.main_guard import check_main_guard
from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.train.vector_env import end_process, how_it_ended, pop_episode_stats


class ESWorkerError(RuntimeError):
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
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's business: it shuts workers down
    import torch

    torch.set_num_threads(1)  # one process per core does the parallel work; intra-op threads would fight over them
    env = None
    try:
        built = _build(conn, payload)
        if built is not None:
            env, spec = built
            _serve(conn, env, spec)
    except (BrokenPipeError, EOFError, ConnectionError):
        pass  # the main process closed the pipe while shutting down: nothing left to report to
    finally:
        if env is not None:
            for name in ("flush_event_logs", "close"):
                try:
                    getattr(env, name, lambda: None)()
                except Exception:  # noqa: BLE001 - a failing close must not hide how the worker ended
                    pass
        conn.close()


def _build(conn: Any, payload: bytes) -> tuple[Any, _WorkerSpec] | None:
    """The worker's env and spec, or None after reporting why they could not be built."""
    try:
        spec: _WorkerSpec = cloudpickle.loads(payload)
        env = spec.env_factory()
        if not isinstance(env, LogStatsWrapper):
            env = LogStatsWrapper.wrap(env)
        if spec.normalization_statistics:
            env.set_normalization_statistics(spec.normalization_statistics)
        conn.send(("ready", None))
        return env, spec
    except (BrokenPipeError, ConnectionError):
        raise
    except BaseException:  # noqa: BLE001 - report anything, import errors included, to the main process
        conn.send(("error", traceback.format_exc()))
        return None


def _serve(conn: Any, env: Any, spec: _WorkerSpec) -> None:
    """Answer the main process's commands until it sends ``close`` or goes away."""
    import torch

    from maze_lab.train.trainers.es.noise_table import NoiseTable

    try:
        policy = spec.policy
        policy.eval()
        params = list(policy.parameters())
        dim = sum(p.numel() for p in params)
        table = NoiseTable(spec.noise_table_seed, spec.noise_table_size)
        table.check_fits(dim)
        theta: np.ndarray | None = None
        while True:
            try:
                cmd, data = conn.recv()
            except (EOFError, OSError):
                return
            if cmd == "params":
                theta = np.asarray(data, dtype=np.float32)
                if theta.shape != (dim,):
                    raise ValueError(f"the main process sent {theta.shape} parameters; this worker's policy has {dim}")
            elif cmd == "pair":
                if theta is None:
                    raise RuntimeError("a task arrived before the parameters of its update")
                task: PairTask = data
                eps = table.get(task.offset, dim)
                returns, lengths = [], []
                with torch.no_grad():
                    for sign in (1.0, -1.0):
                        set_flat_parameters(params, torch.from_numpy(theta + sign * spec.noise_stddev * eps))
                        ret, length = play_episode(env, policy, task.env_seed, spec.max_steps, spec.deterministic)
                        returns.append(ret)
                        lengths.append(length)
                episodes = pop_episode_stats([env])
                conn.send(("ok", PairResult(task.index, (returns[0], returns[1]), (lengths[0], lengths[1]),
                                            episodes)))
            elif cmd == "normalization":
                getter = getattr(env, "get_normalization_statistics", None)
                conn.send(("ok", getter() if getter is not None else None))
            elif cmd == "close":
                return
            else:
                raise ValueError(f"unknown command {cmd!r}")
    except (BrokenPipeError, ConnectionError):
        raise
    except BaseException:  # noqa: BLE001 - the traceback goes to the main process, which raises it
        conn.send(("error", traceback.format_exc()))


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
        self.conns: list[Any] = []
        self.processes: list[Any] = []
        self._closed = False
        self._lock = threading.Lock()  # one exchange at a time (a checkpoint may be written from another thread)
        try:
            for factory in env_factories:
                payload = pickling.dumps(_WorkerSpec(factory, cpu_policy, int(noise_table_seed),
                                                        int(noise_table_size), float(noise_stddev), int(max_steps),
                                                        bool(deterministic), normalization_statistics))
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker_main, args=(child, payload), daemon=True,
                                   name=f"maze-lab-es-worker-{len(self.processes)}")
                proc.start()
                child.close()
                self.conns.append(parent)
                self.processes.append(proc)
            for index in range(len(self.conns)):
                self._receive(index)
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self.processes)

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
            for index in range(len(self.conns)):
                self._send(index, ("params", theta))
            pending = list(tasks)[::-1]
            busy: dict[Any, int] = {}
            for index, conn in enumerate(self.conns):
                if not pending:
                    break
                self._send(index, ("pair", pending.pop()))
                busy[conn] = index
            while busy:
                for conn in mp.connection.wait(list(busy)):
                    index = busy.pop(conn)
                    result: PairResult = self._receive(index)
                    results[position[result.index]] = result
                    if pending:
                        self._send(index, ("pair", pending.pop()))
                        busy[conn] = index
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
            self.conns[index].send(message)
        except (BrokenPipeError, ConnectionError, OSError):
            raise self._died(index) from None

    def _receive(self, index: int) -> Any:
        try:
            status, data = self.conns[index].recv()
        except (EOFError, OSError):
            raise self._died(index) from None
        if status == "error":
            pid = self.processes[index].pid
            self.close()
            raise ESWorkerError(f"ES worker {index} (pid {pid}) raised; all workers were shut down. The worker's "
                                f"traceback:\n{data}")
        return data

    def _died(self, index: int) -> ESWorkerError:
        """The error for a worker whose pipe broke: how it ended (signal or exit code); shuts the others down."""
        proc = self.processes[index]
        how = how_it_ended(proc)
        self.close()
        how = f"killed by {how}" if how and how.startswith("signal") else how or "it stopped answering"
        return ESWorkerError(f"ES worker {index} (pid {proc.pid}) died: {how}, without reporting an error (killed "
                             "from outside, or out of memory?); all workers were shut down")

    def close(self) -> None:
        """Stop all workers (each flushes and closes its env first); idempotent. Processes that do not exit in
        time are terminated, then killed."""
        if self._closed:
            return
        self._closed = True
        for conn in self.conns:
            try:
                conn.send(("close", None))
            except (BrokenPipeError, ConnectionError, OSError):
                pass
        for proc in self.processes:
            end_process(proc, wait=10.0)  # a worker finishes the episode it is in, then reads the close
        for conn in self.conns:
            conn.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
