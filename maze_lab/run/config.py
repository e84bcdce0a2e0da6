"""Configuration: Hydra's compose API over maze-lab's config groups, plus checked overrides.

Config groups live in ``maze_lab/conf`` (and the example's ``maze_lab/examples/cutting2d/conf``); user config
packages are added to the search path with ``config_module="my_project.conf"``. Group selections go through
Hydra; value overrides are applied afterwards with checks, so that an unknown key lists the valid keys and a
value of the wrong type names the key and the expected type.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from maze_lab.core.utils.factory import ConfigurationError

GROUPS = ("env", "wrappers", "model", "critic", "algorithm", "runner")
"""The config groups a training run is composed of (plus ``experiment`` files)."""

_HYDRA_LOCK = threading.Lock()  # Hydra's global state is not thread-safe


def builtin_config_dirs() -> list[Path]:
    """maze-lab's own config directories (the package's and the Cutting-2D example's)."""
    import maze_lab
    from maze_lab.examples import cutting2d

    return [Path(maze_lab.__file__).parent / "conf", Path(cutting2d.__file__).parent / "conf"]


def module_config_dir(module: str) -> Path:
    """The directory of an importable config package such as ``my_project.conf``."""
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        raise ConfigurationError(f"config module '{module}' cannot be imported: {err}") from err
    paths = list(getattr(mod, "__path__", []))
    if not paths:
        raise ConfigurationError(f"config module '{module}' is not a package (a directory with YAML config groups)")
    return Path(paths[0])


def config_dirs(config_modules: Iterable[str] = ()) -> list[Path]:
    """Search path: user config packages first (they win), then maze-lab's."""
    return [module_config_dir(m) for m in config_modules] + builtin_config_dirs()


def available_options(config_modules: Iterable[str] = ()) -> dict[str, list[str]]:
    """Option names per config group (``experiment`` included) over the whole search path."""
    options: dict[str, set[str]] = {g: set() for g in (*GROUPS, "experiment")}
    for d in config_dirs(config_modules):
        for group in options:
            gdir = d / group
            if gdir.is_dir():
                options[group].update(p.stem for p in gdir.glob("*.yaml"))
    return {g: sorted(v) for g, v in options.items()}


def _check_option(group: str, name: str, options: dict[str, list[str]]) -> None:
    if group not in options:
        raise ConfigurationError(f"unknown config group '{group}'; valid groups: {', '.join(options)}")
    if name not in options[group]:
        raise ConfigurationError(
            f"unknown option '{name}' for config group '{group}'; valid options: {', '.join(options[group])}"
        )


