"""Hyperparameter search with Optuna: ``maze-lab optimize --space ppo_cartpole`` and :func:`optimize`.

A search space is a YAML file of the config group ``search_space`` (``maze_lab/conf/search_space/<name>.yaml``, or
the same folder of a ``config_module``) or a path: the training configuration the trials start from, the study's
settings (direction, objective, number of trials, sampler, pruner) and one distribution per dotted config key.

Every trial is an ordinary maze-lab run directory, ``<study dir>/trial_<number>``, trained through
:class:`~maze_lab.run.run_context.RunContext` with the trial's values as overrides; its summary records the trial
(``optuna``: study, number, params, state). After each epoch the trial reports its evaluation reward to Optuna and
stops (a checkpoint of the current weights is written) when the pruner says so. The study is an SQLite file,
``<study dir>/study.db``, so running the same search again resumes it: the trials already finished are kept and only
the missing ones run, numbered on from the last.

Trials run one at a time in this process, in ``n_jobs`` local worker processes, or as Ray tasks (``backend="ray"``:
a local Ray started here, or a cluster given by ``address``). One process at a time uses the SQLite file: the driver
(this process) opens the study, and while trials run in workers it starts Optuna's gRPC storage proxy in a process of
its own (:mod:`maze_lab.run.optuna_proxy`, Optuna's public ``run_grpc_proxy_server``), which alone uses the file
until the trials have ended: the driver asks Optuna for each trial's values and tells it the result through the
proxy, and the workers report their per-epoch rewards and ask whether to prune through it. SQLite locks the whole
file on every write and, on a network file system, its locks cannot be trusted; with one process using the file no
write waits on another process's lock, and workers on other machines of a Ray cluster need no access to the file at
all. The proxy listens only on the address the workers reach the driver at (loopback unless Ray runs them on other
machines of a cluster, where it listens on this machine's address in the cluster's network, without
authentication, as Optuna's proxy does: run clusters on a network you trust).

Interrupted (Ctrl-C, or SIGTERM of ``maze-lab optimize``), the driver asks no further trial; the trials in flight
have their runs stopped through their run directories (a checkpoint of their current weights), their workers ended,
their runs recorded ``interrupted`` and their trials ``FAIL`` with ``interrupted`` (a resumed study runs them again);
:class:`~maze_lab.run.ray_tasks.RunsInterrupted`, a KeyboardInterrupt, says so. A trial run one at a time trains in
the driver's own process, and a worker process ends when its driver is gone: a driver killed outright (SIGKILL)
leaves no trial training, and its trials' runs read ``died``.

A search space and a study directory are untrusted input, as a run directory is (they are shared, downloaded,
copied from a colleague): before anything is composed or run, every ``_target_``, dotted name and Gymnasium
``module:EnvId`` that the space's ``overrides`` and choices hold is checked against the allow-list of run directories
(:class:`~maze_lab.core.utils.factory.TrustPolicy`: maze-lab's own classes and env factories, torch.nn modules,
Gymnasium spaces and env ids), plus the names the configuration composed without the space already uses, the
packages of ``config_module`` and what ``trust=`` / ``--trust`` adds. What the study directory holds (``study.db``
and its journal, the lock, ``search_space.yaml``, ``best_*.yaml``, the trial directories) must be a regular file (a
directory) inside it: a symlink leaving it, a FIFO, a device or a socket is refused with one line naming the path, as
is a ``study.db`` that is not an SQLite database or is damaged, and one that another process holds locked (after a
wait of :data:`DB_LOCK_WAIT_S`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import os
import re
import socket
import stat
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from maze_lab.core.utils.factory import ConfigurationError, TrustError, TrustPolicy, locate
from maze_lab.core.utils.log import get_logger

_log = get_logger(__name__)

SPACE_GROUP = "search_space"
"""The config group (folder) of search-space files."""

DISTRIBUTIONS = ("float", "int", "categorical")
SAMPLERS = {"tpe": ("seed", "n_startup_trials"), "random": ("seed",)}
PRUNERS = {"median": ("n_startup_trials", "n_warmup_steps", "interval_steps"),
           "threshold": ("lower", "upper", "n_warmup_steps", "interval_steps"),
           "none": ()}
OBJECTIVES = ("best_eval_reward", "last_eval_reward")
DIRECTIONS = ("maximize", "minimize")
_PARAM_FIELDS = {"float": ("type", "low", "high", "log", "step"), "int": ("type", "low", "high", "log", "step"),
                 "categorical": ("type", "choices")}
_SPACE_KEYS = ("experiment", "overrides", "study", "params")
_STUDY_KEYS = ("direction", "objective", "n_trials", "sampler", "pruner")
_FINISHED = ("COMPLETE", "PRUNED", "FAIL")
TRIAL_DIR = "trial_{:04d}"
"""The run directory of trial ``number`` inside the study directory."""
STUDY_DB = "study.db"
"""The study's SQLite file inside the study directory."""
DB_LOCK_WAIT_S = 3.0
"""How long opening a study waits for a ``study.db`` that another process holds locked before it says so."""
_TRIAL_DIR_NAME = re.compile(r"trial_\d{4,}")
_STUDY_FILES = (STUDY_DB, f"{STUDY_DB}-journal", f"{STUDY_DB}-wal", f"{STUDY_DB}-shm", ".optimize.lock",
                "search_space.yaml", "best_config.yaml", "best_params.yaml")
"""The files maze-lab (and SQLite) read or write in a study directory."""


# ---- the search space ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class ParamSpec:
    """One searched config key and its distribution."""

    key: str
    type: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: list[Any] | None = None

    def distribution(self) -> Any:
        """The Optuna distribution of this key."""
        import optuna

        if self.type == "float":
            return optuna.distributions.FloatDistribution(self.low, self.high, log=self.log, step=self.step)
        if self.type == "int":
            return optuna.distributions.IntDistribution(self.low, self.high, log=self.log, step=self.step or 1)
        return optuna.distributions.CategoricalDistribution(self.choices)

    def examples(self) -> list[Any]:
        """Values at the edges of the range (every choice), used to check the key against the configuration."""
        return list(self.choices) if self.type == "categorical" else [self.low, self.high]


@dataclasses.dataclass
class StudySettings:
    """How the study searches: direction of the objective, number of trials, sampler and pruner."""

    direction: str = "maximize"
    objective: str = "best_eval_reward"
    n_trials: int = 10
    sampler: dict[str, Any] = dataclasses.field(default_factory=lambda: {"type": "tpe", "seed": 0})
    pruner: dict[str, Any] = dataclasses.field(default_factory=lambda: {"type": "median"})


@dataclasses.dataclass
class SearchSpace:
    """A parsed search-space file."""

    name: str
    params: dict[str, ParamSpec]
    study: StudySettings
    overrides: dict[str, Any]
    experiment: str | None = None
    source: str = "<dict>"

    def distributions(self) -> dict[str, Any]:
        """Dotted key -> Optuna distribution."""
        return {key: spec.distribution() for key, spec in self.params.items()}

    def to_dict(self) -> dict[str, Any]:
        """The space as plain data (what ``search_space.yaml`` in the study directory holds)."""
        params = {k: {f: v for f, v in dataclasses.asdict(s).items() if f != "key" and v not in (None, False)}
                  for k, s in self.params.items()}
        return {"experiment": self.experiment, "overrides": dict(self.overrides),
                "study": dataclasses.asdict(self.study), "params": params}


