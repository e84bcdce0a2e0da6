"""A2C/PPO rollouts in a group of workers, whatever carries them: the worker of ``runner=processes`` and
``runner=ray`` (:class:`RolloutWorker`, :func:`rollout_command`), the group that stands where the training vector env
would (:class:`WorkerEnvGroup`), the generator the trainers call (:class:`WorkerRolloutGenerator`), and the packing
and merging of the workers' rollouts.

Each of ``n_workers`` workers holds ``envs_per_worker`` envs (built from the run's cloudpickled env factories,
monitoring and LogStatsWrapper included) and a CPU copy of the policy, and rolls out a whole update by itself; the
learner sends the weights once per update (:meth:`~maze_lab.distributed.transport.Transport.broadcast`: one
shared-memory array for local processes, one object in Ray's object store), waits (without the interpreter lock) and
merges the workers' packed rollouts along the env axis into the
:class:`~maze_lab.train.trainers.common.rollout.Rollout` the local RolloutGenerator returns, so the trainers'
updates are unchanged.

Seeds: env ``e`` of worker ``w`` is reset with ``seed + w * envs_per_worker + e`` (what env ``i`` of a local vector
env gets); worker ``w`` samples actions from torch seeded with ``seed + w``. The same seed and number of workers
repeat a run exactly; the sampled actions come from other random streams than the driver's, so the numbers differ
from a local run's.
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import cloudpickle
import numpy as np

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.log_stats.aggregation import LogStats
from maze_lab.core.log_stats.writers import LogStatsWriter
from maze_lab.core.utils import pickling
from maze_lab.distributed.protocol import NO_REPLY, WorkerDied, WorkerError, WorkerRaised
from maze_lab.distributed.weights import flat_weights, load_flat_weights, policy_tensors
from maze_lab.train.vector_env import (
    MIXED_POLICY_KEYS_ADVICE,
    EpochEpisodeStats,
    MixedPolicyKeysError,
    VectorEnvCallError,
)

EnvFactory = Callable[[], Any]


# ---- the worker: the same on both transports ------------------------------------------------------------------


class RolloutWorker:
    """What a rollout worker holds: a local vector env of its envs, a RolloutGenerator over it, a CPU copy of the
    policy, that policy's tensors (the published weights are copied into them) and the version of their weights."""

    def __init__(self, index: int, factories_payload: bytes, policy_payload: bytes, torch_seed: int | None):
        import torch

        from maze_lab.train.trainers.common.rollout import RolloutGenerator
        from maze_lab.train.vector_env import SequentialVectorEnv

        torch.set_num_threads(1)  # one core per worker: more threads only contend with the other workers
        if torch_seed is not None:
            torch.manual_seed(torch_seed)
        self.index = index
        self.venv = SequentialVectorEnv(cloudpickle.loads(factories_payload))
        try:
            self.generator = RolloutGenerator(self.venv)
            self.policy = cloudpickle.loads(policy_payload)
            self.tensors = policy_tensors(self.policy)
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


def rollout_command(worker: RolloutWorker, cmd: str, data: Any) -> Any:
    """A rollout worker's answer to one command of the driver: ``weights`` (a flat vector, not answered),
    ``rollout`` of ``(n_steps, epoch, sampler)``, ``reset`` with a seed, ``call`` of an env method on every env."""
    if cmd == "rollout":
        n_steps, epoch, sampler = data
        return worker.rollout(n_steps, epoch, sampler)
    if cmd == "weights":
        load_flat_weights(worker.tensors, data)
        return NO_REPLY
    if cmd == "reset":
        return worker.generator.reset(data)  # env e with seed + e
    if cmd == "call":
        return worker.call(*data)
    raise ValueError(f"unknown command {cmd!r}")


# ---- the driver side ------------------------------------------------------------------------------------------


