"""Rollouts on Ray: the training envs of A2C/PPO in Ray actors (``runner=ray``), and parallel evaluation rollouts of
a trained policy over local processes or Ray.

Training: :class:`RayEnvGroup` is the group of rollout workers of :mod:`maze_lab.train.worker_rollouts` on the Ray
transport of the worker protocol (:mod:`maze_lab.distributed.transport`): once per update the driver puts the policy
weights into Ray's object store (``ray.put`` once, every actor gets the same reference); each actor then runs the
whole rollout of ``n_rollout_steps`` with policy inference on its own CPU and returns it with the statistics of the
episodes it finished. Seeds as in :mod:`maze_lab.train.worker_rollouts`: a Ray run repeats itself exactly (same seed
and workers) but does not reproduce a local run's numbers.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import cloudpickle

from maze_lab.core.log_stats.aggregation import EpochStatsAggregator
from maze_lab.core.log_stats.writers import LogStatsWriter
from maze_lab.core.utils import pickling
from maze_lab.distributed.protocol import WorkerDied, WorkerError, WorkerRaised

# RayConnectionError is raised through this module's API (runner.address): imported for its callers too
from maze_lab.distributed.ray_runtime import RayConnectionError, ensure_ray  # noqa: F401
from maze_lab.distributed.transport import ProcessTransport, RayTransport, map_jobs

# the packing and merging of the workers' rollouts are imported from here too
from maze_lab.train.worker_rollouts import (  # noqa: F401
    EnvFactory,
    WorkerEnvGroup,
    WorkerRolloutGenerator,
    concatenate_rollouts,
    merge_packed,
    pack_rollout,
    rolling_out,
    worker_group_parts,
)

E = TypeVar("E", bound=Exception)


class RayWorkerError(RuntimeError):
    """A Ray rollout worker raised (the message carries its traceback) or died (the message names it)."""


def ray_worker_error(error: type[E], failure: WorkerError, during: str, workers: str) -> E:
    """The pool's error for a Ray worker that raised, failed to start or died (the pool shut all its workers down),
    naming the worker and what it was doing, with its traceback where it sent one.

    :param failure: the transport's error (:class:`WorkerRaised`, :class:`WorkerDied`).
    :param workers: what was shut down, for the message (``Ray workers``, ``ES Ray workers``).
    """
    worker = failure.worker
    name = f"{worker.name} ({worker.detail})" if worker.detail else worker.name
    if isinstance(failure, WorkerRaised):
        if not worker.built:  # its build raised: the first answer carried the traceback
            return error(f"{name} failed to start (building it raised); all {workers} were shut down. The worker's "
                         f"traceback:\n{failure.trace}")
        return error(f"{name} (pid {worker.pid}) raised while {during}; all {workers} were shut down. The worker's "
                     f"traceback:\n{failure.trace}")
    how = failure.how if isinstance(failure, WorkerDied) else str(failure)
    return error(f"{name} (pid {worker.pid}) died while {during}: its process ended without reporting an error (killed "
                 f"from outside, out of memory, or its node went away); all {workers} were shut down. The last "
                 f"checkpoint stays as it was. Ray said: {(how or '')[:400]}")


class RayEnvGroup(WorkerEnvGroup):
    """The training envs in Ray actors (``runner=ray``): a :class:`~maze_lab.train.worker_rollouts.WorkerEnvGroup`
    on the Ray transport. ``actors`` are the workers' Ray actors.

    :param env_factories: one picklable factory per env (``n_workers * envs_per_worker``).
    :param n_workers: Ray actors; worker w holds factories ``w * envs_per_worker ... (w+1) * envs_per_worker - 1``.
    :param spaces: (observation_spaces_dict, action_spaces_dict, agent_counts_dict); None: read from an env built
        here by the first factory.
    :param num_cpus_per_worker: CPUs Ray reserves for each actor.
    :param num_gpus_per_worker: GPUs Ray reserves for each actor (the policy still runs on CPU in the worker).
    """

    worker_label = "Ray worker"
    error_type = RayWorkerError

    def __init__(self, env_factories: Sequence[EnvFactory], n_workers: int, logging_prefix: str = "train",
                 writers: list[LogStatsWriter] | None = None, spaces: tuple[dict, dict, dict] | None = None,
                 num_cpus_per_worker: float = 1, num_gpus_per_worker: float = 0):
        super().__init__(env_factories, n_workers, logging_prefix, writers, spaces)
        self.num_cpus_per_worker = num_cpus_per_worker
        self.num_gpus_per_worker = num_gpus_per_worker
        self.owns_ray = False
        """Whether :meth:`close` shuts Ray down (the run started it)."""

    @property
    def actors(self) -> list[Any]:
        """The workers' Ray actors (empty until the first rollout and after close)."""
        return [worker.actor for worker in self.workers]

    def _make_transport(self, n_weights: int) -> RayTransport:
        # a local Ray started here never grows: too few CPUs is an error there (the workers would wait forever); the
        # actors' processes are titled ray::_RolloutWorker
        return RayTransport("_RolloutWorker", self.n_workers, self.num_cpus_per_worker, self.num_gpus_per_worker,
                            self.owns_ray, "runner=ray")

    def _error(self, failure: WorkerError, during: str) -> RayWorkerError:
        return ray_worker_error(RayWorkerError, failure, during, "Ray workers")

    def close(self) -> None:
        """Stop the actors (their envs flush their event logs first) and shut down a Ray that this run started
        (``owns_ray``); a Ray that was running before is left running. Idempotent."""
        if self._closed:
            return
        super().close()
        if self.owns_ray:
            import ray

            ray.shutdown()


