"""ObservationNormalizationWrapper: normalizes observations with estimated or given statistics."""

from __future__ import annotations

import copy
import inspect
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from maze_lab.core.env.structured_env import ActorID, StepKey
from maze_lab.core.utils.factory import ConfigurationError, _to_plain, instantiate_nested, locate
from maze_lab.core.wrappers.observation_normalization.normalization_strategies import (
    NORMALIZATION_STRATEGY_REGISTRY,
    ObservationNormalizationStrategy,
    StructuredStatisticsType,
)
from maze_lab.core.wrappers.observation_normalization.statistics_io import (
    check_statistics_path,
    load_normalization_statistics,
    save_normalization_statistics,
)
from maze_lab.core.wrappers.space_utils import check_config_keys, ordered_dict_space, require_dict_spaces
from maze_lab.core.wrappers.space_utils import resolve_registered_class as _resolve
from maze_lab.core.wrappers.wrapper import ObservationWrapper

_MANUAL_KEYS = ("strategy", "strategy_config", "statistics")


def resolve_normalization_strategy(name: str | type) -> type[ObservationNormalizationStrategy]:
    """A normalization strategy class from its class name, a dotted path or itself."""
    return _resolve(name, NORMALIZATION_STRATEGY_REGISTRY, ObservationNormalizationStrategy,
                    "normalization strategy")


class RandomSamplingPolicy:
    """Samples uniformly from private copies of the action spaces (the env's own generators stay untouched).

    :param action_spaces_dict: action space per policy key.
    :param seed: optional seed.
    """

    def __init__(self, action_spaces_dict: Mapping[StepKey, gym.spaces.Space], seed: int | None = None):
        self.action_spaces_dict = copy.deepcopy(dict(action_spaces_dict))
        self.seed(seed)

    def seed(self, seed: int | None) -> None:
        """Seed the samplers (each policy key gets its own derived seed)."""
        for i, space in enumerate(self.action_spaces_dict.values()):
            space.seed(None if seed is None else seed + i)

    def compute_action(self, observation: Any, actor_id: ActorID | StepKey | None = None, **_: Any) -> Any:
        """A random action of the acting policy key."""
        key = actor_id.step_key if isinstance(actor_id, ActorID) else actor_id
        if key is None:
            key = next(iter(self.action_spaces_dict))
        return self.action_spaces_dict[key].sample()