def space_dirs(config_modules: list[str] | tuple[str, ...] = ()) -> list[Path]:
    """The ``search_space`` folders of the config search path (user config packages first)."""
    from maze_lab.run.config import config_dirs

    return [d / SPACE_GROUP for d in config_dirs(config_modules)]


def available_spaces(config_modules: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The names of the search-space files on the config search path."""
    return sorted({p.stem for d in space_dirs(config_modules) if d.is_dir() for p in d.glob("*.yaml")})


def _space_file(space: str | Path, config_modules: list[str]) -> Path:
    """The file of a search space given by name or path."""
    path = Path(space).expanduser()
    looks_like_path = path.suffix in (".yaml", ".yml") or len(path.parts) > 1
    if looks_like_path:
        if not path.is_file():
            raise ConfigurationError(f"search space file {path} does not exist; give a YAML file or the name of one "
                                     f"of {', '.join(available_spaces(config_modules)) or 'none'}")
        return path
    for d in space_dirs(config_modules):
        candidate = d / f"{space}.yaml"
        if candidate.is_file():
            return candidate
    raise ConfigurationError(f"unknown search space '{space}'; valid search spaces (config group {SPACE_GROUP}): "
                             f"{', '.join(available_spaces(config_modules)) or 'none'}, or the path of a YAML file")


def _number(where: str, field: str, value: Any, kind: str) -> float | int:
    """A range bound of the right type (YAML reads ``1e-4`` without a dot as text: such text is accepted)."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value) if kind == "float" else int(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{where}: '{field}' must be a number, got {value!r}")
    if kind == "int":
        if isinstance(value, float) and not value.is_integer():
            raise ConfigurationError(f"{where}: '{field}' of an int range must be a whole number, got {value!r}")
        return int(value)
    if not math.isfinite(value):
        raise ConfigurationError(f"{where}: '{field}' must be finite, got {value!r}")
    return float(value)


def _parse_param(key: str, spec: Any, source: str) -> ParamSpec:
    """One entry of ``params``, with its range checked."""
    where = f"search space {source}: params.{key}"
    if isinstance(spec, list):
        spec = {"type": "categorical", "choices": spec}  # a bare list is a choice
    if not isinstance(spec, Mapping):
        raise ConfigurationError(f"{where} must be a mapping such as {{type: float, low: 0.0001, high: 0.01, log: "
                                 f"true}}, {{type: int, low: 16, high: 64, step: 16}} or {{type: categorical, "
                                 f"choices: [a, b]}}, got {spec!r}")
    kind = spec.get("type")
    if kind not in DISTRIBUTIONS:
        raise ConfigurationError(f"{where}: unknown distribution type {kind!r}; valid types: "
                                 f"{', '.join(DISTRIBUTIONS)}")
    unknown = sorted(set(map(str, spec)) - set(_PARAM_FIELDS[kind]))
    if unknown:
        raise ConfigurationError(f"{where}: unknown field(s) {', '.join(unknown)} for type {kind}; valid fields: "
                                 f"{', '.join(_PARAM_FIELDS[kind])}")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ConfigurationError(f"{where}: 'choices' must be a non-empty list, got {choices!r}")
        bad = [c for c in choices if not (c is None or isinstance(c, bool | int | float | str))]
        if bad:
            raise ConfigurationError(f"{where}: choices must be numbers, strings, booleans or null (Optuna stores "
                                     f"them as such), got {bad[0]!r}")
        return ParamSpec(key, kind, choices=list(choices))
    for field in ("low", "high"):
        if field not in spec:
            raise ConfigurationError(f"{where}: a {kind} range needs 'low' and 'high'")
    low, high = _number(where, "low", spec["low"], kind), _number(where, "high", spec["high"], kind)
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise ConfigurationError(f"{where}: 'log' must be true or false, got {log!r}")
    step = spec.get("step")
    if step is not None:
        step = _number(where, "step", step, kind)
        if step <= 0:
            raise ConfigurationError(f"{where}: 'step' must be > 0, got {step}")
        if log and (kind == "float" or step != 1):
            raise ConfigurationError(f"{where}: 'step' and 'log: true' cannot be combined (Optuna samples a log "
                                     f"range continuously); drop one of them")
    if low > high or (kind == "float" and low == high):
        raise ConfigurationError(f"{where}: bad range: low ({low}) must be below high ({high})")
    if log and low <= 0:
        raise ConfigurationError(f"{where}: bad range: a log range needs low > 0, got low={low}")
    return ParamSpec(key, kind, low=low, high=high, log=log, step=step)