class RayRolloutGenerator(WorkerRolloutGenerator):
    """The generator of A2C/PPO whose envs live in Ray actors (:class:`RayEnvGroup`)."""


# ---- the run layer's entry ----------------------------------------------------------------------------------


def ray_rollout_generator(runner: Any, trainer_cls: type, env_factory: Callable[[int], EnvFactory],
                          writers: list[LogStatsWriter], spaces_env: Any = None) -> RayRolloutGenerator:
    """Start or join Ray as ``runner`` says and build the generator of ``runner.n_workers * runner.envs_per_worker``
    envs (its env's ``owns_ray`` says whether Ray was started here and is shut down on close).

    :param runner: the ``runner`` config (``n_workers``, ``envs_per_worker``, ``num_cpus_per_worker``,
        ``num_gpus_per_worker``, ``address``).
    :param trainer_cls: the trainer; it must take a ``rollout_generator`` (A2C, PPO).
    :param env_factory: env index -> a picklable factory of that training env.
    :param spaces_env: an env (e.g. the evaluation env) with the spaces of the training envs; None: build one.
    """
    factories, n_workers, spaces = worker_group_parts(runner, trainer_cls, env_factory, spaces_env, "runner=ray")
    started = ensure_ray(runner.get("address") or None, setting="runner.address")
    env = RayEnvGroup(factories, n_workers, "train", writers, spaces,
                      num_cpus_per_worker=float(runner.get("num_cpus_per_worker", 1)),
                      num_gpus_per_worker=float(runner.get("num_gpus_per_worker", 0)))
    env.owns_ray = started
    return RayRolloutGenerator(env)


# ---- parallel rollouts of a trained policy -------------------------------------------------------------------


@dataclass
class _RolloutSetup:
    """What every parallel-rollout worker is built with; its commands are ``("run", (first episode, count))``."""

    env_factory: Any
    policy: Any
    deterministic: bool
    seed: int | None
    record_trajectory: bool
    trajectory_dir: str
    record_frames: bool | None


def _build_rollout_worker(payload: bytes) -> _RolloutSetup:
    """A parallel-rollout worker's state: its setup, unpickled once (the policy travels once per worker)."""
    import torch

    torch.set_num_threads(1)
    return cloudpickle.loads(payload)


def _rollout_episodes(setup: _RolloutSetup, cmd: str, data: tuple[int, int]) -> Any:
    """A parallel-rollout worker's command: episodes ``first ... first + count - 1``, seeded as the sequential rollout
    seeds them (``seed + i``)."""
    from maze_lab.core.rollout.sequential import SequentialRolloutRunner

    if cmd != "run":
        raise ValueError(f"unknown command {cmd!r}")
    first, count = data
    runner = SequentialRolloutRunner(setup.env_factory, setup.policy, count,
                                     record_trajectory=setup.record_trajectory, trajectory_dir=setup.trajectory_dir,
                                     deterministic=setup.deterministic,
                                     seed=None if setup.seed is None else setup.seed + first,
                                     writers=[], record_frames=setup.record_frames)
    result = runner.run()
    result.stats = {}  # rebuilt from the per-episode statistics by the caller
    return result


def _parallel_rollout_error(failure: WorkerError, backend: str, during: str) -> RuntimeError:
    """The error of a parallel-rollout worker that raised or died (all of them were shut down)."""
    if backend == "ray":
        return ray_worker_error(RayWorkerError, failure, during, "rollout workers")
    from maze_lab.train.process_rollouts import rollout_worker_error

    return rollout_worker_error(failure, during)


def split_episodes(n_episodes: int, n_workers: int) -> list[tuple[int, int]]:
    """(first episode, count) of each worker: contiguous blocks, sizes differing by at most one."""
    n_workers = max(1, min(n_workers, n_episodes))
    base, extra = divmod(n_episodes, n_workers)
    out, start = [], 0
    for w in range(n_workers):
        count = base + (1 if w < extra else 0)
        out.append((start, count))
        start += count
    return out


