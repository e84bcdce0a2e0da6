"""AgentDeployment: a policy and its env's wrapper stack behind ``act(maze_state, reward, done, info)``, for an
environment outside maze-lab that calls the agent (a production system) instead of being stepped by it.

The wrappers (observation normalization, frame stacking, action conversion, step skipping, statistics, event logs)
belong to the agent in deployment: the outside environment deals in MazeStates and MazeActions only. The
deployment keeps the env's wrapper stack, replaces its core env by an :class:`ExternalCoreEnv`, and runs the usual
loop (reset, policy, step) in a helper thread that waits inside the core env's ``step`` for the next state from
outside. Episodes follow each other: an ``act`` with ``done=True`` ends the episode (its statistics are recorded)
and the next ``act`` begins the next one.
"""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from maze_lab.agent.deployment.external_core_env import DeploymentClosed, ExternalCoreEnv
from maze_lab.core.log_stats.aggregation import LogStats
from maze_lab.core.log_stats.writers import LogStatsWriter


class DeploymentError(RuntimeError):
    """The wrapper stack or the policy raised inside the deployment; the message carries their traceback."""


class AgentDeployment:
    """A policy with its wrapper stack, queried by an outside environment.

    ::

        deployment = load_run("outputs/cartpole/2026-11-24_03-00-00").deployment()  # maze_lab.run.runs.load_run
        state, reward, done, info = external.reset(), 0.0, False, {}
        while not done:
            action = deployment.act(state, reward, done, info)
            state, reward, done, info = external.step(action)
        deployment.act(state, reward, done, info)  # ends the episode; the next act starts a new one
        deployment.close()

    :param policy: the policy (a TorchPolicy, a heuristic, ...), or a config dict with ``_target_``.
    :param env: the env whose wrapper stack the agent keeps (an env object, or a config dict with ``_target_``);
        its core env is replaced and never stepped.
    :param wrappers: wrappers to add on top of ``env`` (a wrappers config as in a run's ``wrappers`` section).
    :param deterministic: pick the most likely action (True) or sample.
    :param writers: writers of the statistics (:meth:`write_stats` and ``close``); default none.
    :param event_log_dir: a directory for the event logs of the episodes (TSV, as in training); None for none.
    :param logging_prefix: prefix of the statistics.
    :param timeout: seconds ``act`` waits for the wrapper stack and the policy before it reports them as stuck.
    """

    def __init__(self, policy: Any, env: Any, wrappers: Mapping[str, Any] | None = None, deterministic: bool = True,
                 writers: list[LogStatsWriter] | None = None, event_log_dir: str | Path | None = None,
                 logging_prefix: str = "deployment", timeout: float = 300.0):
        from maze_lab.core.log_stats.event_log import TSVEventLogWriter
        from maze_lab.core.utils.factory import Factory
        from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
        from maze_lab.core.wrappers.monitoring_wrapper import MazeEnvMonitoringWrapper
        from maze_lab.core.wrappers.wrapper import wrap_env

        if isinstance(policy, Mapping):
            policy = Factory().instantiate(policy)
        if isinstance(env, Mapping):
            env = Factory().instantiate(env)
        if wrappers:
            env = wrap_env(env, dict(wrappers))
        maze_env = env.unwrapped
        if not hasattr(maze_env, "core_env"):
            raise TypeError(f"AgentDeployment needs a maze-lab env (a MazeEnv, e.g. GymMazeEnv('CartPole-v1'), with "
                            f"wrappers), got {type(env).__name__}")
        if len(env.action_spaces_dict) != 1 or any(n != 1 for n in env.agent_counts_dict.values()):
            raise ValueError(f"AgentDeployment serves envs with one policy key and one agent; this env has the policy "
                             f"keys {list(env.action_spaces_dict)} with agents {dict(env.agent_counts_dict)}. Deploy "
                             "the sub-policies of a structured env behind your own dispatch, or flatten its actions")
        _refuse_sampling_wrappers(env)
        self._states: queue.Queue = queue.Queue()
        self._actions: queue.Queue = queue.Queue()
        self._core = ExternalCoreEnv(maze_env.core_env, self._states, self._actions)
        maze_env.core_env = self._core
        env = MazeEnvMonitoringWrapper.wrap(env)
        log_writers = [TSVEventLogWriter(str(event_log_dir))] if event_log_dir is not None else []
        self.env = LogStatsWrapper.wrap(env, logging_prefix=logging_prefix, writers=list(writers or []),
                                        event_log_writers=log_writers)
        self.policy = policy
        self.deterministic = deterministic
        self.timeout = timeout
        self.n_episodes = 0
        """Episodes ended so far."""
        self.n_actions = 0
        """Actions returned so far."""
        self._in_episode = False
        self._closed = False
        self._failure: str | None = None
        self._thread = threading.Thread(target=self._loop, name="maze-lab agent deployment", daemon=True)
        self._thread.start()
        self._expect("waiting")  # the stack is ready for the first episode

    @classmethod
    def from_run(cls, run: Any, which: str = "best", **kwargs: Any) -> AgentDeployment:
        """The policy of a loaded run (its ``best`` or ``last`` weights) with the run's env wrapper stack
        (normalization statistics included): ``AgentDeployment.from_run(load_run(run_dir, trust=[...]))``, or
        ``load_run(run_dir).deployment()``. ``load_run`` checks what the run's config may build (its ``trust``) and
        takes the env factory of a run whose factory cannot be imported by name (its ``env_factory``).

        :param run: what :func:`maze_lab.run.runs.load_run` returned.
        :param kwargs: the other parameters of :class:`AgentDeployment`.
        """
        if isinstance(run, str | Path):
            raise TypeError(f"AgentDeployment.from_run takes a loaded run, not the path {str(run)!r}: "
                            f"AgentDeployment.from_run(load_run(run_dir)) or load_run(run_dir).deployment(), with "
                            f"load_run from maze_lab.run.runs (its trust= and env_factory= go there)")
        env = run.env_factory().build_env()
        statistics = run.normalization_statistics(which)
        if statistics is not None:
            env.set_normalization_statistics(statistics)  # the run's own, never re-estimated from the outside env
        return cls(run.policy(which), env, **kwargs)

    # ---- the loop in the helper thread ------------------------------------------------------------------------
    def _loop(self) -> None:
        env, policy = self.env, self.policy
        try:
            while True:
                obs, _ = env.reset()
                done = False
                while not done:
                    action = policy.compute_action(obs, actor_id=env.actor_id(), maze_state=env.get_maze_state(),
                                                   env=env, deterministic=self.deterministic)
                    obs, _, terminated, truncated, _ = env.step(action)
                    done = terminated or truncated
        except DeploymentClosed:
            if self._in_episode:
                self._core.closing = True
                env.reset()  # the wrappers close the unfinished episode: its statistics count
        except BaseException:  # noqa: BLE001 - reported to the caller of act()
            self._actions.put(("error", traceback.format_exc()))

    # ---- the caller's side ------------------------------------------------------------------------------------
    def _expect(self, kind: str) -> tuple:
        """The next message of the helper thread, which must be ``kind``."""
        try:
            message = self._actions.get(timeout=self.timeout)
        except queue.Empty:
            raise DeploymentError(f"the wrapper stack and policy did not answer within {self.timeout} s") from None
        if message[0] == "error":
            self._failure = message[1]
            raise DeploymentError(f"the deployment's wrapper stack or policy raised:\n{message[1]}")
        if message[0] != kind:
            raise DeploymentError(f"deployment out of step: expected '{kind}', got '{message[0]}'")
        return message

    def act(self, maze_state: Any, reward: float = 0.0, done: bool = False, info: Mapping[str, Any] | None = None,
            truncated: bool = False) -> Any:
        """The MazeAction for ``maze_state``.

        :param maze_state: the state of the outside environment (as the env's core env would return it).
        :param reward: the reward of the previous action (ignored on the first state of an episode).
        :param done: the episode ended with this state: it is recorded and None is returned; the next call starts a
            new episode.
        :param info: the outside environment's info of the step.
        :param truncated: the episode was cut (a time limit) rather than ended by the task (with ``done``).
        """
        self._check_open()
        if not self._in_episode:
            if done:
                raise ValueError("act(done=True) on the first state of an episode: an episode that ends before the "
                                 "agent acted has nothing to record; call act with done=False first")
            self._states.put(("state", maze_state, 0.0, False, False, info))
            self._in_episode = True
            return self._take_action()
        ended = bool(done or truncated)
        self._states.put(("state", maze_state, reward, bool(done) and not truncated, bool(truncated), info))
        if ended:
            self._expect("waiting")
            self._in_episode = False
            self.n_episodes += 1
            return None
        return self._take_action()

    def _take_action(self) -> Any:
        _, maze_action = self._expect("action")
        self.n_actions += 1
        return maze_action

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this AgentDeployment is closed; create a new one")
        if self._failure is not None:
            raise DeploymentError(f"the deployment failed earlier and cannot act; its error:\n{self._failure}")

    @property
    def episode_stats(self) -> LogStats:
        """Statistics of the last ended episode."""
        return self.env.get_stats("episode")

    def write_stats(self) -> LogStats:
        """Reduce the episodes ended since the last call, send them to the writers and return them."""
        return self.env.write_epoch_stats()

    def close(self, maze_state: Any = None, reward: float = 0.0, done: bool = True,
              info: Mapping[str, Any] | None = None) -> LogStats:
        """End the deployment: an episode in progress ends (with ``maze_state`` as its last state where given; one
        that was not done counts as truncated), the statistics of the episodes since the last :meth:`write_stats`
        are written, event logs flushed, the env closed. Returns those statistics."""
        if self._closed:
            return self.env.get_stats("epoch")
        if self._in_episode and maze_state is not None and self._failure is None:
            self.act(maze_state, reward, done=bool(done), info=info, truncated=not done)
        self._closed = True
        self._states.put(("stop",))
        self._thread.join(self.timeout)
        stats = self.env.write_epoch_stats() if self._failure is None else {}
        self.env.flush_event_logs()
        self.env.close()
        return stats

    def __enter__(self) -> AgentDeployment:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _refuse_sampling_wrappers(env: Any) -> None:
    """A wrapper that would step the env on its own (observation normalization without statistics samples the env
    at its first reset) would send its actions to the outside environment: refuse it before anything is sent."""
    from maze_lab.core.wrappers.wrapper import Wrapper

    layer = env
    while isinstance(layer, Wrapper):
        if hasattr(layer, "has_all_statistics") and not layer.has_all_statistics():
            raise ValueError(f"{type(layer).__name__} has no normalization statistics, and estimating them would step "
                             "the outside environment with random actions. Give them (load_run(dir).deployment() loads "
                             "the run's; or env.set_normalization_statistics(...), or default_statistics in its "
                             "config)")
        layer = layer.env
