"""Rollouts on Ray: the training envs of A2C/PPO in Ray actors (``runner=ray``), and parallel evaluation rollouts of
a trained policy over local processes or Ray.

Training: each of ``n_workers`` actors holds ``envs_per_worker`` envs (built from the run's cloudpickled env
factories, monitoring and LogStatsWrapper included) and a copy of the policy. Once per update the driver puts the
policy weights into Ray's object store (``ray.put`` once, every actor gets the same reference); each actor then runs
the whole rollout of ``n_rollout_steps`` with policy inference on its own CPU and returns it with the statistics of
the episodes it finished. The actors carry the worker protocol of :mod:`maze_lab.distributed.ray_workers` and run the
worker of ``runner=processes`` (:class:`~maze_lab.train.process_rollouts.RolloutWorker`). :class:`RayRolloutGenerator`
concatenates the actors' rollouts along the env axis into the :class:`~maze_lab.train.trainers.common.rollout.Rollout`
the local RolloutGenerator returns, so the trainers' updates are unchanged.

Seeds: env ``e`` of worker ``w`` is reset with ``seed + w * envs_per_worker + e`` (what env ``i`` of a local vector
env gets); worker ``w`` samples actions from torch seeded with ``seed + w``. The start states equal a local run's;
the sampled actions come from other random streams than the driver's, so a Ray run repeats itself exactly (same seed
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
import numpy as np

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.log_stats.aggregation import EpochStatsAggregator, LogStats
from maze_lab.core.log_stats.writers import LogStatsWriter
from maze_lab.core.utils import pickling
from maze_lab.distributed.protocol import WorkerDied, WorkerError, WorkerRaised, died_message

# RayConnectionError is raised through this module's API (runner.address): imported for its callers too
from maze_lab.distributed.ray_runtime import RayConnectionError, ensure_ray  # noqa: F401
from maze_lab.distributed.ray_workers import RayWorker, gather, remote_worker_class, shutdown_ray_workers
from maze_lab.distributed.transport import ProcessTransport, RayTransport, map_jobs
from maze_lab.train.vector_env import MIXED_POLICY_KEYS_ADVICE, EpochEpisodeStats, MixedPolicyKeysError

EnvFactory = Callable[[], Any]
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


def rolling_out(epoch: int | None) -> str:
    """What a worker does during a rollout, for messages."""
    return f"rolling out epoch {epoch}" if epoch is not None else "rolling out"


# ---- the driver side ----------------------------------------------------------------------------------------


class RayEnvGroup(EpochEpisodeStats):
    """Stands where the training vector env would (``trainer.env``): the spaces, ``n_envs``, the ``train``
    statistics of the episodes the Ray workers finished, ``call`` on all envs, and ``close`` of the actors.

    ``workers`` holds the workers (:class:`~maze_lab.distributed.ray_workers.RayWorker`; empty until the first
    rollout and after close), ``actors`` their Ray actors, ``pids`` their process ids. Each worker runs the
    :class:`~maze_lab.train.process_rollouts.RolloutWorker` of ``runner=processes``.

    :param env_factories: one picklable factory per env (``n_workers * envs_per_worker``).
    :param n_workers: Ray actors; worker w holds factories ``w * envs_per_worker ... (w+1) * envs_per_worker - 1``.
    :param spaces: (observation_spaces_dict, action_spaces_dict, agent_counts_dict); None: read from an env built
        here by the first factory.
    :param num_cpus_per_worker: CPUs Ray reserves for each actor.
    :param num_gpus_per_worker: GPUs Ray reserves for each actor (the policy still runs on CPU in the worker).
    """

    worker_label = "Ray worker"
    """How errors and messages name one worker."""

    def __init__(self, env_factories: Sequence[EnvFactory], n_workers: int, logging_prefix: str = "train",
                 writers: list[LogStatsWriter] | None = None, spaces: tuple[dict, dict, dict] | None = None,
                 num_cpus_per_worker: float = 1, num_gpus_per_worker: float = 0):
        if n_workers < 1 or len(env_factories) % n_workers:
            raise ValueError(f"{len(env_factories)} env factories cannot be split evenly over {n_workers} "
                             f"{self.worker_label}s; give n_workers * envs_per_worker factories")
        self.factories = list(env_factories)
        self.n_workers = n_workers
        self.envs_per_worker = len(self.factories) // n_workers
        self.n_envs = len(self.factories)
        super().__init__(logging_prefix, writers)
        self.num_cpus_per_worker = num_cpus_per_worker
        self.num_gpus_per_worker = num_gpus_per_worker
        if spaces is None:
            env = self.factories[0]()
            spaces = (env.observation_spaces_dict, env.action_spaces_dict, env.agent_counts_dict)
            env.close()
        self.observation_spaces_dict, self.action_spaces_dict, self.agent_counts_dict = spaces
        self.workers: list[Any] = []
        self.pids: list[int | None] = []
        self._pending_calls: list[tuple[str, tuple, dict]] = []
        self._closed = False
        self._broken = False
        self._failure: RuntimeError | None = None
        self.owns_ray = False
        """Whether :meth:`close` shuts Ray down (the run started it)."""

    def __len__(self) -> int:
        return self.n_envs

    # ---- actors ----------------------------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        """Whether the actors exist."""
        return bool(self.workers)

    @property
    def actors(self) -> list[Any]:
        """The workers' Ray actors (empty until the first rollout and after close)."""
        return [worker.actor for worker in self.workers]

    @property
    def failure(self) -> RuntimeError | None:
        """The error of the worker that shut all workers down (None while all is well)."""
        return self._failure

    def _raise_failure(self) -> None:
        """After a worker failure, any use of the workers names that failure again (not a later, unrelated error)."""
        if self._failure is not None:
            raise type(self._failure)(f"the {self.worker_label}s were shut down after a failure: "
                                      f"{self._failure}") from self._failure

    def start(self, policy: Any, seed: int | None) -> None:
        """Create the actors with a CPU copy of ``policy`` (its weights are sent again before every rollout) and wait
        until each has built its envs."""
        from maze_lab.train.process_rollouts import RolloutWorker, rollout_command

        self._raise_failure()
        if self._closed or self._broken:
            raise RuntimeError("this RayEnvGroup is closed (after close() or a worker failure)")
        # a local Ray started here never grows: too few CPUs is an error there (the workers would wait forever); the
        # actors' processes are titled ray::_RolloutWorker
        actor_class = remote_worker_class("_RolloutWorker", self.n_workers, self.num_cpus_per_worker,
                                          self.num_gpus_per_worker, self.owns_ray, "runner=ray")
        policy_copy = copy.deepcopy(policy)
        policy_copy.to("cpu")
        policy_payload = pickling.dumps(policy_copy)
        k = self.envs_per_worker
        try:
            for w in range(self.n_workers):
                payload = pickling.dumps(self.factories[w * k:(w + 1) * k])
                build = partial(RolloutWorker, w, payload, policy_payload, None if seed is None else seed + w)
                self.workers.append(RayWorker.start(actor_class, f"Ray worker {w}", build,
                                                   partial(rollout_command, None), close=RolloutWorker.close))
            self._exchange(None, "starting")  # each worker answers once its envs are built
            self.pids = [worker.pid for worker in self.workers]
            self._replay_pending_calls()
        except RayWorkerError:
            raise  # the workers are shut down already
        except BaseException:
            self._fail()
            raise

    def _replay_pending_calls(self) -> None:
        """Make the ``set_*`` calls kept while the workers did not exist yet."""
        pending, self._pending_calls = self._pending_calls, []
        for name, args, kwargs in pending:
            self.call(name, *args, **kwargs)

    def _exchange(self, messages: list[tuple[str, Any]] | None, during: str) -> list[Any]:
        """Send one message per worker (None: send nothing) and receive one answer from each, in worker order. A
        worker that raised or died stops all workers and is raised as RayWorkerError naming it."""
        if not self.workers:
            raise RuntimeError(f"the {self.worker_label}s are not running (closed, or shut down after a failure)")
        try:
            return gather(self.workers, messages)
        except WorkerError as failure:
            self._fail()
            self._failure = ray_worker_error(RayWorkerError, failure, during, "Ray workers")
            raise self._failure from None

    def _fail(self) -> None:
        self._broken = True
        self._stop_actors()

    def reset_workers(self, seed: int | None) -> None:
        """Reset every worker's envs: env e of worker w with ``seed + w * envs_per_worker + e``."""
        k = self.envs_per_worker
        self._exchange([("reset", None if seed is None else seed + w * k) for w in range(self.n_workers)],
                       "resetting its envs")

    def call(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call a method on every env (in env order); before the actors exist a ``set_*`` call is kept and made
        when they start (e.g. normalization statistics of a checkpoint)."""
        if not self.workers:
            self._raise_failure()
            if name.startswith("set_") and not self._broken:
                self._pending_calls.append((name, args, kwargs))
                return [None] * self.n_envs
            raise RuntimeError(f"the {self.worker_label}s are not started yet; '{name}' is available after the first "
                               f"rollout")
        replies = self._exchange([("call", (name, args, kwargs))] * self.n_workers, f"calling {name!r}")
        errors = [data for status, data in replies if status == "error"]
        if errors:
            from maze_lab.train.vector_env import VectorEnvCallError

            raise VectorEnvCallError(f"calling '{name}' on the envs failed in a {self.worker_label}:\n{errors[0]}")
        return [r for _, per_worker in replies for r in per_worker]

    def rollout_workers(self, policy: Any, n_steps: int, epoch: int | None,
                        sampler: Any) -> list[tuple[Any, list[LogStats], float]]:
        """Every worker's rollout with the current weights of ``policy`` (in worker order)."""
        import ray

        from maze_lab.train.trainers.impala.actors import flat_weights

        weights = ray.put(flat_weights(policy))  # once per update; every actor reads this object
        for worker in self.workers:
            worker.send(("weights", weights))  # not answered: a failure shows in the rollout's answer
        return self._exchange([("rollout", (n_steps, epoch, sampler))] * self.n_workers, rolling_out(epoch))

    def _stop_actors(self) -> None:
        """Stop the actors: those that still answer flush their envs' event logs and close them first."""
        workers, self.workers = self.workers, []
        shutdown_ray_workers(workers)

    def close(self) -> None:
        """Stop the actors (their envs flush their event logs first) and shut down a Ray that this run started
        (``owns_ray``); a Ray that was running before is left running. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop_actors()
        if self.owns_ray:
            import ray

            ray.shutdown()


class RayRolloutGenerator:
    """A RolloutGenerator whose envs live in Ray actors: ``rollout(policy, n_steps)`` is one Ray call per worker,
    and the result is the :class:`Rollout` the local generator returns (workers concatenated along the env axis).

    :param env: the RayEnvGroup of the workers.
    """

    def __init__(self, env: RayEnvGroup):
        self.env = env
        self._obs: Any = None  # not None once reset: ActorCriticTrainer resets where it is None
        self._seed: int | None = None
        self._pending_reset = False
        self.first_key: StepKey | None = None
        self.env_steps = 0
        self.last_timing: dict[str, float] = {}
        """Seconds of the last rollout: ``total`` (the driver's wait), ``workers`` (the slowest worker's own rollout
        time) and ``overhead`` (total - workers: Ray calls, weights, transfer and concatenation)."""

    def reset(self, seed: int | None = None) -> None:
        """Reset the envs at the next rollout (the actors are created there, with the policy)."""
        self._seed = seed
        self._pending_reset = True
        self._obs = True

    def rollout(self, policy: Any, n_steps: int, epoch: int | None = None, sampler: Any = None) -> Any:
        """Collect ``n_steps`` agent actions in every env with the current weights of ``policy``."""
        t0 = time.perf_counter()
        env = self.env
        if not env.started:
            env.start(policy, self._seed)
            self._pending_reset = True
        if self._pending_reset:
            env.reset_workers(self._seed)
            self._pending_reset = False
        results = env.rollout_workers(policy, n_steps, epoch, sampler)
        for _, episodes, _ in results:
            env.add(episodes)
        rollout = merge_packed([r[0] for r in results])
        self.first_key = rollout.first_key
        self._obs = rollout.next_obs
        self.env_steps += n_steps * env.n_envs
        total = time.perf_counter() - t0
        slowest = max(r[2] for r in results)
        self.last_timing = {"total": total, "workers": slowest, "overhead": total - slowest}
        return rollout


def pack_rollout(rollout: Any) -> dict[str, Any]:
    """A Rollout as a few stacked arrays (what a worker sends): pickling one array per field and policy key is
    several times cheaper than pickling a record object with small arrays per sub-step."""
    records = rollout.records
    n = rollout.n_envs
    keys = [r.key for r in records]
    groups: dict[StepKey, list[int]] = {}
    for s, key in enumerate(keys):
        groups.setdefault(key, []).append(s)

    def stacked(field: str) -> dict[StepKey, dict[str, np.ndarray]]:
        return {key: {name: np.stack([getattr(records[s], field)[name] for s in idx])
                      for name in getattr(records[idx[0]], field)} for key, idx in groups.items()}

    def per_step(field: str, dtype: Any) -> np.ndarray:
        if not records:
            return np.zeros((0, n), dtype)
        return np.stack([getattr(r, field) for r in records])

    return {"keys": keys, "obs": stacked("obs"), "actions": stacked("actions"),
            "log_prob": per_step("log_prob", np.float32), "reward": per_step("reward", np.float64),
            "terminated": per_step("terminated", bool), "truncated": per_step("truncated", bool),
            "bootstrap": [r.bootstrap for r in records],
            "agent_ids": None if not records or any(r.agent_ids is None for r in records)
            else per_step("agent_ids", np.int64),
            "step_end": None if not records or any(r.step_end is None for r in records)
            else per_step("step_end", bool),
            "next_obs": rollout.next_obs, "next_key": rollout.next_key,
            "first_key": rollout.first_key, "n_envs": n}


def merge_packed(packs: list[dict[str, Any]]) -> Any:
    """One Rollout of the workers' packed rollouts, the env axis in worker order (bootstrap env indices shifted).

    Always copies, also for a single worker: arrays that come out of Ray's object store are read-only."""
    from maze_lab.train.trainers.common.rollout import Rollout, SubStepRecord

    first = packs[0]
    keys = first["keys"]
    for w, pack in enumerate(packs[1:], start=1):
        if pack["keys"] != keys or pack["next_key"] != first["next_key"] or pack["first_key"] != first["first_key"]:
            raise MixedPolicyKeysError(
                f"rollout worker {w} acted with other policy keys than worker 0 ({pack['keys'][:6]}... vs "
                f"{keys[:6]}...); all envs of a run must step their policy keys in the same order. "
                f"{MIXED_POLICY_KEYS_ADVICE}")
    offsets = np.cumsum([0] + [p["n_envs"] for p in packs[:-1]])

    def merged(field: str) -> dict[StepKey, dict[str, np.ndarray]]:
        return {key: {name: np.concatenate([p[field][key][name] for p in packs], axis=1) for name in arrays}
                for key, arrays in first[field].items()}

    obs, actions = merged("obs"), merged("actions")
    steps = {name: np.concatenate([p[name] for p in packs], axis=1)
             for name in ("log_prob", "reward", "terminated", "truncated")}
    agent_ids = None if any(p.get("agent_ids") is None for p in packs) else \
        np.concatenate([p["agent_ids"] for p in packs], axis=1)
    step_end = None if any(p.get("step_end") is None for p in packs) else \
        np.concatenate([p["step_end"] for p in packs], axis=1)
    position: dict[StepKey, int] = {}
    records = []
    for s, key in enumerate(keys):
        j = position[key] = position.get(key, -1) + 1  # the s-th sub-step is the j-th of its policy key
        records.append(SubStepRecord(
            key=key, obs={name: arr[j] for name, arr in obs[key].items()},
            actions={name: arr[j] for name, arr in actions[key].items()},
            log_prob=steps["log_prob"][s], reward=steps["reward"][s], terminated=steps["terminated"][s],
            truncated=steps["truncated"][s],
            bootstrap=[(int(off) + i, o) for p, off in zip(packs, offsets, strict=True) for i, o in p["bootstrap"][s]],
            agent_ids=None if agent_ids is None else agent_ids[s], step_end=None if step_end is None else step_end[s]))
    next_obs = {name: np.concatenate([p["next_obs"][name] for p in packs]) for name in first["next_obs"]}
    return Rollout(records, next_obs, first["next_key"], first["first_key"], sum(p["n_envs"] for p in packs))


def concatenate_rollouts(rollouts: list[Any]) -> Any:
    """One Rollout of several (e.g. the workers'), the env axis in the given order."""
    return merge_packed([pack_rollout(r) for r in rollouts])


# ---- the run layer's entry ----------------------------------------------------------------------------------


def worker_group_parts(runner: Any, trainer_cls: type, env_factory: Callable[[int], EnvFactory], spaces_env: Any,
                       what: str) -> tuple[list[EnvFactory], int, tuple[dict, dict, dict] | None]:
    """(the ``n_workers * envs_per_worker`` env factories, ``n_workers``, the spaces of ``spaces_env`` or None) of a
    group of rollout workers (runner=ray, runner=processes); A2C and PPO only.

    :param what: the runner, for the message refusing other trainers.
    """
    from maze_lab.core.utils.factory import ConfigurationError
    from maze_lab.train.trainers.common.actor_critic import ActorCriticTrainer

    if not issubclass(trainer_cls, ActorCriticTrainer):
        raise ConfigurationError(f"{what} rolls out A2C and PPO; {trainer_cls.__name__} runs its envs its own way: "
                                 f"use runner=dev or runner=local with it")
    n_workers, per_worker = int(runner.n_workers), int(runner.envs_per_worker)
    spaces = None if spaces_env is None else (spaces_env.observation_spaces_dict, spaces_env.action_spaces_dict,
                                              spaces_env.agent_counts_dict)
    return [env_factory(i) for i in range(n_workers * per_worker)], n_workers, spaces


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


def _parallel_rollout_error(failure: WorkerError, backend: str) -> RuntimeError:
    """The error of a parallel-rollout worker that raised or died (all of them were shut down)."""
    if backend == "ray":
        return ray_worker_error(RayWorkerError, failure, "rolling out", "rollout workers")
    from maze_lab.train.process_rollouts import ProcessWorkerError

    name = failure.worker.describe()
    if isinstance(failure, WorkerRaised):
        return ProcessWorkerError(f"{name} raised while rolling out (or building its env or policy); all rollout "
                                  f"workers were shut down. The worker's traceback:\n{failure.trace}")
    how = failure.how if isinstance(failure, WorkerDied) else None
    return ProcessWorkerError(died_message(name, how or "its pipe closed", "all rollout workers were shut down",
                                           "rolling out"))


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
    try:
        for w in range(n_started):
            workers.append(transport.start(f"rollout worker {w}", partial(_build_rollout_worker, payload),
                                           _rollout_episodes))
        transport.gather(workers)  # built
        answers = map_jobs(transport, workers, "run", parts,
                           on_answer=None if on_episodes is None
                           else lambda _, part: on_episodes(len(part.episode_rewards)))
    except WorkerError as failure:
        transport.shutdown(workers)
        workers = []
        raise _parallel_rollout_error(failure, transport.name) from None
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
    """``LoadedRun.rollout`` over ``n_workers`` processes or Ray tasks (``maze-lab rollout RUN --workers N``):
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
