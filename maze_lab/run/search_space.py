"""The search space of an Optuna study: its file (a name of the config group ``search_space`` or a path), its parsing
into one distribution per dotted config key and the study's settings, the check of its keys against the training
configuration, and the check of every name it holds against the allow-list of run directories (see
:mod:`maze_lab.run.optimize`)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig

from maze_lab.core.utils.factory import ConfigurationError, TrustError, TrustPolicy, locate

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


def configuration_names(config: Any) -> Iterator[str]:
    """Every ``_target_`` value and dotted name in a composed configuration (plain containers)."""
    if isinstance(config, Mapping):
        for k, v in config.items():
            if isinstance(k, str) and _DOTTED_NAME.fullmatch(k):
                yield k
            if k == "_target_" and isinstance(v, str):
                yield v
            else:
                yield from configuration_names(v)
    elif isinstance(config, list):
        for v in config:
            yield from configuration_names(v)
    elif isinstance(config, str) and _DOTTED_NAME.fullmatch(config):
        yield config