def _parse_study(study: Any, source: str) -> StudySettings:
    """The ``study`` section with every setting checked."""
    where = f"search space {source}: study"
    if study is None:
        study = {}
    if not isinstance(study, Mapping):
        raise ConfigurationError(f"{where} must be a mapping with {', '.join(_STUDY_KEYS)}, got {study!r}")
    unknown = sorted(set(map(str, study)) - set(_STUDY_KEYS))
    if unknown:
        raise ConfigurationError(f"{where}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(_STUDY_KEYS)}")
    out = StudySettings()
    direction = study.get("direction", out.direction)
    if direction not in DIRECTIONS:
        raise ConfigurationError(f"{where}.direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    objective = study.get("objective", out.objective)
    if objective not in OBJECTIVES:
        raise ConfigurationError(f"{where}.objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    n_trials = study.get("n_trials", out.n_trials)
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ConfigurationError(f"{where}.n_trials must be an int >= 1, got {n_trials!r}")
    sampler = _parse_choice(f"{where}.sampler", study.get("sampler", out.sampler), SAMPLERS)
    pruner = _parse_choice(f"{where}.pruner", study.get("pruner", out.pruner), PRUNERS)
    return StudySettings(direction=direction, objective=objective, n_trials=n_trials, sampler=sampler, pruner=pruner)


def _parse_choice(where: str, value: Any, valid: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """A ``{type: ..., setting: value}`` mapping (or a bare type name) among ``valid`` types and their settings."""
    if isinstance(value, str):
        value = {"type": value}
    if not isinstance(value, Mapping) or value.get("type") not in valid:
        got = value.get("type") if isinstance(value, Mapping) else value
        raise ConfigurationError(f"{where}: unknown type {got!r}; valid types: {', '.join(valid)}")
    kind = value["type"]
    unknown = sorted(set(map(str, value)) - {"type", *valid[kind]})
    if unknown:
        raise ConfigurationError(f"{where}: unknown setting(s) {', '.join(unknown)} for type {kind}; valid "
                                 f"settings: {', '.join(valid[kind]) or 'none'}")
    for key, setting in value.items():
        if key == "type" or setting is None:
            continue
        is_int = key in ("seed", "n_startup_trials", "n_warmup_steps", "interval_steps")
        ok = isinstance(setting, int) and setting >= (1 if key == "interval_steps" else 0) if is_int else \
            isinstance(setting, int | float)
        if isinstance(setting, bool) or not ok:
            raise ConfigurationError(f"{where}.{key} must be {'an int >= 0' if is_int else 'a number'}, got "
                                     f"{setting!r}")
    return dict(value)


def load_search_space(space: str | Path | Mapping[str, Any] | SearchSpace,
                      config_modules: list[str] | tuple[str, ...] = ()) -> SearchSpace:
    """Read and check a search space: a name of the ``search_space`` group, a YAML path, or the same as a dict.

    The ranges, distribution types and study settings are checked here; the keys against the training configuration
    by :func:`check_space_keys`.
    """
    if isinstance(space, SearchSpace):
        return space
    if isinstance(space, Mapping):
        data, name, source = dict(space), str(space.get("name", "search")), "<dict>"
    else:
        path = _space_file(space, list(config_modules))
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as err:
            raise ConfigurationError(f"search space {path} is not valid YAML: {' '.join(str(err).split())}") from None
        name, source = path.stem, str(path)
    if not isinstance(data, Mapping):
        raise ConfigurationError(f"search space {source} must be a mapping with {', '.join(_SPACE_KEYS)}")
    unknown = sorted(set(map(str, data)) - {*_SPACE_KEYS, "name"})
    if unknown:
        raise ConfigurationError(f"search space {source}: unknown key(s) {', '.join(unknown)}; valid keys: "
                                 f"{', '.join(_SPACE_KEYS)}")
    params = data.get("params")
    if not isinstance(params, Mapping) or not params:
        raise ConfigurationError(f"search space {source}: 'params' must map dotted config keys to distributions, "
                                 f"e.g. algorithm.lr: {{type: float, low: 0.0001, high: 0.003, log: true}}")
    overrides = data.get("overrides") or {}
    if not isinstance(overrides, Mapping):
        raise ConfigurationError(f"search space {source}: 'overrides' must map config keys to values, got "
                                 f"{overrides!r}")
    experiment = data.get("experiment")
    if experiment is not None and not isinstance(experiment, str):
        raise ConfigurationError(f"search space {source}: 'experiment' must be the name of an experiment file")
    return SearchSpace(name=name, params={str(k): _parse_param(str(k), v, source) for k, v in params.items()},
                       study=_parse_study(data.get("study"), source), overrides=dict(overrides),
                       experiment=experiment, source=source)


def check_space_keys(space: SearchSpace, base: DictConfig, config_modules: list[str] | tuple[str, ...] = ()) -> None:
    """Check every searched key against the composed base configuration, as overrides are checked: an unknown key
    lists the valid keys, a value of the wrong type names the expected one; both ends of each range (every choice)
    must make a valid configuration."""
    from maze_lab.run.config import GROUPS, apply_override, available_options, validate_config

    options = available_options(config_modules)
    for key, spec in space.params.items():
        where = f"search space {space.source}: params.{key}"
        if key in GROUPS:  # a choice between options of a config group (algorithm: [ppo, a2c])
            bad = [c for c in spec.examples() if c not in options[key]]
            if spec.type != "categorical" or bad:
                raise ConfigurationError(f"{where}: a config group is searched with choices among its options "
                                         f"({', '.join(options[key])}), got {bad or spec.type}")
            continue
        for value in spec.examples():
            cfg = copy.deepcopy(base)
            try:
                apply_override(cfg, key, value)
                if key.split(".", 1)[0] in ("algorithm", "runner", "n_epochs", "torch_threads"):
                    validate_config(cfg)
            except ConfigurationError as err:
                raise ConfigurationError(f"{where}: {err}") from None


# ---- what a search space may name -----------------------------------------------------------------------------------
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
"""A dotted Python name (``package.module.Name``): what maze-lab's configuration resolves with ``locate``."""
_ENV_ID_MODULE = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):\S")
"""A Gymnasium env id ``module:EnvId``: Gymnasium imports ``module``."""
_SPACE_ALLOWED = "maze-lab's own classes and env factories, torch.nn modules, Gymnasium spaces and env ids"


class SearchSpaceTrustError(TrustError):
    """A search space names something off the allow-list (see :func:`check_space_trust`); nothing of it was imported
    or run. ``source`` is the file, ``key`` the key in it (``overrides.env._target_``), ``target`` the name."""

    def _message(self) -> str:
        message = (f"search space {self.source}: {self.key} = '{self.target}' was refused: {self.reason}. A search "
                   f"space (and a study directory) may name only {_SPACE_ALLOWED}")
        if not self.allowable:
            return message + "; this name cannot be allowed"
        name = self.target.split(":", 1)[0].split(".", 1)[0]
        return (message + f". If you trust this search space, allow it with `maze-lab optimize --trust {name}` or "
                          f"optimize(..., trust=['{name}'])")

    def with_key(self, key: str | None) -> SearchSpaceTrustError:
        return SearchSpaceTrustError(self.target, self.reason, self.source, key, self.how_to_allow, self.allowable)


def _importable(name: str) -> bool:
    """Whether the first part of a dotted name is an importable module (nothing is imported to find out)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name.split(".", 1)[0]) is not None
    except (ImportError, ValueError):
        return True  # something of that name is there: check it


def space_names(space: SearchSpace) -> Iterator[tuple[str, str, str]]:
    """``(key, name, kind)`` of every name a search space holds in its ``overrides`` and categorical choices: kind
    ``target`` (a ``_target_`` value), ``name`` (a dotted name whose package is importable, as a value or as a key of
    a mapping, e.g. a wrapper) or ``env id`` (a Gymnasium id ``module:EnvId`` whose module is importable)."""

    def walk(value: Any, key: str) -> Iterator[tuple[str, str, str]]:
        if isinstance(value, Mapping):
            for k, v in value.items():
                if isinstance(k, str) and _DOTTED_NAME.fullmatch(k) and _importable(k):
                    yield f"{key}.{k}", k, "name"
                yield from walk(v, f"{key}.{k}")
        elif isinstance(value, list | tuple):
            for i, v in enumerate(value):
                yield from walk(v, f"{key}[{i}]")
        elif isinstance(value, str):
            if key.rsplit(".", 1)[-1] == "_target_":
                yield key, value, "target"
            elif _DOTTED_NAME.fullmatch(value):
                if _importable(value):
                    yield key, value, "name"
            else:
                env_id = _ENV_ID_MODULE.match(value)
                if env_id is not None and _importable(env_id.group(1)):
                    yield key, value, "env id"

    for key, value in space.overrides.items():
        yield from walk(value, f"overrides.{key}")
    for key, spec in space.params.items():
        for choice in spec.choices or []:
            yield from walk(choice, f"params.{key}")


def _refusal(policy: TrustPolicy, name: str, kind: str) -> TrustError | None:
    """The refusal of one name (None: allowed, or nothing there to import: the configuration reports that)."""
    try:
        if kind == "env id":
            module = name.split(":", 1)[0]
            try:
                policy.check_path(module)  # Gymnasium imports the module itself
            except TrustError as err:
                raise TrustError(name, f"Gymnasium would import the module '{module}' for this env id, and "
                                       f"{err.reason}", allowable=err.allowable) from None
        else:
            policy.run(lambda: locate(name))
    except TrustError as err:
        return err
    except (ConfigurationError, ImportError):
        return None
    return None


def check_space_trust(space: SearchSpace, trust: list[str] | tuple[str, ...] | str | None = None,
                      config_modules: list[str] | tuple[str, ...] = (),
                      own_names: Callable[[], list[str]] | None = None) -> None:
    """Refuse a search space that names anything off the allow-list of run directories, before anything of it is
    imported or run: every ``_target_``, dotted name and Gymnasium ``module:EnvId`` in its ``overrides`` and choices.

    Trusted besides the allow-list: ``trust`` (modules or dotted names), the packages of ``config_modules``, and
    ``own_names()``: the names of the configuration the trials start from without this space (asked for only where
    a name would be refused otherwise).

    :raises SearchSpaceTrustError: one line naming the file, the key, the name and how to allow it.
    """
    found = list(space_names(space))
    if not found:
        return
    policy = TrustPolicy(trust, source=space.source, how_to_allow=None)
    policy = policy.extended([m.split(".", 1)[0] for m in config_modules])
    extended = False
    for key, name, kind in found:
        refused = _refusal(policy, name, kind)
        if refused is not None and refused.allowable and own_names is not None and not extended:
            policy, extended = policy.extended(own_names()), True
            refused = _refusal(policy, name, kind)
        if refused is not None:
            raise SearchSpaceTrustError(refused.target, refused.reason, space.source, key,
                                        allowable=refused.allowable) from None


def _config_names(config: Any) -> Iterator[str]:
    """Every ``_target_`` value and dotted name in a composed configuration (plain containers)."""
    if isinstance(config, Mapping):
        for k, v in config.items():
            if isinstance(k, str) and _DOTTED_NAME.fullmatch(k):
                yield k
            if k == "_target_" and isinstance(v, str):
                yield v
            else:
                yield from _config_names(v)
    elif isinstance(config, list):
        for v in config:
            yield from _config_names(v)
    elif isinstance(config, str) and _DOTTED_NAME.fullmatch(config):
        yield config


# ---- study construction --------------------------------------------------------------------------------------------
def make_sampler(settings: dict[str, Any], seed_offset: int = 0, parallel: bool = False) -> Any:
    """The Optuna sampler of ``study.sampler``; a resumed study draws from ``seed + seed_offset``, not the values of
    its first trials again. With trials in ``parallel``, TPE counts the running ones as poor (constant liar), so that
    trials started together do not get near-identical values."""
    import optuna

    kwargs = {k: v for k, v in settings.items() if k != "type" and v is not None}
    if "seed" in kwargs:
        kwargs["seed"] = int(kwargs["seed"]) + seed_offset
    if settings["type"] == "random":
        return optuna.samplers.RandomSampler(**kwargs)
    with warnings.catch_warnings():  # constant_liar is marked experimental in Optuna
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(**kwargs, constant_liar=parallel)


def make_pruner(settings: dict[str, Any]) -> Any:
    """The Optuna pruner of ``study.pruner`` (it judges the evaluation reward after each epoch)."""
    import optuna

    kwargs = {k: v for k, v in settings.items() if k != "type" and v is not None}
    if settings["type"] == "median":
        return optuna.pruners.MedianPruner(**kwargs)
    if settings["type"] == "threshold":
        return optuna.pruners.ThresholdPruner(**kwargs)
    return optuna.pruners.NopPruner()


def study_storage(study_dir: Path) -> Any:
    """The study's SQLite storage (Optuna's RDB storage with its in-process cache)."""
    import optuna

    url = f"sqlite:///{(study_dir / STUDY_DB).resolve()}"
    # one process opens the file (see the module docstring); the timeout covers the driver's own threads
    return optuna.storages.get_storage(optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}}))


def _study_entry(study_dir: Path, name: str, what: str, directory: bool = False) -> Path:
    """``study_dir/name`` where it is missing, or a regular file (``directory``: a directory) whose real path lies
    inside the study directory; anything else (a symlink leaving it, a FIFO, a device, a socket) is refused."""
    from maze_lab.core.utils.safe_files import UnsafeFileError, check_inside, file_kind

    path = study_dir / name
    if not os.path.lexists(path):
        return path
    todo = "move it away or give another study_dir"
    try:
        check_inside(path, study_dir, what=what)
        info = os.stat(path)
    except UnsafeFileError as err:
        raise ConfigurationError(f"{' '.join(str(err).split())}; {todo}") from None
    except FileNotFoundError:
        return path  # a symlink to a file of the study directory that is not there yet: it is made there
    except OSError as err:
        raise ConfigurationError(f"{path} cannot be used as the study's {what}: {err.strerror or err}; {todo}") \
            from None
    expected = "directory" if directory else "regular file"
    if (stat.S_ISDIR if directory else stat.S_ISREG)(info.st_mode):
        return path
    raise ConfigurationError(f"{path} is a {file_kind(info.st_mode)}, not a {expected}: maze-lab reads and writes "
                             f"the study's {what} only as a {expected} inside the study directory; {todo}")


def _study_directory(study_dir: Path) -> Path:
    """The study directory (made where missing, resolved) with every file maze-lab or SQLite reads or writes there,
    and every trial directory, checked by :func:`_study_entry`."""
    from maze_lab.core.utils.safe_files import UnsafeFileError, check_write_dir

    try:
        study_dir = check_write_dir(study_dir, what="study directory").resolve()
    except UnsafeFileError as err:
        raise ConfigurationError(f"{' '.join(str(err).split())}; give another study_dir") from None
    whats = {STUDY_DB: "database", ".optimize.lock": "lock file"}
    for name in _STUDY_FILES:
        _study_entry(study_dir, name, whats.get(name, "journal" if name.startswith(STUDY_DB) else name))
    for entry in sorted(os.listdir(study_dir)):
        if _TRIAL_DIR_NAME.fullmatch(entry):
            _study_entry(study_dir, entry, "trial directory", directory=True)
    return study_dir


def _db_refusal(path: Path, err: BaseException) -> ConfigurationError:
    """One line for a ``study.db`` that cannot be used: locked by another process, or not a (sound) database."""
    cause = " ".join(str(getattr(err, "orig", None) or err).split()) or type(err).__name__
    if "locked" in cause or "busy" in cause:
        return ConfigurationError(f"{path}: the study database is locked: another process holds it (it was still "
                                  f"locked after {DB_LOCK_WAIT_S:g} s); end the program that has the study open "
                                  f"(another optimize, a script or an Optuna dashboard) and run again, or give "
                                  f"another study_dir")
    return ConfigurationError(f"{path} cannot be read as the study's database ({cause}): it is damaged, truncated "
                              f"or not an Optuna study; move it away (a new study then starts there) or give "
                              f"another study_dir")


def _check_study_db(path: Path) -> None:
    """Refuse a ``study.db`` that is not a sound SQLite database, or that another process holds locked (after
    :data:`DB_LOCK_WAIT_S`), before Optuna opens it (it would wait for a minute and fail with a long traceback)."""
    import sqlite3

    if not path.exists() or path.stat().st_size == 0:  # a regular file (checked): a new study starts in it
        return
    try:
        with contextlib.closing(sqlite3.connect(str(path), timeout=DB_LOCK_WAIT_S, isolation_level=None)) as db:
            db.execute("BEGIN IMMEDIATE")  # the write lock Optuna needs: waits DB_LOCK_WAIT_S at most
            try:
                problems = [row[0] for row in db.execute("PRAGMA quick_check(1)")]
            finally:
                db.execute("ROLLBACK")
    except sqlite3.Error as err:
        raise _db_refusal(path, err) from None
    if problems != ["ok"]:
        raise _db_refusal(path, ValueError(problems[0] if problems else "no answer to its integrity check"))


def _open_study(study_dir: Path, study_name: str, spec: SearchSpace) -> tuple[Any, Any]:
    """The study's storage and study (made where new); a damaged or locked ``study.db`` is refused in one line."""
    import optuna
    import sqlalchemy.exc

    path = study_dir / STUDY_DB
    _check_study_db(path)
    try:
        storage = study_storage(study_dir)
        study = optuna.create_study(study_name=study_name, storage=storage, direction=spec.study.direction,
                                    pruner=make_pruner(spec.study.pruner), load_if_exists=True)
    except (sqlalchemy.exc.DatabaseError, optuna.exceptions.StorageInternalError) as err:
        raise _db_refusal(path, err) from err
    return storage, study


@contextlib.contextmanager
def _study_lock(study_dir: Path) -> Iterator[None]:
    """Hold the study directory for this driver: a second ``optimize`` on the same study is refused, so that trials
    left ``RUNNING`` by an interrupted driver can safely be marked failed."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock
        yield
        return
    with open(_study_entry(study_dir, ".optimize.lock", "lock file"), "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ConfigurationError(f"another maze-lab optimize is running on the study in {study_dir}; wait for it "
                                     f"or give another study_dir") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ---- one trial -----------------------------------------------------------------------------------------------------
def run_trial(job: dict[str, Any], trial: Any = None) -> dict[str, Any]:
    """Train one trial as a maze-lab run and return its result (``state``: complete, pruned or fail).

    :param job: what the driver sends: the run's components, overrides (with the trial's values), experiment,
        config modules, run directory, the trial's number, id and params, and where the study is served.
    :param trial: the Optuna trial in this process (trials run by the driver itself); None: the trial is reached
        through the driver's gRPC storage proxy at ``job["proxy"]``.
    """
    from maze_lab.run.run_context import RunContext
    from maze_lab.run.run_dir import RunDirectory

    result: dict[str, Any] = {"number": job["number"], "state": "fail", "value": None, "epoch": None,
                              "run_dir": job["run_dir"], "error": None}
    rc = None
    try:
        if trial is None:
            trial = _proxy_trial(job)
        rc = RunContext(**job["components"], overrides={**job["overrides"], **job["params"]},
                        experiment=job["experiment"], config_module=job["config_modules"], run_dir=job["run_dir"],
                        silent=True, trust=job.get("trust") or None)
        run_dir = RunDirectory(rc.run_dir)
        info = {"study": job["study_name"], "study_dir": job["study_dir"], "trial": job["number"],
                "params": job["params"], "state": "running", "host": socket.gethostname(), "pid": os.getpid()}
        run_dir.write_summary(optuna=info)
        pruned: dict[str, Any] = {}

        def report(trainer: Any, _stats: Any) -> None:
            """After each epoch: the evaluation reward to Optuna; stop the run where the pruner says so."""
            value = trainer.last_eval_reward
            if value is None or not math.isfinite(value):
                return
            trial.report(float(value), int(trainer.epoch))
            last = getattr(trainer.config, "n_epochs", 0)
            if last and trainer.epoch >= last:
                return  # the trial has trained its whole budget: it completes, whatever the pruner would say
            if trial.should_prune():
                pruned.update(epoch=int(trainer.epoch), value=float(value))
                trainer.request_stop()

        rc.trainer.callbacks.append(report)
        rc.train()
        summary = run_dir.read_summary()
        result["epoch"] = summary.get("epoch")
        if pruned:
            result.update(state="pruned", value=pruned["value"])
            run_dir.write_summary(optuna={**info, "state": "pruned"},
                                  stop_reason=f"pruned by Optuna after epoch {pruned['epoch']} (eval reward "
                                              f"{pruned['value']:g})")
            return result
        value = summary.get(job["objective"])
        if value is None or not math.isfinite(float(value)):
            raise RuntimeError(f"the run recorded no {job['objective']} (it needs an evaluation after each epoch; "
                               f"algorithm.eval_repeats must be > 0)")
        result.update(state="complete", value=float(value))
        run_dir.write_summary(optuna={**info, "state": "complete", "value": float(value)})
    except Exception as err:  # noqa: BLE001 - a failed trial is recorded as failed; the study goes on
        result["error"] = " ".join(f"{type(err).__name__}: {err}".split())[:2000]
        result["traceback"] = "".join(traceback.format_exception(err))[-5000:]
        if rc is not None and rc.runs:
            with contextlib.suppress(Exception):
                RunDirectory(rc.runs[0].run_directory.path).write_summary(
                    optuna={"study": job["study_name"], "study_dir": job["study_dir"], "trial": job["number"],
                            "params": job["params"], "state": "fail", "error": result["error"]})
    finally:
        if rc is not None:
            with contextlib.suppress(Exception):
                rc.close()
        if job.get("proxy") and trial is not None:
            with contextlib.suppress(Exception):
                trial.storage.close()  # the worker's channel to the proxy (worker processes take further trials)
    return result


def _proxy_trial(job: dict[str, Any]) -> Any:
    """The trial of ``job`` reached through the driver's gRPC storage proxy (pruner as the study's)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    host, port = job["proxy"]
    with warnings.catch_warnings():  # experimental since Optuna 4.2: the warning says nothing to maze-lab's users
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = optuna.storages.GrpcStorageProxy(host=host, port=port)
    # the sampler is never asked here (the driver sampled the values); a random one costs nothing to build
    study = optuna.load_study(study_name=job["study_name"], storage=storage,
                              sampler=optuna.samplers.RandomSampler(), pruner=make_pruner(job["pruner"]))
    return optuna.trial.Trial(study, job["trial_id"])


