"""IMPALA's actors: worker processes that step their envs with a copy of the policy and send the trajectories to the
learner, at most ``queue_size`` of them waiting for it (a bounded queue), picking up the learner's newest weights
before each rollout.

Each actor process runs a :class:`~maze_lab.train.vector_env.SequentialVectorEnv` over its envs and a
:class:`~maze_lab.train.trainers.common.rollout.RolloutGenerator`; every env's part of a rollout is one trajectory
(one actor's, in the paper's terms) tagged with the version of the weights that produced it. The weights live in
one shared-memory array with a version counter (:class:`~maze_lab.distributed.weights.SharedWeights`): the learner
writes them after each update, an actor copies them only when the version moved.

IMPALA on Ray (:mod:`maze_lab.train.trainers.impala.ray_actors`) runs the same actor (:func:`_build_actor`,
:func:`roll_out`, :func:`_close_actor`) in Ray actors, asking for each rollout (:func:`actor_command`).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import wait
from typing import Any, NoReturn

import cloudpickle
import numpy as np

from maze_lab.core.log_stats.aggregation import LogStats
from maze_lab.core.utils import pickling
from maze_lab.core.utils.main_guard import check_main_guard
from maze_lab.distributed.processes import (
    NO_REPLY,
    WorkerDied,
    WorkerError,
    WorkerProcess,
    died_message,
    run_worker,
    shutdown_workers,
)
from maze_lab.distributed.weights import SharedWeights, load_flat_weights, policy_tensors
from maze_lab.train.trainers.common.rollout import Rollout, SubStepRecord

_STOP_TIMEOUT = 10.0
"""Seconds the actor processes get to finish, flush their envs' event logs and exit before they are terminated."""


class ImpalaActorError(WorkerError):
    """An IMPALA actor process failed (its traceback is in the message), died, or stopped sending trajectories."""


@dataclass
class Trajectory:
    """One actor's rollout of ``n_rollout_steps`` agent actions (a Rollout of one env) and where it came from."""

    actor: int
    """The index of the actor (its env) among all actors."""
    version: int
    """The learner's update count of the weights that acted (the policy lag is the learner's count minus this)."""
    rollout: Rollout
    episodes: list[LogStats]
    """Statistics of the episodes the actor's process finished during the rollout (sent with one of its envs)."""