def parse_override_value(text: str) -> Any:
    """A command-line value: YAML scalars, lists and dicts (``0.001``, ``[64, 64]``, ``true``, ``null``)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _type_name(value: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(type(value), type(value).__name__)


def _check_type(key: str, old: Any, new: Any) -> Any:
    """Return ``new`` (converted where lossless) or raise an error naming the key and the expected type."""
    if old is None or new is None:
        return new
    number = (int, float)
    if isinstance(old, bool):
        ok = isinstance(new, bool)
    elif isinstance(old, number):
        ok = isinstance(new, number) and not isinstance(new, bool)
        if ok and isinstance(old, float):
            return float(new)
        if ok and isinstance(new, float):
            if not new.is_integer():
                raise ConfigurationError(f"override '{key}': expected a value of type int (like {old!r}), "
                                         f"got float {new!r}")
            return int(new)
    elif isinstance(old, str):
        ok = isinstance(new, str)
    elif isinstance(old, Mapping):
        ok = isinstance(new, Mapping)
    elif isinstance(old, list | tuple):
        ok = isinstance(new, list | tuple)
    else:
        ok = True
    # lr and clip_range take a number or a schedule dict
    if not ok and key.rsplit(".", 1)[-1] in ("lr", "clip_range") and isinstance(new, Mapping | int | float):
        ok = not isinstance(new, bool)
    if ok:
        return new
    expected = "dict" if isinstance(old, Mapping) else "list" if isinstance(old, list | tuple) else _type_name(old)
    raise ConfigurationError(f"override '{key}': expected a value of type {expected} (like {old!r}), "
                             f"got {_type_name(new)} {new!r}")


def apply_override(cfg: DictConfig, key: str, value: Any) -> None:
    """Set a dotted key; the parent must exist and, where the key exists, the type must match."""
    parts = key.split(".")
    node: Any = cfg
    for i, part in enumerate(parts[:-1]):
        if not isinstance(node, DictConfig) or part not in node:
            where = ".".join(parts[:i]) or "the root config"
            valid = sorted(node.keys()) if isinstance(node, DictConfig) else []
            raise ConfigurationError(f"unknown config key '{key}': '{part}' is not in {where}; valid keys there: "
                                     f"{', '.join(map(str, valid))}")
        node = node[part]
    last = parts[-1]
    if not isinstance(node, DictConfig):
        raise ConfigurationError(f"cannot set '{key}': '{'.'.join(parts[:-1])}' is not a mapping")
    if last not in node:
        # free-form mappings (wrapper parameters, env kwargs) may gain keys; typed sections may not
        if _typed_section(parts):
            where = f"'{'.'.join(parts[:-1])}'" if len(parts) > 1 else "the root config"
            raise ConfigurationError(f"unknown config key '{key}'; valid keys in {where}: "
                                     f"{', '.join(sorted(map(str, node.keys())))}")
        node[last] = value
        return
    node[last] = _check_type(key, OmegaConf.to_container(node[last]) if isinstance(node[last], DictConfig | ListConfig)
                             else node[last], value)


def _typed_section(parts: list[str]) -> bool:
    """Sections whose keys are fixed (dataclass parameters, runner settings, root keys)."""
    return len(parts) == 1 or parts[0] in ("algorithm", "runner")


def compose_config(components: Mapping[str, Any] | None = None, overrides: Mapping[str, Any] | None = None,
                   experiment: str | None = None, config_modules: Iterable[str] = (),
                   config_name: str = "conf_train") -> DictConfig:
    """Compose a run configuration.

    :param components: group -> option name (str) or a config dict replacing the group's value.
    :param overrides: dotted key -> value (a group name with a str value selects an option).
    :param experiment: an experiment file (group ``experiment``) applied on top.
    :param config_modules: importable packages with further config groups (searched first).
    """
    from hydra import compose, initialize_config_dir

    config_modules = list(config_modules)
    options = available_options(config_modules)
    components = dict(components or {})
    overrides = dict(overrides or {})
    for key in list(overrides):
        if key in GROUPS and isinstance(overrides[key], str):
            components[key] = overrides.pop(key)
    hydra_overrides = []
    dict_components = {}
    for group, value in components.items():
        if value is None:
            continue
        if group not in GROUPS:
            raise ConfigurationError(f"unknown config group '{group}'; valid groups: {', '.join(GROUPS)}")
        if isinstance(value, str):
            _check_option(group, value, options)
            hydra_overrides.append(f"{group}={value}")
        elif isinstance(value, Mapping | DictConfig):
            dict_components[group] = value
        else:
            raise ConfigurationError(f"component '{group}' must be an option name or a config dict here, got "
                                     f"{type(value).__name__}")
    if experiment:
        _check_option("experiment", experiment, options)
        hydra_overrides.append(f"+experiment={experiment}")
    dirs = config_dirs(config_modules)
    primary = next((d for d in dirs if (d / f"{config_name}.yaml").exists()), None)
    if primary is None:
        raise ConfigurationError(f"no root config '{config_name}.yaml' in the search path {[str(d) for d in dirs]}")
    others = [d for d in dirs if d != primary]
    if others:
        hydra_overrides.append("hydra.searchpath=[" + ",".join(f"file://{d}" for d in others) + "]")
    with _HYDRA_LOCK, initialize_config_dir(config_dir=str(primary), version_base=None):
        cfg = compose(config_name=config_name, overrides=hydra_overrides)
    OmegaConf.set_struct(cfg, False)
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    for group, value in dict_components.items():
        plain = OmegaConf.to_container(value) if isinstance(value, DictConfig) else dict(value)
        if group == "critic":
            cfg.model.critic = plain
        else:
            cfg[group] = plain
    for key, value in overrides.items():
        apply_override(cfg, key, value)
    OmegaConf.resolve(cfg)
    return cfg


def parse_cli_overrides(args: Iterable[str]) -> tuple[dict[str, str], dict[str, Any]]:
    """Split ``group=option`` selections from ``dotted.key=value`` overrides (Hydra-style command line)."""
    components, overrides = {}, {}
    for arg in args:
        if "=" not in arg:
            raise ConfigurationError(
                f"override '{arg}' must look like key=value (e.g. algorithm=a2c, algorithm.lr=0.001)")
        key, text = arg.split("=", 1)
        key = key.lstrip("+")
        if key in GROUPS or key == "experiment":
            components[key] = text
        else:
            overrides[key] = parse_override_value(text)
    return components, overrides
