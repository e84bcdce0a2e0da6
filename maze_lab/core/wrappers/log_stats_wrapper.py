"""LogStatsWrapper: turns the events of each step into step, episode and epoch statistics."""

from __future__ import annotations

from typing import Any

from maze_lab.core.events.event_record import EventRecord
from maze_lab.core.log_stats.aggregation import EpochStatsAggregator, LogStats, aggregate_episode, stats_value
from maze_lab.core.log_stats.base_events import BaseEnvEvents
from maze_lab.core.log_stats.event_log import EpisodeEventLog, EventLogWriter
from maze_lab.core.log_stats.log_setup import default_writers
from maze_lab.core.log_stats.writers import LogStatsWriter
from maze_lab.core.wrappers.wrapper import RewardWrapper, Wrapper

_REWARD = BaseEnvEvents.reward
_REWARD_ORIGINAL = BaseEnvEvents.reward_original
_KPI = BaseEnvEvents.kpi
_MISSING = object()


def innermost_reward_wrapper(env: Any) -> RewardWrapper | None:
    """The reward wrapper closest to the env in a wrapper stack (it receives the env's own reward), or None."""
    found = None
    while isinstance(env, Wrapper):
        if isinstance(env, RewardWrapper):
            found = env
        env = env.env
    return found


class LogStatsWrapper(Wrapper):
    """Collects the events of every step, reduces them at episode end and writes epoch statistics.

    Place it on top of every wrapper that fires events (e.g. MazeEnvMonitoringWrapper). Steps are full env steps
    (the env time): the sub-steps of a structured env are one step. Two rewards are recorded:
    ``BaseEnvEvents.reward``, the reward returned to the agent (after the reward wrappers below), and
    ``BaseEnvEvents.reward_original``, the reward the env produced (what the innermost RewardWrapper received).

    :param logging_prefix: prefix of the statistics (``train``, ``eval``); None for none.
    :param writers: writers that receive each epoch's statistics (console, TensorBoard, StatsStore).
    :param event_log_writers: writers that receive the raw event log of each finished episode.
    """

    def __init__(self, env: Any, logging_prefix: str | None = None, writers: list[LogStatsWriter] | None = None,
                 event_log_writers: list[EventLogWriter] | None = None):
        super().__init__(env)
        self.logging_prefix = logging_prefix
        self._writers: list[LogStatsWriter] | None = list(writers) if writers is not None else None
        self.event_log_writers: list[EventLogWriter] = list(event_log_writers or [])
        self.epoch_aggregator = EpochStatsAggregator()
        self.epoch = 0
        self.last_episode_stats: LogStats = {}
        self._context = env.context
        self._service = self._context.event_service
        self._steps: list[list[EventRecord]] = []
        self._step_rewards: list[float] = []
        self._step_rewards_original: list[float] = []
        self._cur: list[EventRecord] = []
        self._reward = 0.0
        self._reward_original = 0.0
        self._reward_source = innermost_reward_wrapper(env)
        self._read_list: list | None = None
        self._read_n = 0
        self._time = 0
        self._kpi_getter: Any = None

    def _pull_events(self) -> None:
        events = self._service._step_events
        if events is not self._read_list:
            self._read_list, self._read_n = events, 0
        n = len(events)
        if n > self._read_n:
            self._cur.extend(events[self._read_n:n])
            self._read_n = n

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Step and record the events and reward of the step."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        events = self._service._step_events
        if events and (events is not self._read_list or len(events) > self._read_n):
            self._pull_events()
        source = self._reward_source
        original = reward if source is None else source.pop_original_reward()
        now = self._context.step_id
        if now != self._time or terminated or truncated:
            # the full env step is complete: close it (what _close_step does, in place)
            self._time = now
            self._steps.append(self._cur)
            self._cur = []
            self._step_rewards.append(self._reward + reward)
            self._step_rewards_original.append(self._reward_original + original)
            self._reward = 0.0
            self._reward_original = 0.0
            if terminated or truncated:
                self._close_episode()
        else:
            self._reward += reward
            self._reward_original += original
        return obs, reward, terminated, truncated, info

    def _close_step(self) -> None:
        self._steps.append(self._cur)
        self._step_rewards.append(self._reward)
        self._step_rewards_original.append(self._reward_original)
        self._cur = []
        self._reward = 0.0
        self._reward_original = 0.0

    def _close_episode(self) -> None:
        steps, rewards, originals = self._steps, self._step_rewards, self._step_rewards_original
        buffered: dict = {}
        for pop in self._context.episode_buffers:
            buffered.update(pop())
        if not steps:
            return
        self._steps, self._step_rewards, self._step_rewards_original = [], [], []
        get_kpi_calculator = self._kpi_getter
        if get_kpi_calculator is None:  # looked up once (through the wrappers below); _MISSING where none has one
            get_kpi_calculator = self._kpi_getter = getattr(self.env, "get_kpi_calculator", _MISSING)
        calc = get_kpi_calculator() if get_kpi_calculator is not _MISSING else None
        log = EpisodeEventLog(self._context.episode_id, steps, rewards)
        if calc is not None:
            kpis = calc.calculate_kpis(log, self.env.get_maze_state())
            steps[-1].extend(EventRecord(BaseEnvEvents, _KPI, {"name": k, "value": float(v)}) for k, v in kpis.items())
        stats = aggregate_episode(steps, self._service.topics, buffered,
                                  {(_REWARD, None): {None: rewards}, (_REWARD_ORIGINAL, None): {None: originals}})
        self.last_episode_stats = stats
        self.epoch_aggregator.add_episode(stats)
        for w in self.event_log_writers:
            w.write(log)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Close an unfinished episode (its statistics count), then reset."""
        if self._cur and not self._steps:
            self._cur = []
        if self._steps:
            if self._cur:
                self._close_step()
            self._close_episode()
        else:
            for pop in self._context.episode_buffers:
                pop()
        obs, info = self.env.reset(seed=seed, options=options)
        self._cur, self._reward, self._reward_original, self._time = [], 0.0, 0.0, self._context.step_id
        if self._reward_source is not None:
            self._reward_source.pop_original_reward()  # steps taken inside reset are not part of the episode
        self._read_list = None
        self._pull_events()  # events fired during reset count towards the first step
        return obs, info

    # --- statistics access ------------------------------------------------------------------------
    def write_epoch_stats(self) -> LogStats:
        """Reduce the episodes collected since the last call, send them to the writers and return them."""
        stats = self.epoch_aggregator.reduce()
        self.epoch += 1
        for w in self.writers:
            w.write(self.logging_prefix, self.epoch, stats)
        return stats

    def get_stats(self, level: str = "epoch") -> LogStats:
        """Statistics of the last finished episode (``episode``) or the last written epoch (``epoch``)."""
        if level == "episode":
            return self.last_episode_stats
        if level == "epoch":
            return self.epoch_aggregator.last_stats
        raise ValueError(f"level must be 'episode' or 'epoch', got {level!r}")

    def get_stats_value(self, event: Any, level: str = "epoch", name: str | None = None,
                        group: tuple | None = None) -> Any:
        """One statistic, e.g. ``get_stats_value(BaseEnvEvents.reward, "epoch", "mean")``."""
        return stats_value(self.get_stats(level), event, name, group)

    @property
    def writers(self) -> list[LogStatsWriter]:
        """This wrapper's writers, or the process-wide defaults of ``setup_logging`` where none were given."""
        return self._writers if self._writers is not None else default_writers()

    def flush_event_logs(self) -> None:
        """Write buffered event log rows to disk."""
        for w in self.event_log_writers:
            flush = getattr(w, "flush", None)
            if flush is not None:
                flush()

    def close(self) -> None:
        """Close the event log writers and the wrapped env."""
        for w in self.event_log_writers:
            w.close()
        self.env.close()

    def add_writer(self, writer: LogStatsWriter) -> None:
        """Register another epoch statistics writer."""
        self._writers = [*(self._writers or []), writer]
