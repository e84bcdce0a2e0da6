"""SequentialRolloutRunner: runs a policy for a number of episodes in this process, with statistics and
(optionally) trajectory recording."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from maze_lab.core.log_stats.aggregation import LogStats
from maze_lab.core.log_stats.writers import LogStatsWriter
from maze_lab.core.policy import Policy
from maze_lab.core.trajectory.recorder import TrajectoryRecordingWrapper
from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.core.wrappers.monitoring_wrapper import MazeEnvMonitoringWrapper
from maze_lab.core.wrappers.time_limit_wrapper import TimeLimitWrapper
from maze_lab.core.wrappers.wrapper import Wrapper


@dataclass
class RolloutResult:
    """What a rollout produced: statistics over all episodes, per-episode numbers and trajectory files."""

    stats: LogStats
    """Statistics of all episodes together (as one epoch of the LogStatsWrapper)."""
    episode_stats: list[LogStats] = field(default_factory=list)
    """Statistics of each episode."""
    episode_rewards: list[float] = field(default_factory=list)
    """Return (summed reward) of each episode."""
    episode_lengths: list[int] = field(default_factory=list)
    """Env steps of each episode."""
    trajectory_paths: list[Path] = field(default_factory=list)
    """The episode files written (empty without recording)."""
    seconds: float = 0.0
    """Wall-clock time of the rollout."""

    @property
    def mean_reward(self) -> float:
        """Mean episode return."""
        return float(sum(self.episode_rewards) / len(self.episode_rewards)) if self.episode_rewards else float("nan")

    def stat(self, event: Any, name: str | None = None, group: tuple | None = None) -> Any:
        """One statistic of :attr:`stats`, e.g. ``stat(BaseEnvEvents.reward, "mean")``."""
        from maze_lab.core.log_stats.aggregation import stats_value

        return stats_value(self.stats, event, name, group)


def _find(env: Any, wrapper_type: type) -> Any:
    while isinstance(env, Wrapper):
        if isinstance(env, wrapper_type):
            return env
        env = env.env
    return None


class SequentialRolloutRunner:
    """Rolls out a policy (heuristic, random or trained) on a maze-lab env, one episode after the other.

    The env gets the statistics stack (MazeEnvMonitoringWrapper and LogStatsWrapper, unless the factory's env
    has them already) and, with ``record_trajectory``, a TrajectoryRecordingWrapper on top that writes one file
    per episode into ``trajectory_dir``.

    :param env_factory: builds the env (called once per :meth:`run`).
    :param policy: any :class:`~maze_lab.core.policy.Policy`.
    :param n_episodes: episodes to run.
    :param max_episode_steps: truncate episodes after this many env steps (None: the env decides).
    :param record_trajectory: record the episodes into ``trajectory_dir``.
    :param trajectory_dir: where the episode files go.
    :param deterministic: act with the most likely action instead of sampling.
    :param seed: seeds the policy and episode ``i`` with ``seed + i`` (None: unseeded).
    :param logging_prefix: prefix of the statistics (``rollout``).
    :param writers: statistics writers (console, StatsStore, ...); None uses the process-wide defaults.
    :param record_frames: also record the env's own RGB frame of each step into the episode files (see
        :class:`~maze_lab.core.trajectory.recorder.TrajectoryRecordingWrapper`); None (default) does where the
        env renders RGB frames and its renderer cannot redraw recorded states (plain Gymnasium envs such as
        CartPole), so a trajectory viewer can show them; False never, True insists.
    :param on_episode: called with the reward and the length of each episode as it ends (a progress bar).
    """

    def __init__(self, env_factory: Callable[[], Any], policy: Policy, n_episodes: int,
                 max_episode_steps: int | None = None, record_trajectory: bool = True,
                 trajectory_dir: str | Path = "trajectory_data", deterministic: bool = False,
                 seed: int | None = None, logging_prefix: str | None = "rollout",
                 writers: list[LogStatsWriter] | None = None, record_frames: bool | None = None,
                 on_episode: Callable[[float, int], None] | None = None):
        if not callable(env_factory):
            raise TypeError(f"env_factory must be a callable returning an env, got {type(env_factory).__name__}")
        if not hasattr(policy, "compute_action"):
            raise TypeError(f"policy must be a maze-lab Policy (with compute_action), got {type(policy).__name__}")
        if not isinstance(n_episodes, int) or n_episodes < 1:
            raise ValueError(f"n_episodes must be a positive int, got {n_episodes!r}")
        self.env_factory = env_factory
        self.policy = policy
        self.n_episodes = n_episodes
        self.max_episode_steps = max_episode_steps
        self.record_trajectory = record_trajectory
        self.trajectory_dir = Path(trajectory_dir)
        self.deterministic = deterministic
        self.seed = seed
        self.logging_prefix = logging_prefix
        self.writers = writers
        self.record_frames = record_frames
        self.on_episode = on_episode
        self.env: Any = None
        """The env of the last :meth:`run` (with all wrappers)."""

    def build_env(self) -> Any:
        """The factory's env with time limit, statistics and recording wrappers as configured."""
        env = self.env_factory()
        if self.max_episode_steps:
            env = TimeLimitWrapper.wrap(env, max_episode_steps=int(self.max_episode_steps))
        if _find(env, LogStatsWrapper) is None:
            if _find(env, MazeEnvMonitoringWrapper) is None:
                env = MazeEnvMonitoringWrapper.wrap(env)
            env = LogStatsWrapper.wrap(env, logging_prefix=self.logging_prefix, writers=self.writers)
        if self.record_trajectory:
            env = TrajectoryRecordingWrapper.wrap(env, trajectory_dir=self.trajectory_dir,
                                                  metadata={"policy": type(self.policy).__name__,
                                                            "deterministic": self.deterministic},
                                                  record_frames=self.record_frames)
        return env

    def run(self) -> RolloutResult:
        """Run the episodes; returns their statistics (also sent to the writers as one epoch)."""
        t0 = time.perf_counter()
        env = self.env = self.build_env()
        stats_env = _find(env, LogStatsWrapper)
        recorder = _find(env, TrajectoryRecordingWrapper)
        policy = self.policy
        if self.seed is not None:
            policy.seed(self.seed)
        needs_state = policy.needs_state()
        result = RolloutResult(stats={})
        try:
            for i in range(self.n_episodes):
                obs, _ = env.reset(seed=None if self.seed is None else self.seed + i)
                policy.reset()
                total = 0.0
                while True:
                    actor = env.actor_id()
                    action = policy.compute_action(obs, actor_id=actor,
                                                   maze_state=env.get_maze_state() if needs_state else None,
                                                   env=env, deterministic=self.deterministic)
                    obs, reward, terminated, truncated, _ = env.step(action)
                    total += float(reward)
                    if terminated or truncated:
                        break
                result.episode_rewards.append(total)
                result.episode_lengths.append(int(env.get_env_time()))
                result.episode_stats.append(stats_env.last_episode_stats)
                if self.on_episode is not None:
                    self.on_episode(total, result.episode_lengths[-1])
        finally:
            if recorder is not None:
                recorder.close()  # writes an episode cut off by an error; closes the env below as well
            else:
                env.close()
        result.stats = stats_env.write_epoch_stats()
        result.trajectory_paths = list(recorder.written) if recorder is not None else []
        result.seconds = time.perf_counter() - t0
        return result

