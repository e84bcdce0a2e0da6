"""Imports every built-in wrapper so that the registry can resolve them by class name."""

from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.core.wrappers.monitoring_wrapper import MazeEnvMonitoringWrapper

__all__ = ["LogStatsWrapper", "MazeEnvMonitoringWrapper"]