class ObservationNormalizationWrapper(ObservationWrapper):
    """Normalizes each Box observation with its strategy's statistics and adapts the observation spaces.

    Statistics come, in increasing priority, from ``default_statistics``, the dump file (if it exists), and the
    ``statistics`` of ``manual_config``. Observations still without statistics at the first reset get them
    estimated there: the wrapper steps the env below it ``n_samples`` times with ``sampling_policy`` (resetting
    with ``sampling_seed`` first, so every env of a run estimates the same statistics where the env is
    deterministic), then writes the dump. Statistics set before the first reset (``set_normalization_statistics``,
    a checkpoint, :func:`obtain_normalization_statistics`) skip the sampling. Observations that are not Box spaces
    (e.g. Discrete features) and those in ``exclude`` pass through unchanged. The observation spaces are the
    original ones until the statistics are known.

    :param default_strategy: the strategy class (name, dotted path or class) for observations without manual
        config, by default MeanZeroStdOneObservationNormalizationStrategy.
    :param default_strategy_config: strategy parameters ``clip_range`` and ``axis``.
    :param default_statistics: statistics for all observations, e.g. ``{"min": 0, "max": 255}``.
    :param statistics_dump: .json or .npz file the statistics are written to and loaded from (None: neither); in a
        run (RunContext, ``load_run``) a relative name is a file in the run directory.
    :param sampling_policy: the policy that collects observations for the estimate: an object with
        ``compute_action(observation, actor_id=...)``, a class path or a ``_target_`` config (given
        ``action_spaces_dict`` where it accepts it); None samples random actions.
    :param exclude: observations not to normalize (e.g. action masks).
    :param manual_config: per observation ``{"strategy": ..., "strategy_config": {...}, "statistics": {...}}``,
        each part optional; ``strategy_config`` updates the default config.
    :param n_samples: env steps sampled at the first reset to estimate missing statistics; None: no automatic
        estimate (then call :func:`obtain_normalization_statistics` or set statistics before the first reset).
    :param sampling_seed: seed of the sampling episodes and the sampling policy (None: unseeded).
    """

    # sampling_policy configs are built here with the action spaces, so wrap_env must not instantiate them
    instantiate_params: ClassVar[bool] = False

    def __init__(self, env: Any,
                 default_strategy: str | type = "MeanZeroStdOneObservationNormalizationStrategy",
                 default_strategy_config: Mapping[str, Any] | None = None,
                 default_statistics: Mapping[str, Any] | None = None,
                 statistics_dump: str | os.PathLike | None = "statistics.json",
                 sampling_policy: Any = None,
                 exclude: Sequence[str] | None = None,
                 manual_config: Mapping[str, Mapping[str, Any]] | None = None,
                 n_samples: int | None = 1000,
                 sampling_seed: int | None = 0):
        super().__init__(env)
        if n_samples is not None and (isinstance(n_samples, bool) or not isinstance(n_samples, int)
                                      or n_samples < 1):
            raise ValueError(f"ObservationNormalizationWrapper: n_samples must be a positive number of env steps or "
                             f"None, got {n_samples!r}")
        self.n_samples = n_samples
        self.sampling_seed = sampling_seed
        require_dict_spaces(env.observation_spaces_dict, "observation", "ObservationNormalizationWrapper")
        self.default_strategy = resolve_normalization_strategy(default_strategy)
        self.default_strategy_config = dict(_to_plain(default_strategy_config) or {})
        self.default_statistics = _to_plain(default_statistics)
        self.statistics_dump = None if statistics_dump is None else check_statistics_path(statistics_dump)
        self.exclude = list(_to_plain(exclude) or [])
        self.manual_config = {k: dict(v or {}) for k, v in (_to_plain(manual_config) or {}).items()}
        self.sampling_policy = self._build_sampling_policy(_to_plain(sampling_policy), env.action_spaces_dict)

        self._original_spaces: dict[StepKey, gym.spaces.Dict] = dict(env.observation_spaces_dict)
        all_spaces: dict[str, gym.spaces.Space] = {}
        for space in self._original_spaces.values():
            for name, sub in space.spaces.items():
                all_spaces.setdefault(name, sub)
        for name in self.exclude:
            if name not in all_spaces:
                raise ConfigurationError(f"ObservationNormalizationWrapper: exclude names unknown observation "
                                         f"'{name}'; observations: {sorted(all_spaces)}")
        for name, cfg in self.manual_config.items():
            where = f"ObservationNormalizationWrapper manual_config['{name}']"
            if name not in all_spaces:
                raise ConfigurationError(f"{where}: unknown observation; observations: {sorted(all_spaces)}")
            if not isinstance(all_spaces[name], gym.spaces.Box):
                raise ConfigurationError(f"{where}: only Box observations can be normalized, '{name}' is "
                                         f"{all_spaces[name]}")
            check_config_keys(cfg, [], _MANUAL_KEYS, where)

        self.loaded_stats: StructuredStatisticsType = {}
        if self.statistics_dump is not None and self.statistics_dump.exists():
            self.loaded_stats = load_normalization_statistics(self.statistics_dump)

        self._strategies: dict[str, ObservationNormalizationStrategy] = {}
        for name, space in all_spaces.items():
            if name in self.exclude or not isinstance(space, gym.spaces.Box):
                continue
            self._strategies[name] = self._build_strategy(name, space)
        self._collect = False
        self._collected: dict[str, list[np.ndarray]] = {}
        self._observation_spaces: dict[StepKey, gym.spaces.Dict] = {}
        self._update_spaces()

    # --- construction --------------------------------------------------------------------------------------
    def _build_strategy(self, name: str, space: gym.spaces.Box) -> ObservationNormalizationStrategy:
        manual = self.manual_config.get(name, {})
        cls = self.default_strategy
        if "strategy" in manual:
            try:
                cls = resolve_normalization_strategy(manual["strategy"])
            except ConfigurationError as err:
                raise ConfigurationError(f"ObservationNormalizationWrapper manual_config['{name}']: {err}") from err
        config = {**self.default_strategy_config, **dict(manual.get("strategy_config") or {})}
        try:
            strategy = cls(space, name=name, **config)
        except TypeError as err:
            raise ConfigurationError(f"ObservationNormalizationWrapper: {cls.__name__}({', '.join(config)}) for "
                                     f"observation '{name}' failed: {err}; valid parameters: clip_range, axis") from err
        statistics = self.default_statistics
        if name in self.loaded_stats:
            statistics = self.loaded_stats[name]
        if manual.get("statistics") is not None:
            statistics = manual["statistics"]
        if statistics is not None:
            strategy.set_statistics(statistics)
        return strategy

    @staticmethod
    def _build_sampling_policy(policy: Any, action_spaces_dict: Mapping[StepKey, gym.spaces.Space]) -> Any:
        if policy is None:
            return RandomSamplingPolicy(action_spaces_dict)
        if hasattr(policy, "compute_action") and not isinstance(policy, type):
            return policy
        if isinstance(policy, str):
            policy = locate(policy)
        if isinstance(policy, type):
            policy = {"_target_": policy}
        if isinstance(policy, Mapping):
            if "_target_" not in policy:
                raise ConfigurationError(f"ObservationNormalizationWrapper: a sampling_policy config needs a "
                                         f"'_target_'; got keys {sorted(policy)}")
            target = policy["_target_"]
            cls = locate(target) if isinstance(target, str) else target
            params = {k: instantiate_nested(v) for k, v in policy.items() if k != "_target_"}
            # called directly: the action spaces must reach the policy as they are (gym Dict spaces are Mappings
            # that nested instantiation would turn into plain dicts)
            if "action_spaces_dict" in inspect.signature(cls).parameters and "action_spaces_dict" not in params:
                params["action_spaces_dict"] = action_spaces_dict
            try:
                return cls(**params)
            except TypeError as err:
                raise ConfigurationError(f"ObservationNormalizationWrapper: sampling_policy "
                                         f"{getattr(cls, '__name__', cls)}({', '.join(params)}) failed: {err}") from err
        raise ConfigurationError(f"ObservationNormalizationWrapper: sampling_policy must have a compute_action "
                                 f"method, or be a class path or a _target_ config; got {policy!r}")

    def _update_spaces(self) -> None:
        for step_key, space in self._original_spaces.items():
            items = []
            for name, sub in space.spaces.items():
                strategy = self._strategies.get(name)
                if strategy is not None and strategy.is_initialized():
                    sub = strategy.normalized_space()
                items.append((name, sub))
            self._observation_spaces[step_key] = ordered_dict_space(items)

    # --- env interface ---------------------------------------------------------------------------------------
    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Observation spaces after normalization (the original ones until statistics are known)."""
        return self._observation_spaces

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Reset and return the normalized first observation; at the first reset with statistics missing, estimate
        them by sampling first (see the class docstring)."""
        if not self._collect and self.n_samples is not None and not self.has_all_statistics():
            from maze_lab.core.wrappers.observation_normalization.observation_normalization_utils import (
                estimate_observation_normalization_statistics,
            )

            estimate_observation_normalization_statistics(self, self.n_samples, seed=self.sampling_seed)
            if seed is None and self.sampling_seed is not None:
                # the sampling seeded the env: an unseeded reset must still start where a fresh env would, not in
                # the same state in every env of a run
                seed = int(np.random.SeedSequence().generate_state(1)[0])
        return super().reset(seed=seed, options=options)

    def observation(self, observation: dict) -> dict:
        """The normalized observation (while collecting: the observation unchanged, and recorded)."""
        if self._collect:
            for name in self._strategies.keys() & observation.keys():
                self._collected.setdefault(name, []).append(np.array(observation[name]))
            return observation
        out = dict(observation)
        for name, strategy in self._strategies.items():
            if name in out:
                if not strategy.is_initialized():
                    raise RuntimeError(
                        f"no normalization statistics for observation '{name}': give n_samples (env steps to "
                        f"sample at the first reset), run obtain_normalization_statistics(env, n_samples) or "
                        f"set_normalization_statistics(...) before the first reset, or give default_statistics or "
                        f"manual_config statistics")
                out[name] = strategy.normalize_and_process_value(out[name])
        return out

    def seed(self, seed: int | None) -> None:
        """Seed the sampling policy and the wrapped env."""
        if hasattr(self.sampling_policy, "seed"):
            self.sampling_policy.seed(seed)
        self.env.seed(seed)

    # --- statistics ------------------------------------------------------------------------------------------
    @property
    def strategies(self) -> dict[str, ObservationNormalizationStrategy]:
        """The normalization strategy of each normalized observation."""
        return dict(self._strategies)

    def has_all_statistics(self) -> bool:
        """Whether every normalized observation has statistics."""
        return all(s.is_initialized() for s in self._strategies.values())

    def set_observation_collection(self, status: bool) -> None:
        """Start (True) or stop (False, discarding what was collected) collecting raw observations."""
        self._collect = bool(status)
        if not status:
            self._collected = {}

    def estimate_statistics(self) -> None:
        """Estimate the missing statistics from the collected observations, update the spaces and write the dump."""
        for name, strategy in self._strategies.items():
            if not strategy.is_initialized():
                strategy.set_statistics(strategy.estimate_stats(self._collected.get(name, [])))
        self._update_spaces()
        self.dump_statistics()

    def get_normalization_statistics(self) -> StructuredStatisticsType:
        """``{observation: {statistic: array}}`` for every observation with statistics."""
        return {name: s.get_statistics() for name, s in self._strategies.items() if s.is_initialized()}

    get_statistics = get_normalization_statistics

    def set_normalization_statistics(self, statistics: Mapping[str, Mapping[str, Any]]) -> None:
        """Use the given statistics (e.g. estimated on another env); observations not named keep theirs."""
        unknown = sorted(set(statistics) - set(self._strategies))
        if unknown:
            raise KeyError(f"normalization statistics for unknown or unnormalized observations {unknown}; "
                           f"normalized observations: {sorted(self._strategies)}")
        for name, stats in statistics.items():
            self._strategies[name].set_statistics(stats)
        self._update_spaces()

    def dump_statistics(self, path: str | os.PathLike | None = None) -> Path | None:
        """Write the statistics to ``path`` or the ``statistics_dump`` file (nothing if both are None)."""
        target = path if path is not None else self.statistics_dump
        if target is None:
            return None
        return save_normalization_statistics(self.get_normalization_statistics(), target)