class WorkerEnvGroup(EpochEpisodeStats):
    """Stands where the training vector env would (``trainer.env``), its envs in a group of rollout workers on a
    transport of the worker protocol: the spaces, ``n_envs``, the ``train`` statistics of the episodes the workers
    finished, ``call`` on all envs, ``close``. :class:`~maze_lab.train.process_rollouts.ProcessEnvGroup` (local
    processes) and :class:`~maze_lab.train.ray_rollouts.RayEnvGroup` (Ray actors) say which transport, how a
    failure is worded, and what an interrupt leaves.

    ``workers`` holds the driver's handles of the workers (empty until the first rollout and after close), ``actors``
    the same (Ray: the actors), ``pids`` their process ids.

    :param env_factories: one picklable factory per env (``n_workers * envs_per_worker``).
    :param n_workers: workers; worker w holds factories ``w * envs_per_worker ... (w+1) * envs_per_worker - 1``.
    :param spaces: (observation_spaces_dict, action_spaces_dict, agent_counts_dict); None: read from an env built
        here by the first factory.
    """

    worker_label = "rollout worker"
    """How errors and messages name one worker."""

    error_type: type[Exception] = RuntimeError
    """The error of a worker that raised or died."""

    def __init__(self, env_factories: Sequence[EnvFactory], n_workers: int, logging_prefix: str = "train",
                 writers: list[LogStatsWriter] | None = None, spaces: tuple[dict, dict, dict] | None = None):
        if n_workers < 1 or len(env_factories) % n_workers:
            raise ValueError(f"{len(env_factories)} env factories cannot be split evenly over {n_workers} "
                             f"{self.worker_label}s; give n_workers * envs_per_worker factories")
        self.factories = list(env_factories)
        self.n_workers = n_workers
        self.envs_per_worker = len(self.factories) // n_workers
        self.n_envs = len(self.factories)
        super().__init__(logging_prefix, writers)
        if spaces is None:
            env = self.factories[0]()
            spaces = (env.observation_spaces_dict, env.action_spaces_dict, env.agent_counts_dict)
            env.close()
        self.observation_spaces_dict, self.action_spaces_dict, self.agent_counts_dict = spaces
        self.transport: Any = None
        self.workers: list[Any] = []
        self.pids: list[int | None] = []
        self._pending_calls: list[tuple[str, tuple, dict]] = []
        self._closed = False
        self._broken = False
        self._failure: Exception | None = None

    def __len__(self) -> int:
        return self.n_envs

    # ---- what the transports decide ------------------------------------------------------------------------
    def _make_transport(self, n_weights: int) -> Any:
        """The transport of the workers (``n_weights``: the float values of the policy's weights)."""
        raise NotImplementedError

    def _error(self, failure: WorkerError, during: str) -> Exception:
        """The group's error for a worker that raised or died ``during`` something (all workers were stopped)."""
        raise NotImplementedError

    def _interrupted(self) -> None:
        """After an interrupt in the middle of an exchange (the answers not received are dropped)."""

    # ---- workers ---------------------------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        """Whether the workers exist."""
        return bool(self.workers)

    @property
    def actors(self) -> list[Any]:
        """The workers (empty until the first rollout and after close)."""
        return list(self.workers)

    @property
    def failure(self) -> Exception | None:
        """The error of the worker that shut all workers down (None while all is well)."""
        return self._failure

    def _raise_failure(self) -> None:
        """After a worker failure, any use of the workers names that failure again (not a later, unrelated error)."""
        if self._failure is not None:
            raise type(self._failure)(f"the {self.worker_label}s were shut down after a failure: "
                                      f"{self._failure}") from self._failure

    def start(self, policy: Any, seed: int | None) -> None:
        """Start the workers with a CPU copy of ``policy`` (its weights are sent again before every rollout) and wait
        until each has built its envs."""
        self._raise_failure()
        if self._closed or self._broken:
            raise RuntimeError(f"this {type(self).__name__} is closed (after close() or a worker failure)")
        policy_copy = copy.deepcopy(policy)
        policy_copy.to("cpu")
        policy_payload = pickling.dumps(policy_copy)
        self.transport = self._make_transport(sum(t.numel() for t in policy_tensors(policy_copy)))
        k = self.envs_per_worker
        try:
            for w in range(self.n_workers):
                payload = pickling.dumps(self.factories[w * k:(w + 1) * k])
                build = partial(RolloutWorker, w, payload, policy_payload, None if seed is None else seed + w)
                self.workers.append(self.transport.start(f"{self.worker_label} {w}", build, rollout_command,
                                                         close=RolloutWorker.close, ready=_pid))
            self._workers_started()
            self._exchange(None, "starting")  # each worker answers once its envs are built
            self.pids = [worker.pid for worker in self.workers]
            self._replay_pending_calls()
        except self.error_type:
            raise  # the workers are shut down already
        except BaseException:
            self._start_failed()  # e.g. an unpicklable factory, or an interrupt: no worker is left running
            raise

    def _start_failed(self) -> None:
        """After an error or an interrupt while the workers started: stop them, and refuse to start again."""
        self._fail()

    def _workers_started(self) -> None:
        """Hook: the workers were started (their first answers are still to come)."""

    def _replay_pending_calls(self) -> None:
        """Make the ``set_*`` calls kept while the workers did not exist yet."""
        pending, self._pending_calls = self._pending_calls, []
        for name, args, kwargs in pending:
            self.call(name, *args, **kwargs)

    def _exchange(self, messages: list[tuple[str, Any]] | None, during: str) -> list[Any]:
        """Send one message per worker (None: send nothing) and receive one answer from each, in worker order (the
        wait releases the interpreter lock). A worker that raised or died stops all workers and is raised as the
        group's error naming it."""
        self._require_workers()
        return self._guarded(lambda: self.transport.gather(self.workers, messages), during)

    def _require_workers(self) -> None:
        if not self.workers:
            raise RuntimeError(f"the {self.worker_label}s are not running (closed, or shut down after a failure)")

    def _guarded(self, talk: Callable[[], Any], during: str) -> Any:
        """``talk()`` to the workers: a worker that raised or died (a message to a dead local worker fails at once)
        stops all workers and is raised as the group's error naming it; an interrupt goes to :meth:`_interrupted`."""
        try:
            return talk()
        except (WorkerDied, WorkerRaised) as failure:
            self._fail()
            self._failure = self._error(failure, during)
            raise self._failure from None
        except BaseException:
            self._interrupted()
            raise

    def _fail(self) -> None:
        self._broken = True
        self._stop_actors()

    def reset_workers(self, seed: int | None) -> None:
        """Reset every worker's envs: env e of worker w with ``seed + w * envs_per_worker + e``."""
        k = self.envs_per_worker
        self._exchange([("reset", None if seed is None else seed + w * k) for w in range(self.n_workers)],
                       "resetting its envs")

    def call(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call a method on every env (in env order); before the workers exist a ``set_*`` call is kept and made
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
            raise VectorEnvCallError(f"calling '{name}' on the envs failed in a {self.worker_label}:\n{errors[0]}")
        return [r for _, per_worker in replies for r in per_worker]

    def rollout_workers(self, policy: Any, n_steps: int, epoch: int | None,
                        sampler: Any) -> list[tuple[Any, list[LogStats], float]]:
        """Every worker's rollout with the current weights of ``policy`` (in worker order): the weights go to the
        workers once per update (stored once for all of them), then one rollout command each."""
        self._require_workers()
        during = rolling_out(epoch)
        weights = flat_weights(policy)
        self._guarded(lambda: self.transport.broadcast(self.workers, "weights", weights), during)
        return self._exchange([("rollout", (n_steps, epoch, sampler))] * self.n_workers, during)

    def _stop_actors(self) -> None:
        """Stop the workers: those that still answer flush their envs' event logs and close them first."""
        workers, self.workers = self.workers, []
        if workers:
            self.transport.shutdown(workers)

    def close(self) -> None:
        """Stop the workers (their envs flush their event logs first). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop_actors()


def _pid(_: Any) -> int:
    """A worker's first answer: its process id."""
    return os.getpid()


def rolling_out(epoch: int | None) -> str:
    """What a worker does during a rollout, for messages."""
    return f"rolling out epoch {epoch}" if epoch is not None else "rolling out"


class WorkerRolloutGenerator:
    """A RolloutGenerator whose envs live in a group of workers: ``rollout(policy, n_steps)`` is one command per
    worker, and the result is the :class:`Rollout` the local generator returns (workers concatenated along the env
    axis).

    ``last_timing`` has the seconds of the last rollout: ``total`` (the driver's wait), ``workers`` (the slowest
    worker's own rollout time), ``overhead`` (total - workers: messages, weights, transfer and concatenation) and
    ``learner_cpu``: the CPU time of the calling (learner) thread during the rollout, the time it held the
    interpreter (publishing the weights, pickling the commands, unpickling and merging the rollouts); the wait for the
    workers is not in it (NaN for the rollout that started the workers: a one-off).

    :param env: the group of the workers.
    """

    def __init__(self, env: WorkerEnvGroup):
        self.env = env
        self._obs: Any = None  # not None once reset: ActorCriticTrainer resets where it is None
        self._seed: int | None = None
        self._pending_reset = False
        self.first_key: StepKey | None = None
        self.env_steps = 0
        self.last_timing: dict[str, float] = {}

    def reset(self, seed: int | None = None) -> None:
        """Reset the envs at the next rollout (the actors are created there, with the policy)."""
        self._seed = seed
        self._pending_reset = True
        self._obs = True

    def rollout(self, policy: Any, n_steps: int, epoch: int | None = None, sampler: Any = None) -> Any:
        """Collect ``n_steps`` agent actions in every env with the current weights of ``policy``."""
        t0 = time.perf_counter()
        cpu0 = time.thread_time()
        env = self.env
        started = env.started
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
        self.last_timing = {"total": total, "workers": slowest, "overhead": total - slowest,
                            "learner_cpu": time.thread_time() - cpu0 if started else float("nan")}
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