def _trial_in_worker(job: dict[str, Any]) -> dict[str, Any]:
    """Entry point of worker processes and Ray tasks: one torch thread (trials share the machine)."""
    import torch

    torch.set_num_threads(1)
    return run_trial(job)


# ---- executing trials ----------------------------------------------------------------------------------------------
def connect_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Connect to Ray the way all of maze-lab does (:func:`maze_lab.distributed.ray_runtime.ensure_ray`: an
    initialised Ray is reused, else ``address``, else a fresh local Ray with ``num_cpus``); returns whether Ray was
    started here (and is to be shut down by the caller). A cluster that cannot be reached or joined is a
    ConfigurationError."""
    from maze_lab.distributed.ray_runtime import ensure_ray

    return ensure_ray(address, num_cpus=num_cpus, setting="--address")


def _shutdown_ray() -> None:
    import ray

    ray.shutdown()


class _Executor:
    """Runs trial jobs inline, in worker processes or as Ray tasks; results come back as futures."""

    def __init__(self, backend: str, n_jobs: int, address: str | None):
        self.backend = backend
        self.n_jobs = n_jobs
        self.pool: Any = None
        self._ray_started = False
        self._address = address
        self._remote: Any = None
        self._refs: list[Any] = []
        if backend == "ray":
            import ray

            self._ray_started = connect_ray(address, num_cpus=max(n_jobs, 1))
            # a failed trial is a result, not a retry; one CPU per trial
            self._remote = ray.remote(num_cpus=1, max_retries=0)(_trial_in_worker)
        elif n_jobs > 1:
            from maze_lab.run.ray_tasks import WorkerProcesses

            # a trial goes to a worker only when one is free, and the workers end with this process
            self.pool = WorkerProcesses()

    @property
    def remote(self) -> bool:
        """Whether trials run outside this process (and reach the study through the proxy)."""
        return self.backend == "ray" or self.pool is not None

    @property
    def proxy_host(self) -> str:
        """The address the trials reach this process at: loopback unless Ray runs them on other machines."""
        if self.backend != "ray":
            return "127.0.0.1"
        import ray

        if ray.util.client.ray.is_connected():
            # Ray Client (ray://head:10001): the tasks run on the cluster's machines; they reach this one at the
            # address it reaches the head from (the head must be able to connect back)
            address = self._address or os.environ.get("RAY_ADDRESS", "")
            head = address.split("://", 1)[-1].rsplit(":", 1)[0]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((head, 10001))
                return probe.getsockname()[0]
        here = ray.util.get_node_ip_address()
        nodes = {n.get("NodeManagerAddress") for n in ray.nodes() if n.get("Alive")}
        return "127.0.0.1" if nodes <= {here} else here

    def submit(self, job: dict[str, Any], trial: Any) -> Any:
        from concurrent.futures import Future

        if self.backend == "ray":
            ref = self._remote.remote(job)
            self._refs.append(ref)
            return ref.future()
        if self.pool is not None:
            return self.pool.submit(_trial_in_worker, job)  # a worker that died is replaced by a fresh one
        future: Future = Future()
        future.set_result(run_trial(job, trial))
        return future

    def kill(self) -> None:
        """End the trials in flight at once: their worker processes (with what they started) or Ray tasks."""
        if self.pool is not None:
            self.pool.kill()
        if self._refs:
            import ray

            for ref in self._refs:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            with contextlib.suppress(Exception):  # the cancelled tasks' workers are gone once their refs resolve
                ray.wait(self._refs, num_returns=len(self._refs), timeout=5)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
        if self._ray_started:
            import ray

            ray.shutdown()


# ---- the study -----------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class OptimizeResult:
    """What :func:`optimize` returns: the study, the best trial's values and the files written."""

    study: Any
    study_dir: Path
    table: Any
    """One row per trial: number, state, value, the searched keys, epochs, run directory."""
    best_params: dict[str, Any] | None
    best_value: float | None
    best_trial: int | None
    best_config_path: Path | None
    best_params_path: Path | None
    ran: list[int]
    """The numbers of the trials this call ran."""

    @property
    def run_dirs(self) -> list[Path]:
        """The run directories of all trials of the study (for RunComparison)."""
        return [Path(p) for p in self.table["run_dir"] if isinstance(p, str) and Path(p).is_dir()]


