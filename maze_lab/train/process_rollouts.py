"""A2C/PPO rollouts in local worker processes (``runner=processes``): the local counterpart of ``runner=ray``.

Why: with ``runner=dev`` the training thread steps the envs and runs the policy for every env step, all of it
Python under the interpreter lock that a Jupyter kernel's cells need too; ``runner=local`` moves only the env steps
out (the policy still runs in the kernel, one pipe round trip per step). Here each of ``n_workers`` processes holds
``envs_per_worker`` envs and a CPU copy of the policy and rolls out a whole update by itself; the learner in the
kernel only publishes the weights once per update, waits (without the interpreter lock) and merges the workers'
packed rollouts. The run (RunContext, trainer, learner) stays in the kernel.

The worker (:class:`RolloutWorker` and its commands, :func:`rollout_command`) is the one ``runner=ray``'s actors run
too, and the packing and merging of rollouts and the trainer-facing generator are those of
:mod:`maze_lab.train.ray_rollouts` (:func:`pack_rollout`, :func:`merge_packed`, :class:`RayRolloutGenerator`); what
differs is the transport (:mod:`maze_lab.distributed.processes`): a pipe per worker for commands and rollouts, and
the weights in one shared-memory array (IMPALA's :class:`~maze_lab.train.trainers.impala.actors.SharedWeights`), so a
new set of weights costs the learner one flat copy instead of pickling them for every worker.

Seeds as with Ray: env ``e`` of worker ``w`` is reset with ``seed + w * envs_per_worker + e``, worker ``w`` samples
from torch seeded with ``seed + w``; the same seed and number of workers repeat a run exactly.

This module imports neither torch nor Ray at import time (``validate_process_runner`` runs before anything heavy).
"""

from __future__ import annotations

import contextlib
import copy
import multiprocessing as mp
import os
import time
import weakref
from collections.abc import Callable, Sequence
from functools import partial
from multiprocessing.connection import wait
from typing import Any

import cloudpickle

from maze_lab.core.log_stats.aggregation import LogStats
from maze_lab.core.log_stats.writers import LogStatsWriter
from maze_lab.core.utils import pickling
from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.core.utils.main_guard import check_main_guard
from maze_lab.distributed.processes import (
    NO_REPLY,
    WorkerDied,
    WorkerError,
    WorkerProcess,
    WorkerRaised,
    died_message,
    serve,
    shutdown_workers,
)
from maze_lab.train.ray_config import check_worker_counts
from maze_lab.train.ray_rollouts import (
    EnvFactory,
    RayEnvGroup,
    RayRolloutGenerator,
    pack_rollout,
    rolling_out,
    worker_group_parts,
)

PROCESS_ALGORITHMS = ("PPOAlgorithmConfig", "A2CAlgorithmConfig")
"""The algorithm configs whose rollouts run in the worker processes (A2C and PPO take a rollout generator)."""

_CLOSE_TIMEOUT = 10.0
"""Seconds the workers get to flush their envs' event logs and exit before they are terminated."""


class ProcessWorkerError(WorkerError):
    """A rollout worker process raised (the message carries its traceback) or died (the message says how)."""


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


# ---- the worker: the same on both transports (these processes, and runner=ray's actors) ------------------------


class RolloutWorker:
    """What a rollout worker holds: a local vector env of its envs, a RolloutGenerator over it, a CPU copy of the
    policy, that policy's tensors (the published weights are copied into them) and the version of their weights."""

    def __init__(self, index: int, factories_payload: bytes, policy_payload: bytes, torch_seed: int | None):
        import torch

        from maze_lab.train.trainers.common.rollout import RolloutGenerator
        from maze_lab.train.trainers.impala.actors import _policy_tensors
        from maze_lab.train.vector_env import SequentialVectorEnv

        torch.set_num_threads(1)  # one core per worker: more threads only contend with the other workers
        if torch_seed is not None:
            torch.manual_seed(torch_seed)
        self.index = index
        self.venv = SequentialVectorEnv(cloudpickle.loads(factories_payload))
        try:
            self.generator = RolloutGenerator(self.venv)
            self.policy = cloudpickle.loads(policy_payload)
            self.tensors = _policy_tensors(self.policy)
        except BaseException:
            with contextlib.suppress(Exception):
                self.venv.close()
            raise
        self.version = -1

    def rollout(self, n_steps: int, epoch: int | None, sampler: Any = None) -> tuple[Any, list[LogStats], float]:
        """Roll out ``n_steps`` with the weights held and return (packed rollout, finished episodes' statistics,
        seconds)."""
        from maze_lab.train.vector_env import pop_episode_stats

        t0 = time.perf_counter()
        self.policy.eval()
        rollout = self.generator.rollout(self.policy, n_steps, epoch=epoch, sampler=sampler)
        for env in self.venv.envs:
            # the run layer flushes the event logs of envs it holds when training ends; these are here
            env.flush_event_logs()
        return pack_rollout(rollout), pop_episode_stats(self.venv.envs), time.perf_counter() - t0

    def call(self, name: str, args: tuple, kwargs: dict) -> tuple[str, Any]:
        """Call a method on every env of this worker: ("ok", results), or ("error", traceback) where it raised (a
        failed call leaves the worker as it was, as in SubprocVectorEnv.call)."""
        import traceback

        try:
            return "ok", [getattr(env, name)(*args, **kwargs) for env in self.venv.envs]
        except Exception:  # noqa: BLE001 - reported to the caller; the envs are unaffected
            return "error", traceback.format_exc()

    def close(self) -> None:
        """Flush the envs' event logs and close them."""
        for env in self.venv.envs:
            flush = getattr(env, "flush_event_logs", None)
            if flush is not None:
                flush()
        self.venv.close()