class ActorPool:
    """The actor processes, the bounded flow of trajectories and the shared weights.

    Each actor process sends its trajectories through its own pipe (a dead writer cannot leave a half-written message
    in a pipe that others share, and its pipe ends with EOF); a semaphore of ``queue_size`` slots bounds the
    trajectories sent but not yet taken by the learner, so that actors wait while the learner is behind (or paused).

    :param env_factories: one factory per actor (picklable with cloudpickle).
    :param policy: the learner's policy; each process gets a copy (on the CPU).
    :param n_processes: processes to split the actors between (contiguous groups).
    :param n_rollout_steps: agent actions per trajectory.
    :param queue_size: trajectories sent but not yet taken; actors wait while there are this many.
    :param seed: actor i's env is reset with ``seed + i``; None: unseeded.
    :param start_method: multiprocessing start method (``spawn``: safe in kernels with threads).
    """

    def __init__(self, env_factories: Sequence[Callable[[], Any]], policy: Any, n_processes: int,
                 n_rollout_steps: int, queue_size: int, seed: int | None, start_method: str = "spawn"):
        import copy

        check_main_guard(start_method, "IMPALA actor processes")
        ctx = mp.get_context(start_method)
        n = len(env_factories)
        n_processes = max(1, min(n_processes, n))
        self.groups = [[int(i) for i in g] for g in np.array_split(np.arange(n), n_processes)]
        self.queue_size = queue_size
        self.weights = SharedWeights(sum(t.numel() for t in policy_tensors(policy)), ctx)
        self.slots = ctx.Semaphore(queue_size)
        self.stop_flag = ctx.RawValue("b", 0)
        self.workers: list[WorkerProcess] = []
        self._open: dict[Any, int] = {}  # the pipes not at EOF -> their process index
        self._received: deque[Trajectory] = deque()
        self.closed = False
        cpu_policy = policy if policy.device.type == "cpu" else copy.deepcopy(policy).to("cpu")
        policy_bytes = pickling.dumps(cpu_policy)
        try:
            for p, group in enumerate(self.groups):
                payload = pickling.dumps([env_factories[i] for i in group])
                proc_seed = None if seed is None else seed + int(group[0])
                # a one-way pipe: the actor holds the only write end, so its pipe ends with EOF when it does
                worker = WorkerProcess.start(ctx, f"IMPALA actor process {p}", _actor_main, payload, group,
                                             policy_bytes, self.weights, self.slots, self.stop_flag, n_rollout_steps,
                                             proc_seed, process_name=f"impala-actor-{p}", detail=f"actors {group}",
                                             duplex=False)
                self.workers.append(worker)
                self._open[worker.conn] = p
        except BaseException:
            self.close()
            raise
        # a pool that is dropped without close() (e.g. a trainer garbage-collected in a test) still ends its
        # processes; the finalizer holds no reference to the pool itself
        self._finalizer = weakref.finalize(self, _shutdown, self.stop_flag, list(self.workers))

    @property
    def processes(self) -> list[Any]:
        """The actor processes."""
        return [worker.process for worker in self.workers]

    def publish(self, policy: Any, version: int) -> None:
        """Hand the learner's weights (after update ``version``) to the actors."""
        self.weights.publish(policy, version)

    def describe(self, p: int) -> str:
        """Names actor process ``p``: its index, pid and actors."""
        return self.workers[p].describe()

    def get(self, timeout: float) -> Trajectory:
        """The next trajectory; raises ImpalaActorError where an actor failed or died, or none came in ``timeout``
        seconds (never waits forever on dead actors)."""
        deadline = time.monotonic() + timeout
        while True:
            for p, proc in enumerate(self.processes):  # every time: live actors must not hide a dead one
                if proc.exitcode is not None:
                    self._raise_dead(p)
            if self._received:
                self.slots.release()  # the trajectory leaves the bounded flow: an actor may send the next one
                return self._received.popleft()
            for conn in wait(list(self._open), timeout=0.25):
                self._receive(conn)
            if not self._received and time.monotonic() > deadline:
                self.close()
                raise ImpalaActorError(
                    f"no trajectory reached the learner for {timeout:.0f} s although the actor processes are alive "
                    f"(stuck envs?); the actors were shut down. Raise algorithm.actor_start_timeout for envs whose "
                    f"rollouts take longer")

    def _receive(self, conn: Any) -> None:
        """Read one message of a pipe that has one (or is at EOF)."""
        p = self._open[conn]
        try:
            kind, data = self.workers[p].receive_reply()
        except WorkerDied as died:
            del self._open[conn]
            self._raise_died(died)
        if kind == "error":
            self._raise_raised(p, data)
        self._received.append(data)

    def qsize(self) -> int:
        """Trajectories sent but not yet taken by the learner (0 where the platform cannot tell)."""
        try:
            return self.queue_size - self.slots.get_value()
        except NotImplementedError:  # macOS
            return 0

    def _raise_dead(self, p: int) -> None:
        """Raise for actor process ``p``, which ended: its reported error where it sent one, else how it died."""
        worker = self.workers[p]
        try:
            while worker.conn.poll(2.0):  # what it sent before it ended, up to its error report
                kind, data = worker.receive_reply()
                if kind == "error":
                    self._raise_raised(p, data)
        except WorkerDied as died:
            self._raise_died(died)
        except OSError:
            pass
        self._raise_died(WorkerDied(worker, worker.how_it_ended()))

    def _raise_raised(self, p: int, trace: str) -> NoReturn:
        """Raise for actor process ``p``, which reported an exception; shuts the actors down."""
        name = self.describe(p)
        self.close()
        raise ImpalaActorError(f"{name} raised; the actors were shut down. The actor's traceback:\n{trace}")

    def _raise_died(self, died: WorkerDied) -> NoReturn:
        """Raise for an actor process whose pipe ended without an error report; shuts the actors down."""
        self.close()
        raise ImpalaActorError(died_message(died.worker.describe(), died.how or "its pipe closed",
                                            "the actors were shut down")) from None

    def close(self) -> None:
        """Stop the actor processes (they flush their envs' event logs first); idempotent."""
        if self.closed:
            return
        self.closed = True
        if hasattr(self, "_finalizer"):
            self._finalizer.detach()
        _shutdown(self.stop_flag, self.workers)


def _shutdown(stop_flag: Any, workers: list[WorkerProcess]) -> None:
    """Tell the actor processes to stop (the shared flag: their pipes only carry trajectories to the learner), read
    what they still send (so that none blocks on a full pipe) until their pipes end, then end those that do not in
    time."""
    stop_flag.value = 1
    shutdown_workers(workers, timeout=_STOP_TIMEOUT, ask=False)


# ---------------------------------------------------------------------------------------------------------------
# in the actor process (a Ray actor of IMPALA on Ray builds and rolls out the same way, see ray_actors)


