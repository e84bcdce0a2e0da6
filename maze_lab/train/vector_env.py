"""Vector envs: several env instances stepped together, in process (sequential) or one process each.

All envs of a vector env must act with the same policy key at the same time (flat envs and structured envs
with a fixed sub-step order do). Finished envs reset themselves; the last observation of a truncated
episode is handed over in ``info["terminal_observation"]`` so that trainers can bootstrap from it.
"""

from __future__ import annotations

import multiprocessing as mp
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import numpy as np

from maze_lab.core.env.structured_env import ActorID, StepKey
from maze_lab.core.log_stats.aggregation import EpochStatsAggregator, LogStats, stats_value
from maze_lab.core.log_stats.log_setup import default_writers
from maze_lab.core.log_stats.writers import LogStatsWriter
from maze_lab.core.utils import pickling
from maze_lab.core.utils.main_guard import check_main_guard
from maze_lab.core.utils.yielding import give_way
from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.distributed.processes import (
    WorkerDied,
    WorkerError,
    WorkerProcess,
    WorkerRaised,
    died_message,
    serve,
    shutdown_workers,
)

EnvFactory = Callable[[], Any]

_CLOSE_TIMEOUT = 4.0
"""Seconds the worker processes get to close their envs and exit before they are terminated."""


def stack_observations(observations: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Stack a list of dict observations into one dict of arrays with a leading env dimension."""
    first = observations[0]
    return {k: np.stack([np.asarray(o[k]) for o in observations]) for k in first}


def unstack_actions(actions: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """Split a dict of batched actions into one action dict per env (0-d entries become Python scalars)."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for k, v in actions.items():
        arr = np.asarray(v)
        if arr.shape[:1] != (n,):
            raise ValueError(f"action '{k}' has shape {arr.shape}; a vector env of {n} envs expects ({n}, ...)")
        if arr.ndim == 1:
            values = arr.tolist()
            for i in range(n):
                out[i][k] = values[i]
        else:
            for i in range(n):
                out[i][k] = arr[i]
    return out


class MixedPolicyKeysError(RuntimeError):
    """The envs of a vector env (or of a group of rollout workers) would act with different policy keys at once."""


MIXED_POLICY_KEYS_ADVICE = (
    "Several envs are stepped together only while all of them act with the same policy key: envs whose next "
    "policy keys differ (agents with their own policy keys that leave or join, or sub-steps in an order that varies "
    "between episodes) are not supported with several envs in one vector env (agents that leave or join on one "
    "shared policy key are). Step each env on its own: runner.concurrency=1 and runner.eval_concurrency=1 (runner=dev "
    "or runner=local; runner=processes and runner=ray need the same policy keys in all envs), or for IMPALA one actor "
    "per process, algorithm.actor_processes=0 (its default)")


def mixed_policy_keys_error(ids: Sequence[ActorID], what: str = "envs of a vector env") -> MixedPolicyKeysError:
    """The error for ``what`` whose next actors ``ids`` have different policy keys, with the limitation and the
    workarounds."""
    return MixedPolicyKeysError(f"{what} act with different policy keys next ({list(ids)}). {MIXED_POLICY_KEYS_ADVICE}")


def _ensure_log_stats(env: Any) -> LogStatsWrapper:
    if isinstance(env, LogStatsWrapper):
        return env
    return LogStatsWrapper.wrap(env)


class VectorEnvWorkerError(WorkerError):
    """An env raised inside a worker process; the message carries the worker's traceback."""


class VectorEnvCallError(WorkerError):
    """A method called on the envs of a worker raised; the envs and workers are unaffected."""


class EpochEpisodeStats:
    """The statistics of finished episodes, reduced and written once per epoch under a prefix: what a vector env
    does with its envs' episodes, and what a trainer whose envs live in its own workers (ES, IMPALA, Ray actors) does
    with the episodes the workers send (:meth:`add`).

    :param logging_prefix: prefix of the statistics (``train``, ``eval``).
    :param writers: writers that receive the epoch statistics (default: the process-wide ones of ``setup_logging``).
    """

    def __init__(self, logging_prefix: str | None = None, writers: list[LogStatsWriter] | None = None):
        self.logging_prefix = logging_prefix
        self._writers: list[LogStatsWriter] | None = list(writers) if writers is not None else None
        self.epoch_aggregator = EpochStatsAggregator()
        self.epoch = 0

    @property
    def writers(self) -> list[LogStatsWriter]:
        """The given writers, or the process-wide defaults of ``setup_logging`` where none were given."""
        return self._writers if self._writers is not None else default_writers()

    @writers.setter
    def writers(self, writers: list[LogStatsWriter]) -> None:
        self._writers = list(writers)

    def add(self, episodes: Sequence[LogStats]) -> None:
        """Add the statistics of finished episodes (as a worker sent them)."""
        for episode in episodes:
            self.epoch_aggregator.add_episode(episode)

    def _collect_episodes(self) -> None:
        """Hook: bring the episodes finished elsewhere into ``epoch_aggregator`` (subprocess envs override)."""

    def write_epoch_stats(self, epoch: int | None = None) -> LogStats:
        """Reduce the episodes finished since the last call and send them to the writers."""
        self._collect_episodes()
        stats = self.epoch_aggregator.reduce()
        self.epoch = self.epoch + 1 if epoch is None else epoch
        for w in self.writers:
            give_way()  # a background run in a kernel makes room for a running cell
            w.write(self.logging_prefix, self.epoch, stats)
        return stats

    def get_stats(self) -> LogStats:
        """The last written epoch statistics."""
        return self.epoch_aggregator.last_stats

    def get_stats_value(self, event: Any, name: str | None = None, group: tuple | None = None) -> Any:
        """One statistic of the last written epoch."""
        return stats_value(self.get_stats(), event, name, group)

    @property
    def n_finished_episodes(self) -> int:
        """Episodes finished since the last ``write_epoch_stats``."""
        self._collect_episodes()
        return self.epoch_aggregator.n_episodes


class VectorEnv(EpochEpisodeStats, ABC):
    """Common interface and statistics handling of vector envs.

    :param logging_prefix: prefix of this vector env's statistics (``train``, ``eval``).
    :param writers: writers that receive the epoch statistics.
    """

    def __init__(self, n_envs: int, logging_prefix: str | None = None, writers: list[LogStatsWriter] | None = None):
        super().__init__(logging_prefix, writers)
        self.n_envs = n_envs
        self._base_seed: int | None = None

    # spaces and structure, taken from the first env
    observation_spaces_dict: dict[StepKey, Any]
    action_spaces_dict: dict[StepKey, Any]
    agent_counts_dict: dict[StepKey, int]

    @abstractmethod
    def reset(self) -> dict[str, np.ndarray]:
        """Reset all envs; returns the stacked first observations."""

    @abstractmethod
    def step(self, actions: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray,
                                                              np.ndarray, list[dict]]:
        """Step all envs with batched actions; returns stacked obs, rewards, terminated, truncated, infos."""

    @abstractmethod
    def actor_id(self) -> ActorID:
        """The actor that acts next (the same in all envs)."""

    @abstractmethod
    def agent_ids(self) -> np.ndarray:
        """The agent that acts next in every env, (n_envs,) ints (all of the common policy key of :meth:`actor_id`;
        zeros for flat envs). Read-only: the array may be shared between calls."""

    def actor_ids(self) -> list[ActorID]:
        """The actor that acts next in every env (one policy key, possibly different agents)."""
        key = self.actor_id().step_key
        return [ActorID(key, int(a)) for a in self.agent_ids()]

    @abstractmethod
    def get_actor_rewards(self) -> np.ndarray | None:
        """Per-env, per-actor rewards of the last step (n_envs, n_actors), where the envs provide them."""

    @abstractmethod
    def close(self) -> None:
        """Close all envs (and stop worker processes)."""

    def seed(self, seed: int | None) -> None:
        """Env i is reset with ``seed + i`` at the next reset."""
        self._base_seed = seed

    def _seeds(self) -> list[int | None]:
        base, self._base_seed = self._base_seed, None
        return [None if base is None else base + i for i in range(self.n_envs)]

    def __enter__(self) -> VectorEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        return self.n_envs


class SequentialVectorEnv(VectorEnv):
    """All envs in this process, stepped one after the other (fastest for cheap envs such as CartPole).

    :param env_factories: one factory per env, each returning a maze-lab env (a LogStatsWrapper is added where
        the env has none).
    """

    def __init__(self, env_factories: Sequence[EnvFactory], logging_prefix: str | None = None,
                 writers: list[LogStatsWriter] | None = None):
        if not env_factories:
            raise ValueError("SequentialVectorEnv needs at least one env factory")
        super().__init__(len(env_factories), logging_prefix, writers)
        self.envs = [_ensure_log_stats(f()) for f in env_factories]
        for env in self.envs:
            env.epoch_aggregator = self.epoch_aggregator  # all episodes land in one place
        first = self.envs[0]
        self.observation_spaces_dict = first.observation_spaces_dict
        self.action_spaces_dict = first.action_spaces_dict
        self.agent_counts_dict = first.agent_counts_dict
        # one policy key with one agent: the actor is always the same (several agents on one key are asked)
        self._single_agent = len(self.action_spaces_dict) == 1 and list(self.agent_counts_dict.values()) == [1]
        self._flat_actor = ActorID(next(iter(self.action_spaces_dict)), 0)
        self._zero_agents = np.zeros(self.n_envs, dtype=np.int64)
        self._zero_agents.flags.writeable = False

    def reset(self) -> dict[str, np.ndarray]:
        """Reset every env (with ``seed + i`` after ``seed()``)."""
        return stack_observations([env.reset(seed=s)[0] for env, s in zip(self.envs, self._seeds(), strict=True)])

    def step(self, actions: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray,
                                                              np.ndarray, list[dict]]:
        """Step each env; finished envs are reset."""
        n = self.n_envs
        per_env = unstack_actions(actions, n)
        obs_list, infos = [], []
        rewards = np.empty(n, dtype=np.float64)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        for i, env in enumerate(self.envs):
            obs, r, te, tr, info = env.step(per_env[i])
            rewards[i], terminated[i], truncated[i] = r, te, tr
            if te or tr:
                info = dict(info)
                info["terminal_observation"] = obs
                obs, _ = env.reset()
            obs_list.append(obs)
            infos.append(info)
        return stack_observations(obs_list), rewards, terminated, truncated, infos

    def actor_id(self) -> ActorID:
        """The actor of env 0 (all envs act with its policy key; see :meth:`agent_ids` for each env's agent)."""
        if self._single_agent:
            return self._flat_actor
        ids = [env.actor_id() for env in self.envs]
        if any(i.step_key != ids[0].step_key for i in ids[1:]):
            raise mixed_policy_keys_error(ids)
        return ids[0]

    def agent_ids(self) -> np.ndarray:
        """The agent that acts next in every env (a shared zero array for flat envs)."""
        if self._single_agent:
            return self._zero_agents
        return np.array([env.actor_id().agent_id for env in self.envs], dtype=np.int64)

    def get_actor_rewards(self) -> np.ndarray | None:
        """Per-actor rewards of every env, or None."""
        rewards = [env.get_actor_rewards() for env in self.envs]
        if any(r is None for r in rewards):
            return None
        return np.stack([np.asarray(r, dtype=np.float64) for r in rewards])

    def close(self) -> None:
        """Close every env."""
        for env in self.envs:
            env.close()


# ---------------------------------------------------------------------------------------------------------------
# subprocess vector env


def _worker(conn: Any, payload: bytes) -> None:
    """Worker process main loop: builds its envs and serves step/reset commands until told to close."""
    serve(conn, lambda: [_ensure_log_stats(f()) for f in cloudpickle.loads(payload)], _command, close=_close_envs,
          ready=lambda envs: (envs[0].observation_spaces_dict, envs[0].action_spaces_dict, envs[0].agent_counts_dict))


def _command(envs: list[LogStatsWrapper], cmd: str, data: Any) -> Any:
    """A worker's answer to one command of the main process."""
    if cmd == "step":
        results = []
        for env, action in zip(envs, data, strict=True):
            obs, r, te, tr, info = env.step(action)
            if te or tr:
                info = dict(info)
                info["terminal_observation"] = obs
                obs, _ = env.reset()
            results.append((obs, r, te, tr, info, env.actor_id(), env.get_actor_rewards()))
        return results, pop_episode_stats(envs)
    if cmd == "reset":
        obs = [env.reset(seed=s)[0] for env, s in zip(envs, data, strict=True)]
        return obs, [env.actor_id() for env in envs]
    if cmd == "episodes":
        return pop_episode_stats(envs)
    if cmd == "call":
        name, args, kwargs = data
        return [getattr(env, name)(*args, **kwargs) for env in envs]
    raise ValueError(f"unknown command {cmd!r}")


def _close_envs(envs: list[LogStatsWrapper]) -> None:
    for env in envs:
        env.close()


def pop_episode_stats(envs: list[LogStatsWrapper]) -> list[LogStats]:
    """The statistics of the episodes the envs finished since the last call (taken out of their aggregators)."""
    out: list[LogStats] = []
    for env in envs:
        agg = env.epoch_aggregator
        if agg.n_episodes:
            with agg._lock:
                out.extend(agg._episodes)
                agg._episodes = []
    return out


class SubprocVectorEnv(VectorEnv):
    """Each group of envs in its own worker process (one env per process by default).

    Factories are sent with cloudpickle, so lambdas and notebook-defined functions work. An exception in a
    worker is raised here as VectorEnvWorkerError with the worker's traceback, and all workers are shut down.

    :param n_workers: number of processes (envs are split evenly); default one per env.
    :param start_method: multiprocessing start method; ``spawn`` is safe in kernels with threads.
    """

    def __init__(self, env_factories: Sequence[EnvFactory], logging_prefix: str | None = None,
                 writers: list[LogStatsWriter] | None = None, n_workers: int | None = None,
                 start_method: str = "spawn"):
        if not env_factories:
            raise ValueError("SubprocVectorEnv needs at least one env factory")
        super().__init__(len(env_factories), logging_prefix, writers)
        n_workers = min(n_workers or len(env_factories), len(env_factories))
        self._groups = [list(range(len(env_factories)))[i::n_workers] for i in range(n_workers)]
        self._order = [i for g in self._groups for i in g]
        check_main_guard(start_method, "SubprocVectorEnv env processes")
        ctx = mp.get_context(start_method)
        self._workers: list[WorkerProcess] = []
        self._closed = False
        try:
            for index, group in enumerate(self._groups):
                payload = pickling.dumps([env_factories[i] for i in group])
                self._workers.append(WorkerProcess.start(ctx, f"vector env worker {index}", _worker, payload))
            infos = [self._receive(i) for i in range(len(self._workers))]
        except BaseException:
            self.close()
            raise
        self.observation_spaces_dict, self.action_spaces_dict, self.agent_counts_dict = infos[0]
        self._actor = ActorID(next(iter(self.action_spaces_dict)), 0)
        self._agent_ids = np.zeros(self.n_envs, dtype=np.int64)
        self._agent_ids.flags.writeable = False
        self._actor_rewards: np.ndarray | None = None

    @property
    def processes(self) -> list[Any]:
        """The worker processes."""
        return [worker.process for worker in self._workers]

    def _died(self, died: WorkerDied) -> VectorEnvWorkerError:
        """The error for a worker whose pipe broke: how it ended (signal or exit code), after shutting down."""
        self.close()
        return VectorEnvWorkerError(died_message(died.worker.describe(), died.how or "it stopped answering",
                                                 "all workers were shut down"))

    def _send(self, index: int, message: tuple[str, Any]) -> None:
        try:
            self._workers[index].send(message)
        except WorkerDied as died:
            raise self._died(died) from None

    def _receive(self, index: int) -> Any:
        try:
            return self._workers[index].receive()
        except WorkerDied as died:
            raise self._died(died) from None
        except WorkerRaised as raised:
            self.close()
            raise VectorEnvWorkerError(f"an env raised in a worker process:\n{raised.trace}") from None

    def _scatter(self, values: list[Any]) -> list[list[Any]]:
        return [[values[i] for i in group] for group in self._groups]

    def _gather(self, per_group: list[list[Any]]) -> list[Any]:
        out: list[Any] = [None] * self.n_envs
        for group, values in zip(self._groups, per_group, strict=True):
            for i, v in zip(group, values, strict=True):
                out[i] = v
        return out

    def _exchange(self, messages: list[tuple[str, Any]]) -> list[Any]:
        """Send one message per worker and collect the replies; on an interrupt all workers are shut down
        (a half-finished exchange leaves the pipes out of step, so the vector env cannot be used on)."""
        if self._closed:
            raise RuntimeError("this SubprocVectorEnv is closed (after close(), a worker error or an interrupt)")
        try:
            for index, message in enumerate(messages):
                self._send(index, message)
            return [self._receive(i) for i in range(len(self._workers))]
        except BaseException:
            self.close()
            raise

    def reset(self) -> dict[str, np.ndarray]:
        """Reset every env."""
        replies = self._exchange([("reset", seeds) for seeds in self._scatter(self._seeds())])
        obs = self._gather([r[0] for r in replies])
        self._set_actor(self._gather([r[1] for r in replies]))
        return stack_observations(obs)

    def _set_actor(self, ids: list[ActorID]) -> None:
        if any(i.step_key != ids[0].step_key for i in ids[1:]):
            raise mixed_policy_keys_error(ids)
        self._actor = ids[0]
        if any(i.agent_id for i in ids) or self._agent_ids.any():
            agents = np.array([i.agent_id for i in ids], dtype=np.int64)
            agents.flags.writeable = False
            self._agent_ids = agents

    def step(self, actions: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray,
                                                              np.ndarray, list[dict]]:
        """Step all workers in parallel."""
        per_env = unstack_actions(actions, self.n_envs)
        replies = self._exchange([("step", acts) for acts in self._scatter(per_env)])
        results = self._gather([r[0] for r in replies])
        for r in replies:
            for ep in r[1]:
                self.epoch_aggregator.add_episode(ep)
        obs = stack_observations([r[0] for r in results])
        rewards = np.array([r[1] for r in results], dtype=np.float64)
        terminated = np.array([r[2] for r in results], dtype=bool)
        truncated = np.array([r[3] for r in results], dtype=bool)
        infos = [r[4] for r in results]
        self._set_actor([r[5] for r in results])
        actor_rewards = [r[6] for r in results]
        self._actor_rewards = None if any(a is None for a in actor_rewards) else np.stack(
            [np.asarray(a, dtype=np.float64) for a in actor_rewards])
        return obs, rewards, terminated, truncated, infos

    def actor_id(self) -> ActorID:
        """The actor of env 0 (all envs act with its policy key; see :meth:`agent_ids` for each env's agent)."""
        return self._actor

    def agent_ids(self) -> np.ndarray:
        """The agent that acts next in every env (as the workers reported it with the last reset or step)."""
        return self._agent_ids

    def get_actor_rewards(self) -> np.ndarray | None:
        """Per-actor rewards of the last step."""
        return self._actor_rewards

    def _collect_episodes(self) -> None:
        if self._closed:
            return
        for episodes in self._exchange([("episodes", None)] * len(self._workers)):
            for ep in episodes:
                self.epoch_aggregator.add_episode(ep)

    def call(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call a method on every env (in env order) and return the results.

        An exception in a call leaves the envs as they were: all replies are read (the pipes stay in step)
        and the first error is raised here as VectorEnvCallError; the workers keep running.
        """
        if self._closed:
            raise RuntimeError("this SubprocVectorEnv is closed (after close(), a worker error or an interrupt)")
        try:
            for index in range(len(self._workers)):
                self._send(index, ("call", (name, args, kwargs)))
            try:
                replies = [worker.receive_reply() for worker in self._workers]
            except WorkerDied as died:
                raise self._died(died) from None
        except BaseException:
            self.close()
            raise
        errors = [data for status, data in replies if status == "error"]
        if errors:
            raise VectorEnvCallError(f"calling '{name}' on the envs failed in a worker process:\n{errors[0]}")
        return self._gather([data for _, data in replies])

    def close(self) -> None:
        """Stop all workers; processes that do not exit in time are terminated, then killed."""
        if self._closed:
            return
        self._closed = True
        shutdown_workers(self._workers, timeout=_CLOSE_TIMEOUT)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