def rollout_command(weights: Any, worker: RolloutWorker, cmd: str, data: Any) -> Any:
    """A rollout worker's answer to one command of the driver.

    :param weights: the SharedWeights the driver publishes into (local processes); None: the weights arrive as a
        ``weights`` command (Ray: one object in the object store for all workers).
    """
    if cmd == "rollout":
        n_steps, epoch, sampler = data
        if weights is not None:
            worker.version = weights.pull(worker.tensors, worker.version)  # the weights published for this update
        return worker.rollout(n_steps, epoch, sampler)
    if cmd == "weights":
        from maze_lab.train.trainers.impala.actors import load_flat_weights

        load_flat_weights(worker.tensors, data)
        return NO_REPLY
    if cmd == "reset":
        return worker.generator.reset(data)  # env e with seed + e
    if cmd == "call":
        return worker.call(*data)
    raise ValueError(f"unknown command {cmd!r}")


def _worker_main(conn: Any, factories_payload: bytes, index: int, policy_payload: bytes, torch_seed: int | None,
                 weights: Any) -> None:
    """A rollout worker process: build the envs and the policy copy, then serve commands until told to close.

    Commands arrive cloudpickled (a sampler or a ``call`` argument may be a lambda); replies are ("ok", value) or
    ("error", traceback). A failed command is reported and the worker keeps serving; the driver decides. The envs
    flush their event logs before the close is answered."""
    serve(conn, partial(RolloutWorker, index, factories_payload, policy_payload, torch_seed),
          partial(rollout_command, weights), close=RolloutWorker.close, ready=lambda _: os.getpid(), cloudpickled=True)


# ---- the driver side ------------------------------------------------------------------------------------------