def default_study_dir(cfg: DictConfig, space_name: str) -> Path:
    """``<log_base_dir>/<experiment_name>/optimize-<space name>``."""
    return Path(str(cfg.log_base_dir)) / str(cfg.experiment_name) / f"optimize-{space_name}"


def optimize(space: str | Path | Mapping[str, Any] | SearchSpace, overrides: Mapping[str, Any] | None = None,
             n_trials: int | None = None, n_jobs: int = 1, backend: str = "local",
             study_dir: str | Path | None = None, address: str | None = None, experiment: str | None = None,
             config_module: str | list[str] | None = None, quiet: bool = False,
             trust: list[str] | tuple[str, ...] | str | None = None) -> OptimizeResult:
    """Search hyperparameters with Optuna; every trial is a maze-lab run under the study directory.

    :param space: a search space of the ``search_space`` config group (``"ppo_cartpole"``), a YAML path, or a dict
        with ``params``, ``study``, ``overrides`` and ``experiment`` as such a file has them.
    :param overrides: config overrides of every trial (``{"env.name": "CartPole-v1", "n_epochs": 3}``), on top of
        the space's own; a group name with an option name selects that option.
    :param n_trials: the number of trials the study should hold (default: the space's ``study.n_trials``); a
        resumed study runs only the missing ones.
    :param n_jobs: trials run at the same time (local worker processes, or Ray tasks in flight).
    :param backend: ``"local"`` (this process, or ``n_jobs`` worker processes) or ``"ray"`` (Ray tasks; an
        initialised Ray is used, else ``address``, else a local Ray is started and shut down at the end).
    :param study_dir: where the study lives (default ``<log_base_dir>/<experiment_name>/optimize-<space name>``); a
        directory holding a study resumes it.
    :param address: with ``backend="ray"``: the Ray cluster (``ray://host:10001`` or ``auto``).
    :param experiment: an experiment file (replaces the space's).
    :param config_module: importable package(s) with your own config groups (and ``search_space`` files).
    :param quiet: print nothing (otherwise one line per trial and the table of trials at the end).
    :param trust: modules or dotted names of your own that the search space may name (``["my_project"]``); without
        it a search space names only what a run directory may (see :func:`check_space_trust`). Resuming from a run
        (``input_dir``) trusts them too.
    :raises SearchSpaceTrustError: the search space names something off the allow-list (nothing ran).
    :raises ConfigurationError: a bad search space or setting, or a study directory whose files are not regular files
        inside it, whose ``study.db`` is damaged or held locked by another process.
    """
    from maze_lab.run.config import GROUPS, compose_config, describe_run, training_plan

    if backend not in ("local", "ray"):
        raise ConfigurationError(f"backend must be 'local' or 'ray', got {backend!r}")
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1:
        raise ConfigurationError(f"n_jobs must be an int >= 1, got {n_jobs!r}")
    if n_trials is not None and (isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1):
        raise ConfigurationError(f"n_trials must be an int >= 1, got {n_trials!r}")
    config_modules = [config_module] if isinstance(config_module, str) else list(config_module or [])
    spec = load_search_space(space, config_modules)
    merged = {**spec.overrides, **dict(overrides or {})}
    components = {k: merged.pop(k) for k in list(merged) if k in GROUPS and isinstance(merged[k], str)}
    named = merged.pop("experiment", None)  # experiment=NAME among the overrides selects the file, as in train
    experiment = experiment or named or spec.experiment

    def own_names() -> list[str]:
        """The names of the configuration without the space's own keys (its option and experiment files are the
        config groups' files): what the trials would use anyway."""
        own = {k: v for k, v in dict(overrides or {}).items() if k != "experiment" and k in merged}
        try:
            cfg = compose_config(components, own, experiment, config_modules)
        except ConfigurationError:
            return []
        return list(dict.fromkeys(_config_names(OmegaConf.to_container(cfg, resolve=True))))

    # before anything of the space is composed (composing imports an algorithm's _target_) or run
    check_space_trust(spec, trust, config_modules, own_names)
    base = compose_config(components, merged, experiment, config_modules)
    check_space_keys(spec, base, config_modules)
    target = n_trials if n_trials is not None else spec.study.n_trials
    study_path = Path(study_dir) if study_dir is not None else default_study_dir(base, spec.name)
    # Ray first: a cluster that cannot be reached is reported before a study directory is made
    ray_started = connect_ray(address, num_cpus=max(n_jobs, 1)) if backend == "ray" else False
    with contextlib.ExitStack() as stack:
        if ray_started:  # started here: shut down at the end (an initialised Ray is the caller's)
            stack.callback(_shutdown_ray)
        study_path = _study_directory(study_path)
        say = (lambda *a, **k: None) if quiet else _say_above_bar  # noqa: E731

        with _study_lock(study_path):
            study_name = f"optimize-{spec.name}"
            storage, study = _open_study(study_path, study_name, spec)
            if study.direction.name.lower() != spec.study.direction:
                raise ConfigurationError(f"the study in {study_path} was made with direction "
                                         f"{study.direction.name.lower()}; this search space asks for "
                                         f"{spec.study.direction}: use another study_dir")
            _note_space(study, spec, study_path, say)
            _fail_stale_trials(study, say)
            done = [t for t in study.get_trials(deepcopy=False) if t.state.name in _FINISHED
                    and not t.user_attrs.get("interrupted")]
            study.sampler = make_sampler(spec.study.sampler, seed_offset=len(study.get_trials(deepcopy=False)),
                                         parallel=n_jobs > 1)
            missing = max(0, target - len(done))
            mode = (f"{n_jobs} Ray task(s) at a time" if backend == "ray" else
                    f"{n_jobs} worker process(es)" if n_jobs > 1 else "one at a time in this process")
            say(f"maze-lab optimize: study {study_name} in {study_path}: {target} trials wanted, {len(done)} finished, "
                f"{missing} to run ({mode})")
            say(f"maze-lab optimize: each trial: {describe_run(base)}, {training_plan(base)}; sampled: "
                f"{', '.join(spec.params)}")
            job_base = {"components": components, "overrides": merged, "experiment": experiment,
                        "config_modules": config_modules, "study_name": study_name, "study_dir": str(study_path),
                        "objective": spec.study.objective, "pruner": spec.study.pruner,
                        "trust": [trust] if isinstance(trust, str) else list(trust or [])}
            ran = _run_trials(study, spec, missing, n_jobs, backend, address, study_path, job_base, say) \
                if missing else []
            result = _finish(study, spec, study_path, ran)
    if not quiet:
        print(format_table(result.table), flush=True)
        if result.best_trial is not None:
            print(f"maze-lab optimize: best trial {result.best_trial} ({spec.study.objective} {result.best_value:g}): "
                  f"{result.best_params}; config {result.best_config_path}", flush=True)
        else:
            print("maze-lab optimize: no trial completed; no best config written", flush=True)
    return result


