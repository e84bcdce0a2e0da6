"""The training statistics of envs that live in a trainer's own worker processes (ES workers, IMPALA actors).

The workers' envs carry a LogStatsWrapper (the run layer's env factories add it); each worker pops the statistics
of the episodes it finished (:func:`maze_lab.train.vector_env.pop_episode_stats`) and sends them with its results.
The trainer adds them here, and the epoch loop of the trainer base writes them under the ``train`` prefix as it
writes a vector env's: the same statistics, dashboards and comparisons as for A2C or PPO.
"""

from __future__ import annotations

from collections.abc import Iterable

from maze_lab.core.log_stats.aggregation import EpochStatsAggregator, LogStats
from maze_lab.core.log_stats.log_setup import default_writers
from maze_lab.core.log_stats.writers import LogStatsWriter


class WorkerEpisodeStats:
    """Episode statistics collected from worker processes, written once per epoch.

    Stands where a trainer keeps its training vector env (``trainer.env``): it has the ``writers``,
    ``logging_prefix`` and ``write_epoch_stats`` the trainer base and the run layer use.

    :param logging_prefix: the prefix of the statistics (``train``).
    :param writers: where the epoch statistics go (default: the process-wide writers of ``setup_logging``).
    """

    def __init__(self, logging_prefix: str = "train", writers: list[LogStatsWriter] | None = None):
        self.logging_prefix = logging_prefix
        self._writers = list(writers) if writers is not None else None
        self.epoch_aggregator = EpochStatsAggregator()
        self.epoch = 0

    @property
    def writers(self) -> list[LogStatsWriter]:
        """The given writers, or the process-wide defaults."""
        return self._writers if self._writers is not None else default_writers()

    @writers.setter
    def writers(self, writers: list[LogStatsWriter]) -> None:
        self._writers = list(writers)

    def add(self, episodes: Iterable[LogStats]) -> None:
        """Add the statistics of finished episodes (as a worker sent them)."""
        for episode in episodes:
            self.epoch_aggregator.add_episode(episode)

    @property
    def n_finished_episodes(self) -> int:
        """Episodes added since the last :meth:`write_epoch_stats`."""
        return self.epoch_aggregator.n_episodes

    def write_epoch_stats(self, epoch: int | None = None) -> LogStats:
        """Reduce the episodes added since the last call and send them to the writers."""
        stats = self.epoch_aggregator.reduce()
        self.epoch = self.epoch + 1 if epoch is None else epoch
        for w in self.writers:
            w.write(self.logging_prefix, self.epoch, stats)
        return stats

    def get_stats(self) -> LogStats:
        """The last written epoch statistics."""
        return self.epoch_aggregator.last_stats