class ProcessEnvGroup(RayEnvGroup):
    """Stands where the training vector env would (``trainer.env``), its envs in local worker processes: the spaces,
    ``n_envs``, the ``train`` statistics of the episodes the workers finished, ``call`` on all envs, ``close``.

    ``workers`` (and ``actors``) hold the worker processes (empty until the first rollout and after close), ``pids``
    their ids.

    :param env_factories: one picklable factory per env (``n_workers * envs_per_worker``).
    :param n_workers: processes; worker w holds factories ``w * envs_per_worker ... (w+1) * envs_per_worker - 1``.
    :param spaces: (observation_spaces_dict, action_spaces_dict, agent_counts_dict); None: read from an env built
        here by the first factory.
    :param start_method: multiprocessing start method (``spawn``: safe in a kernel with threads).
    """

    worker_label = "rollout worker"

    def __init__(self, env_factories: Sequence[EnvFactory], n_workers: int, logging_prefix: str = "train",
                 writers: list[LogStatsWriter] | None = None, spaces: tuple[dict, dict, dict] | None = None,
                 start_method: str = "spawn"):
        super().__init__(env_factories, n_workers, logging_prefix, writers, spaces)
        self.start_method = start_method
        self.workers: list[WorkerProcess] = []
        self.weights: Any = None
        self._version = 0
        self._finalizer: Any = None
        self._failure: ProcessWorkerError | None = None
        """The error that shut the workers down, if any (named again where the group is used after it)."""

    @property
    def actors(self) -> list[WorkerProcess]:
        """The worker processes (empty until the first rollout and after close)."""
        return self.workers

    def start(self, policy: Any, seed: int | None) -> None:
        """Start the worker processes with a CPU copy of ``policy`` (its weights are published before every
        rollout) and wait until each has built its envs."""
        from maze_lab.train.trainers.impala.actors import SharedWeights, _policy_tensors

        self._raise_failure()  # a use after a worker failure names that failure
        if self._closed or self._broken:
            raise RuntimeError("this ProcessEnvGroup is closed (after close() or a worker failure)")
        check_main_guard(self.start_method, "rollout worker processes (runner=processes)")
        ctx = mp.get_context(self.start_method)
        policy_copy = copy.deepcopy(policy)
        policy_copy.to("cpu")
        policy_payload = pickling.dumps(policy_copy)
        self.weights = SharedWeights(sum(t.numel() for t in _policy_tensors(policy_copy)), ctx)
        k = self.envs_per_worker
        try:
            for w in range(self.n_workers):
                self.workers.append(WorkerProcess.start(
                    ctx, f"rollout worker {w}", _worker_main, pickling.dumps(self.factories[w * k:(w + 1) * k]), w,
                    policy_payload, None if seed is None else seed + w, self.weights,
                    process_name=f"maze-lab-rollout-worker-{w}", cloudpickled=True))
            self.pids = [worker.pid for worker in self.workers]
            # a group dropped without close() (a trainer garbage-collected in a test) still ends its workers; the
            # finalizer holds no reference to the group
            self._finalizer = weakref.finalize(self, shutdown_workers, list(self.workers), _CLOSE_TIMEOUT)
            self._exchange(None, "starting")  # each worker reports once its envs are built
            self._replay_pending_calls()
        except ProcessWorkerError:
            raise  # the workers are shut down already
        except BaseException:
            self._stop_actors()  # e.g. an unpicklable factory, or an interrupt: no worker is left running
            raise

    def _exchange(self, messages: list[tuple[str, Any]] | None, during: str) -> list[Any]:
        """Send one message per worker (None: send nothing) and read one reply from each, in worker order.

        The wait for the replies releases the interpreter lock. A worker that raised or died stops all workers and
        is raised as ProcessWorkerError; an interrupt stops them too (their pipes would be out of step), and the
        next rollout starts fresh ones."""
        if not self.workers:
            raise RuntimeError(f"the {self.worker_label}s are not running (closed, or stopped by an interrupt)")
        try:
            try:
                if messages is not None:
                    for worker, message in zip(self.workers, messages, strict=True):
                        worker.send(message)
                replies: list[Any] = [None] * len(self.workers)
                waiting = {worker.conn: w for w, worker in enumerate(self.workers)}
                while waiting:
                    for conn in wait(list(waiting)):
                        w = waiting.pop(conn)
                        replies[w] = self.workers[w].receive()
                return replies
            except WorkerDied as died:
                raise self._died(died, during) from None
            except WorkerRaised as raised:
                raise self._raised(raised, during) from None
        except ProcessWorkerError:
            raise
        except BaseException:
            self._stop_actors()
            raise

    def _died(self, died: WorkerDied, during: str) -> ProcessWorkerError:
        """The error for a worker whose pipe broke: how it ended (signal or exit code); all workers stopped."""
        self._fail()
        self._failure = ProcessWorkerError(died_message(
            died.worker.describe(), died.how or "its pipe closed",
            "all rollout workers were shut down. The last checkpoint stays as it was", during))
        return self._failure

    def _raised(self, raised: WorkerRaised, during: str) -> ProcessWorkerError:
        """The error for a worker that reported an exception; all workers stopped."""
        name, trace = raised.worker.describe(), raised.trace
        self._fail()
        if during == "starting":
            self._failure = ProcessWorkerError(f"{name} failed to start (building its envs or policy raised); all "
                                               f"rollout workers were shut down. The worker's traceback:\n{trace}")
        else:
            self._failure = ProcessWorkerError(f"{name} raised while {during}; all rollout workers were shut down. "
                                               f"The worker's traceback:\n{trace}")
        return self._failure

    def rollout_workers(self, policy: Any, n_steps: int, epoch: int | None,
                        sampler: Any) -> list[tuple[Any, list[LogStats], float]]:
        """Publish the weights of ``policy`` (one flat copy into shared memory) and have every worker roll out."""
        self._version += 1
        self.weights.publish(policy, self._version)
        return self._exchange([("rollout", (n_steps, epoch, sampler))] * self.n_workers, rolling_out(epoch))

    def _stop_actors(self) -> None:
        """Stop the worker processes (those that still answer flush their envs' event logs first)."""
        workers, self.workers = self.workers, []
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if workers:
            shutdown_workers(workers, _CLOSE_TIMEOUT)


class ProcessRolloutGenerator(RayRolloutGenerator):
    """What A2C/PPO call to roll out when the envs live in :class:`ProcessEnvGroup` workers: ``rollout(policy,
    n_steps)`` is one command per worker, merged into the :class:`Rollout` the local RolloutGenerator returns.

    ``last_timing`` has, besides ``total``, ``workers`` and ``overhead``, ``learner_cpu``: the CPU time of the
    calling (learner) thread during the rollout, the time it held the interpreter (publishing the weights, pickling
    the commands, unpickling and merging the rollouts); the wait for the workers is not in it.

    :param env: the ProcessEnvGroup of the workers.
    """

    def __init__(self, env: ProcessEnvGroup):
        super().__init__(env)

    def rollout(self, policy: Any, n_steps: int, epoch: int | None = None, sampler: Any = None) -> Any:
        """Collect ``n_steps`` agent actions in every env with the current weights of ``policy``."""
        started = self.env.started
        cpu0 = time.thread_time()
        rollout = super().rollout(policy, n_steps, epoch=epoch, sampler=sampler)
        cpu = time.thread_time() - cpu0
        # starting the workers (pickling the policy and factories) is a one-off: not the per-update cost
        self.last_timing["learner_cpu"] = cpu if started else float("nan")
        return rollout


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
