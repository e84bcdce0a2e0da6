"""The env factory of a run: its configured (or given) env with its wrappers, monitoring and statistics; used to
build the envs of a run being trained (``RunContext``) and of a run loaded from disk (``load_run``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from maze_lab.core.utils.factory import ConfigurationError, Factory, TrustPolicy


def wrappers_in_run_dir(wrappers_cfg: Any, run_dir: str | Path) -> Any:
    """The wrappers config with each relative ``statistics_dump`` of an ObservationNormalizationWrapper made a path in
    the run directory: a run's normalization statistics belong to the run (Maze, run by Hydra in its output
    directory, keeps them there too), and a file in the working directory would be loaded by every later run
    started there, whatever its env. Absolute paths and ``None`` stay as they are."""
    if not isinstance(wrappers_cfg, Mapping):
        return wrappers_cfg
    from maze_lab.core.wrappers.observation_normalization.observation_normalization_wrapper import (
        ObservationNormalizationWrapper,
    )
    from maze_lab.core.wrappers.wrapper import resolve_wrapper

    out = {}
    for name, params in wrappers_cfg.items():
        dump = params.get("statistics_dump") if isinstance(params, Mapping) else None
        if isinstance(dump, str) and dump and not Path(dump).is_absolute():
            try:
                cls = resolve_wrapper(name)
            except ConfigurationError:
                cls = None  # wrap_env reports the unknown wrapper
            if cls is not None and issubclass(cls, ObservationNormalizationWrapper):
                params = {**params, "statistics_dump": str(Path(run_dir) / dump)}
        out[name] = params
    return out


class RunEnvFactory:
    """Builds one env of a run: the configured (or given) env, its wrappers, monitoring and statistics.

    :param log_dir: where the env's TSV event logs go (None: no event logs).
    :param trust: for a configuration read from disk: the allow-list of what it may instantiate (None: anything,
        for configurations of the caller's own).
    :param trust_config: the whole configuration, to name the key of a refused name.
    """

    def __init__(self, env_cfg: dict, wrappers_cfg: dict, user_factory: Callable | None, log_dir: str | None,
                 trust: TrustPolicy | None = None, trust_config: Mapping[str, Any] | None = None):
        self.env_cfg, self.wrappers_cfg, self.user_factory, self.log_dir = env_cfg, wrappers_cfg, user_factory, log_dir
        self.trust, self.trust_config = trust, trust_config

    def build_env(self) -> Any:
        """The env with its configured wrappers only."""
        if self.trust is not None:
            return self.trust.run(self._build_env, self.trust_config)
        return self._build_env()

    def _build_env(self) -> Any:
        from maze_lab.core.wrappers.wrapper import wrap_env

        env = self.user_factory() if self.user_factory is not None else Factory().instantiate(self.env_cfg)
        return wrap_env(env, self.wrappers_cfg)

    def __call__(self) -> Any:
        from maze_lab.core.log_stats.event_log import TSVEventLogWriter
        from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
        from maze_lab.core.wrappers.monitoring_wrapper import MazeEnvMonitoringWrapper

        env = MazeEnvMonitoringWrapper.wrap(self.build_env())
        writers = [TSVEventLogWriter(self.log_dir)] if self.log_dir is not None else []
        return LogStatsWrapper.wrap(env, event_log_writers=writers)