def _note_space(study: Any, spec: SearchSpace, study_dir: Path, say: Any) -> None:
    """Record the search space with the study (and in ``search_space.yaml``); warn where a resumed study searched
    another space."""
    data = json.loads(json.dumps(spec.to_dict(), default=str))
    earlier = study.user_attrs.get("search_space")  # read back from study.db: data, compared only
    if isinstance(earlier, dict) and earlier.get("params") != data["params"]:
        _log.warning(f"the study in {study_dir} was started with other params ({sorted(earlier.get('params', {}))}); "
                     f"its earlier trials searched those")
    study.set_user_attr("search_space", data)
    _study_entry(study_dir, "search_space.yaml", "search_space.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def _fail_stale_trials(study: Any, say: Any) -> None:
    """Trials left running by an interrupted driver are marked failed (``interrupted``) and do not count."""
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
        study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
        study._storage.set_trial_user_attr(t._trial_id, "error", "interrupted: the optimize that ran it ended early")
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        say(f"maze-lab optimize: trial {t.number} was left running by an interrupted optimize: marked failed")


def _best_note(study: Any) -> str | None:
    """``best 195.5 (trial 3)`` beside the bar, where a trial completed."""
    try:
        best = study.best_trial
    except ValueError:  # no completed trial yet
        return None
    return f"best {best.value:g} (trial {best.number})"


def _say_above_bar(text: str) -> None:
    from maze_lab.run.progress import print_line

    print_line(text)


def _run_trials(study: Any, spec: SearchSpace, missing: int, n_jobs: int, backend: str,
                address: str | None, study_dir: Path, job_base: dict[str, Any], say: Any) -> list[int]:
    """Ask for ``missing`` trials, run them ``n_jobs`` at a time and tell the study their results."""
    from concurrent.futures import FIRST_COMPLETED, wait

    import optuna
    from optuna.trial import TrialState

    from maze_lab.run.ray_tasks import RunsInterrupted, interrupt_cause, interrupt_runs

    distributions = spec.distributions()
    executor = _Executor(backend, n_jobs, address)
    proxy = proxied = None
    if executor.remote:
        # from here on the proxy process alone uses study.db: the driver asks and tells through it as well
        from maze_lab.run.optuna_proxy import StudyProxy

        try:
            proxy = StudyProxy(study_dir / STUDY_DB, executor.proxy_host)
        except BaseException:
            executor.close()
            raise
        proxied = proxy.storage()
        study = optuna.load_study(study_name=study.study_name, storage=proxied, sampler=study.sampler,
                                  pruner=study.pruner)
    pending: dict[Any, Any] = {}
    in_flight: dict[Any, Path] = {}  # trial -> run directory, from its start until the study was told its result
    ran: list[int] = []
    launched = 0
    from maze_lab.run.progress import CountProgress

    progress = CountProgress(missing, "optimize", "trial", enabled=say is _say_above_bar)
    try:
        while launched < missing or pending:
            while launched < missing and len(pending) < n_jobs:
                trial = study.ask(distributions)
                run_dir = study_dir / TRIAL_DIR.format(trial.number)
                in_flight[trial] = run_dir
                trial.set_user_attr("run_dir", str(run_dir))
                job = {**job_base, "number": trial.number, "trial_id": trial._trial_id, "params": dict(trial.params),
                       "run_dir": str(run_dir), "proxy": (proxy.host, proxy.port) if proxy else None}
                say(f"maze-lab optimize: trial {trial.number} started: {_fmt_params(trial.params)}")
                pending[executor.submit(job, None if executor.remote else trial)] = trial
                launched += 1
            finished, _ = wait(list(pending), timeout=0.5, return_when=FIRST_COMPLETED)
            for future in finished:
                trial = pending.pop(future)
                try:
                    result = future.result()
                except Exception as err:  # noqa: BLE001 - a worker that died: the trial failed, the study goes on
                    result = {"state": "fail", "error": " ".join(f"{type(err).__name__}: {err}".split())[:2000]}
                _tell(study, trial, result, TrialState)
                in_flight.pop(trial, None)
                ran.append(trial.number)
                value = result.get("value")
                say(f"maze-lab optimize: trial {trial.number} {result['state']}"
                    + (f": {value:g}" if value is not None else "")
                    + (f" ({result['error']})" if result.get("error") else ""))
                progress.advance(1, _best_note(study))
    except BaseException as err:  # Ctrl-C or an error of the driver: what was running did not finish
        cause = interrupt_cause(err)
        reason = f"interrupted ({cause}) while its study ran"
        # a trial run by this process recorded `interrupted` itself (the KeyboardInterrupt came through its training)
        interrupted = interrupt_runs(lambda: list(in_flight.values()), executor.kill, reason)
        for trial, run_dir in in_flight.items():
            with contextlib.suppress(Exception):
                trial.set_user_attr("interrupted", True)
                trial.set_user_attr("error", "interrupted: the optimize that ran it ended early")
                study.tell(trial, state=TrialState.FAIL)
            _note_interrupted(run_dir, reason)
        if isinstance(err, KeyboardInterrupt):
            raise RunsInterrupted(f"study interrupted ({cause}): {len(in_flight)} trial(s) in flight stopped, "
                                  f"{len(interrupted)} run(s) recorded interrupted", interrupted, missing - launched,
                                  cause, f"study:{job_base['study_name']}", len(in_flight)) from err
        raise
    finally:
        progress.close()
        executor.close()
        if proxy is not None:
            with contextlib.suppress(Exception):
                proxied.close()
            proxy.stop()
    return ran


def _note_interrupted(run_dir: Path, reason: str) -> None:
    """The trial of an interrupted run failed (it did not train its budget): so says the run's summary too."""
    from maze_lab.run.run_dir import RunDirectory

    run = RunDirectory(run_dir)
    with contextlib.suppress(Exception):
        if run.summary_file.exists():
            info = run.read_summary().get("optuna")
            if isinstance(info, dict):
                run.write_summary(optuna={**info, "state": "fail", "error": reason})


def _tell(study: Any, trial: Any, result: dict[str, Any], states: Any) -> None:
    """Tell the study how a trial ended."""
    if result.get("epoch") is not None:
        trial.set_user_attr("epochs", result["epoch"])
    if result["state"] == "complete":
        study.tell(trial, result["value"])
    elif result["state"] == "pruned":
        study.tell(trial, state=states.PRUNED)  # Optuna keeps the last reported reward as its value
    else:
        trial.set_user_attr("error", result.get("error") or "unknown error")
        if result.get("traceback"):  # also where the trial failed before its run directory was made
            trial.set_user_attr("traceback", result["traceback"])
        study.tell(trial, state=states.FAIL)


def _finish(study: Any, spec: SearchSpace, study_dir: Path, ran: list[int]) -> OptimizeResult:
    """Write ``best_config.yaml`` and ``best_params.yaml`` of the best trial and build the table of trials."""
    from maze_lab.run.run_dir import RunDirectory

    table = trials_table(study, list(spec.params), study_dir)
    try:
        best = study.best_trial
    except ValueError:  # no trial completed
        return OptimizeResult(study, study_dir, table, None, None, None, None, None, ran)
    # the trial's directory in this study directory (study.db records where it was made: a copied study moved)
    run_dir = RunDirectory(_study_entry(study_dir, TRIAL_DIR.format(best.number), "trial directory", directory=True))
    header = (f"# best trial {best.number} of study {study.study_name} ({spec.study.objective} {best.value:g}); "
              f"run directory {run_dir.path}\n")
    config_path = _study_entry(study_dir, "best_config.yaml", "best_config.yaml")
    config = OmegaConf.create(run_dir.read_config())
    config_path.write_text(f"{header}# the composed configuration of that run\n{OmegaConf.to_yaml(config)}")
    params_path = _study_entry(study_dir, "best_params.yaml", "best_params.yaml")
    params_path.write_text(f"{header}# the searched values, usable as overrides\n"
                           f"{yaml.safe_dump(dict(best.params), sort_keys=False)}")
    return OptimizeResult(study, study_dir, table, dict(best.params), float(best.value), best.number, config_path,
                          params_path, ran)


def trials_table(study: Any, keys: list[str], study_dir: Path | None = None) -> Any:
    """One row per trial: number, state, value, the searched keys, epochs trained, run directory, error.

    :param study_dir: the study directory: the run directories are its ``trial_<number>`` (default: where the study
        recorded them, which is elsewhere for a study that was copied or moved)."""
    import pandas as pd

    rows = []
    for t in study.get_trials(deepcopy=False):
        row = {"trial": t.number, "state": t.state.name.lower(), "value": t.value}
        if t.value is None and t.intermediate_values:  # a pruned or failed trial: its last reported reward
            row["value"] = t.intermediate_values[max(t.intermediate_values)]
        row.update({k: t.params.get(k) for k in keys})
        row["epochs"] = t.user_attrs.get("epochs")
        row["run_dir"] = str(study_dir / TRIAL_DIR.format(t.number)) if study_dir is not None else \
            t.user_attrs.get("run_dir")
        row["error"] = t.user_attrs.get("error")
        rows.append(row)
    return pd.DataFrame(rows, columns=["trial", "state", "value", *keys, "epochs", "run_dir", "error"])


def format_table(table: Any) -> str:
    """The table of trials as text (the error column only where a trial failed)."""
    if table.empty:
        return "(no trials)"
    shown = table if table["error"].notna().any() else table.drop(columns=["error"])
    return shown.to_string(index=False, float_format=lambda v: f"{v:.4g}")


def _fmt_params(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


# ---- the command line ----------------------------------------------------------------------------------------------
def add_optimize_parser(sub: Any, common: Any) -> None:
    """The ``maze-lab optimize`` sub-command."""
    p = sub.add_parser("optimize", parents=[common], help="hyperparameter search with Optuna (trials are runs)",
                       description="Search hyperparameters with Optuna. The search space is a file of the config "
                                   "group search_space (maze_lab/conf/search_space/) or a YAML path; every trial is "
                                   "a run directory under the study directory (<log_base_dir>/<experiment_name>/"
                                   "optimize-<space>, with study.db, best_config.yaml and best_params.yaml). Running "
                                   "the same search again resumes the study.")
    p.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                   help="group=option or dotted.key=value for every trial")
    p.add_argument("--space", required=True, help="search space: a name of the search_space group or a YAML file")
    p.add_argument("--trials", type=int, default=None,
                   help="trials the study should hold (default: the space's study.n_trials); only missing ones run")
    p.add_argument("--jobs", "-j", type=int, default=1, help="trials at the same time (worker processes or Ray tasks)")
    p.add_argument("--ray", action="store_true", help="run the trials as Ray tasks (a local Ray unless --address)")
    p.add_argument("--address", default=None, help="with --ray: the Ray cluster to use (e.g. auto or ray://HOST:10001)")
    p.add_argument("--study-dir", default=None, help="where the study lives (default <log_base_dir>/<experiment_name>/"
                                                     "optimize-<space>)")
    p.add_argument("--experiment", help="experiment file (config group 'experiment')")
    p.add_argument("--config-module", action="append", help="importable package with your own config groups")
    p.add_argument("--trust", action="append", metavar="MODULE",
                   help="a module (my_project) or dotted name of your own that the search space may name; "
                        "repeatable. Without it a search space (like a run directory) names only maze-lab's own "
                        "classes and env factories, torch.nn modules and Gymnasium env ids")
    p.set_defaults(func=_optimize_command)


def _optimize_command(args: Any) -> int:
    """``maze-lab optimize``: exit 0 where a trial completed, 1 where none did, 2 for bad input (by the caller)."""
    from maze_lab.run.config import parse_cli_overrides

    if args.address and not args.ray:
        raise ConfigurationError("--address names a Ray cluster: add --ray")
    components, overrides = parse_cli_overrides(args.overrides)
    experiment = components.pop("experiment", None)
    import optuna

    from maze_lab.run.commands import interrupt_once, report_interrupted

    # the command's own process: optuna's notice per trial repeats the lines maze-lab prints (a library call of
    # optimize() leaves optuna's logging as the application set it)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.perf_counter()
    # Ctrl-C or SIGTERM: no further trial, the trials in flight stopped and recorded interrupted, one line
    with interrupt_once() as caught:
        try:
            result = optimize(args.space, overrides={**components, **overrides}, n_trials=args.trials,
                              n_jobs=args.jobs, backend="ray" if args.ray else "local", study_dir=args.study_dir,
                              address=args.address, experiment=args.experiment or experiment,
                              config_module=args.config_module, trust=args.trust)
        except KeyboardInterrupt as err:
            return report_interrupted("optimize", err, caught, "trial(s)",
                                      "; run the same command again to resume the study")
    print(f"maze-lab optimize: {len(result.ran)} trial(s) run in {time.perf_counter() - start:.0f} s; study "
          f"{result.study_dir / 'study.db'} (maze-lab runs --base {result.study_dir})", flush=True)
    return 0 if result.best_trial is not None else 1