def parallel_rollout(env_factory: Callable[[], Any], policy: Any, n_episodes: int, n_workers: int,
                     backend: str = "processes", deterministic: bool = True, seed: int | None = None,
                     record_trajectory: bool = True, trajectory_dir: str | Path = "trajectory_data",
                     record_frames: bool | None = None, address: str | None = None,
                     on_episodes: Callable[[int], None] | None = None) -> Any:
    """Roll out ``policy`` for ``n_episodes`` split into ``n_workers`` contiguous parts, run by worker processes
    (``backend="processes"``, one per part) or Ray actors (``backend="ray"``, at most one per CPU of the cluster, each
    taking the next part as it is done); returns the RolloutResult of a SequentialRolloutRunner over all episodes.
    The workers speak the worker protocol (:mod:`maze_lab.distributed.transport`): each gets the policy once; one
    that raises or dies stops them all and is raised naming it (``ProcessWorkerError`` or ``RayWorkerError``).

    Episode ``i`` is reset with ``seed + i`` as in the sequential rollout, so with ``deterministic=True`` the
    per-episode rewards and statistics (in episode order) equal the sequential rollout's on the same seed. Sampled
    actions (``deterministic=False``) come from each worker's own random stream (seeded with ``seed`` + its first
    episode), so they differ from the sequential rollout's.

    :param address: for ``backend="ray"``: the cluster to join (None: a local Ray, or the one already initialized).
    :param on_episodes: called with the number of episodes a worker ran as its part comes back (a progress bar).
    """
    from maze_lab.core.rollout.sequential import RolloutResult

    if backend not in ("processes", "ray"):
        raise ValueError(f"backend must be 'processes' or 'ray', got {backend!r}")
    if not isinstance(n_workers, int) or n_workers < 1:
        raise ValueError(f"n_workers must be a positive int, got {n_workers!r}")
    if not isinstance(n_episodes, int) or n_episodes < 1:
        raise ValueError(f"n_episodes must be a positive int, got {n_episodes!r}")
    t0 = time.perf_counter()
    policy_copy = copy.deepcopy(policy)
    if hasattr(policy_copy, "to"):
        policy_copy.to("cpu")
    parts = split_episodes(n_episodes, n_workers)
    payload = pickling.dumps(_RolloutSetup(env_factory, policy_copy, deterministic, seed, record_trajectory,
                                           str(trajectory_dir), record_frames))
    started = False
    if backend == "ray":
        import ray

        started = ensure_ray(address, setting="--address")
        # a part waits for a free worker: never more workers than the cluster has CPUs for (a local Ray never grows)
        n_started = max(1, min(len(parts), int(ray.cluster_resources().get("CPU", 1))))
        transport: Any = RayTransport("_ParallelRolloutWorker", n_started, 1, 0, False, "parallel rollout")
    else:
        n_started = len(parts)
        transport = ProcessTransport(what="parallel rollout worker processes",
                                     process_name="maze-lab-parallel-rollout")
    workers: list[Any] = []
    during = "starting"
    try:
        for w in range(n_started):
            workers.append(transport.start(f"rollout worker {w}", partial(_build_rollout_worker, payload),
                                           _rollout_episodes))
        transport.gather(workers)  # built
        during = "rolling out"
        answers = map_jobs(transport, workers, "run", parts,
                           on_answer=None if on_episodes is None
                           else lambda _, part: on_episodes(len(part.episode_rewards)))
    except (WorkerDied, WorkerRaised) as failure:
        raise _parallel_rollout_error(failure, transport.name, during) from None  # the workers end below
    finally:
        transport.shutdown(workers)
        if started:
            import ray

            ray.shutdown()
    result = RolloutResult(stats={})
    aggregator = EpochStatsAggregator()
    for part in answers:
        result.episode_rewards += part.episode_rewards
        result.episode_lengths += part.episode_lengths
        result.episode_stats += part.episode_stats
        result.trajectory_paths += part.trajectory_paths
        for episode in part.episode_stats:
            aggregator.add_episode(episode)
    result.stats = aggregator.reduce()
    result.seconds = time.perf_counter() - t0
    return result


def rollout_loaded_run(run: Any, n_episodes: int, n_workers: int, backend: str = "processes", which: str = "best",
                       deterministic: bool = True, seed: int | None = None, record_trajectory: bool = True,
                       record_frames: bool | None = None, address: str | None = None,
                       on_episodes: Callable[[int], None] | None = None) -> Any:
    """``LoadedRun.rollout`` over ``n_workers`` processes or Ray workers (``maze-lab rollout RUN --workers N``):
    the run's ``which`` policy on its env, episodes recorded into the run's ``trajectories/`` (refused before anything
    is built where it leads out of the run)."""
    if record_trajectory:
        run.checked_trajectory_dir()
    result = parallel_rollout(run.env_factory().build_env, run.policy(which), n_episodes, n_workers, backend=backend,
                              deterministic=deterministic, seed=seed, record_trajectory=record_trajectory,
                              trajectory_dir=run.directory.trajectory_dir, record_frames=record_frames,
                              address=address, on_episodes=on_episodes)
    run.directory.write_summary(last_rollout={"episodes": n_episodes, "policy": which, "deterministic": deterministic,
                                              "mean_reward": result.mean_reward, "workers": n_workers,
                                              "backend": backend})
    return result