def split_rollout(rollout: Rollout) -> list[Rollout]:
    """The per-env parts of a vector env's rollout: one Rollout of one env each."""
    parts = []
    for i in range(rollout.n_envs):
        records = []
        for r in rollout.records:
            records.append(SubStepRecord(
                r.key, {k: v[i:i + 1] for k, v in r.obs.items()}, {k: v[i:i + 1] for k, v in r.actions.items()},
                r.log_prob[i:i + 1], r.reward[i:i + 1], r.terminated[i:i + 1], r.truncated[i:i + 1],
                [(0, obs) for j, obs in r.bootstrap if j == i], None if r.agent_ids is None else r.agent_ids[i:i + 1],
                None if r.step_end is None else r.step_end[i:i + 1]))
        parts.append(Rollout(records, {k: v[i:i + 1] for k, v in rollout.next_obs.items()}, rollout.next_key,
                             rollout.first_key, 1))
    return parts


class _Actor:
    """What an actor process holds: its vector env, its policy copy (and that policy's tensors), its generator."""

    def __init__(self, venv: Any, policy: Any, generator: Any):
        self.venv = venv
        self.policy = policy
        self.tensors = policy_tensors(policy)
        self.generator = generator


def _actor_main(conn: Any, payload: bytes, actors: list[int], policy_bytes: bytes, weights: SharedWeights,
                slots: Any, stop: Any, n_rollout_steps: int, seed: int | None) -> None:
    """An actor process: roll out, send the trajectories, repeat until told to stop (errors go to the learner with
    their traceback; the envs flush their event logs at the end)."""
    run_worker(conn, partial(_build_actor, payload, policy_bytes, seed),
               partial(_act, conn, actors, weights, slots, stop, n_rollout_steps), _close_actor)


def _build_actor(payload: bytes, policy_bytes: bytes, seed: int | None) -> _Actor:
    """The actor process's envs (from the cloudpickled factories), policy copy and generator, reset with ``seed``."""
    import torch

    from maze_lab.train.trainers.common.rollout import RolloutGenerator
    from maze_lab.train.vector_env import SequentialVectorEnv

    torch.set_num_threads(1)
    if seed is not None:
        torch.manual_seed(seed)
    venv = SequentialVectorEnv(cloudpickle.loads(payload))
    try:
        policy = cloudpickle.loads(policy_bytes)
        policy.eval()
        actor = _Actor(venv, policy, RolloutGenerator(venv))
        actor.generator.reset(seed)
    except BaseException:
        _close_venv(venv)
        raise
    return actor


def _act(conn: Any, actors: list[int], weights: SharedWeights, slots: Any, stop: Any, n_rollout_steps: int,
         actor: _Actor) -> None:
    """Roll out with the newest weights and send each env's part as a trajectory, until ``stop`` is set."""
    version = -1
    while not stop.value:
        version = weights.pull(actor.tensors, version)
        for trajectory in roll_out(actor, actors, n_rollout_steps, version):
            while not slots.acquire(timeout=0.1):  # wait for a free slot, but not past a stop
                if stop.value:
                    return
            conn.send(("trajectory", trajectory))


def roll_out(actor: _Actor, actors: list[int], n_rollout_steps: int, version: int) -> list[Trajectory]:
    """One rollout of the actor's envs with the weights it holds (those of update ``version``): one trajectory per
    env (IMPALA actor ``actors[i]``); the finished episodes' statistics travel with the first."""
    from maze_lab.train.vector_env import pop_episode_stats

    rollout = actor.generator.rollout(actor.policy, n_rollout_steps)
    episodes = pop_episode_stats(actor.venv.envs)
    return [Trajectory(actors[i], version, part, episodes if i == 0 else [])
            for i, part in enumerate(split_rollout(rollout))]


def actor_command(actors: list[int], actor: _Actor, cmd: str, data: Any) -> Any:
    """An actor's answer to one command of the learner, where the learner asks for each rollout (IMPALA on Ray): the
    ``weights`` of an update (not answered), or a ``rollout`` of ``(n_rollout_steps, version)``, ``version`` being
    that of the weights the actor holds."""
    if cmd == "weights":
        load_flat_weights(actor.tensors, data)
        return NO_REPLY
    if cmd == "rollout":
        n_rollout_steps, version = data
        return roll_out(actor, actors, n_rollout_steps, version)
    raise ValueError(f"unknown command {cmd!r}")


def _close_actor(actor: _Actor) -> None:
    """Flush the event logs of the actor's envs and close them."""
    _close_venv(actor.venv)


def _close_venv(venv: Any) -> None:
    for env in venv.envs:
        flush = getattr(env, "flush_event_logs", None)
        if flush is not None:
            with contextlib.suppress(Exception):
                flush()
    with contextlib.suppress(Exception):
        venv.close()
