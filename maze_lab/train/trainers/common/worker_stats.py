"""The training statistics of envs that live in a trainer's own worker processes (ES workers, IMPALA actors).

The workers' envs carry a LogStatsWrapper (the run layer's env factories add it); each worker pops the statistics
of the episodes it finished (:func:`maze_lab.train.vector_env.pop_episode_stats`) and sends them with its results.
The trainer adds them here, and the epoch loop of the trainer base writes them under the ``train`` prefix as it
writes a vector env's: the same statistics, dashboards and comparisons as for A2C or PPO.
"""

from __future__ import annotations

from maze_lab.core.log_stats.writers import LogStatsWriter
from maze_lab.train.vector_env import EpochEpisodeStats


class WorkerEpisodeStats(EpochEpisodeStats):
    """Episode statistics collected from worker processes, written once per epoch.

    Stands where a trainer keeps its training vector env (``trainer.env``): it has the ``writers``,
    ``logging_prefix`` and ``write_epoch_stats`` the trainer base and the run layer use; workers' episodes arrive
    through :meth:`add`.

    :param logging_prefix: the prefix of the statistics (``train``).
    :param writers: where the epoch statistics go (default: the process-wide writers of ``setup_logging``).
    """

    def __init__(self, logging_prefix: str = "train", writers: list[LogStatsWriter] | None = None):
        super().__init__(logging_prefix, writers)
