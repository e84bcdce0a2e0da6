"""Helpers shared by the built-in wrappers: ordered dict spaces, per-policy-key lookups, config checks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import gymnasium as gym

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.utils.factory import ConfigurationError, locate


def ordered_dict_space(items: Iterable[tuple[str, gym.spaces.Space]]) -> gym.spaces.Dict:
    """A Dict space that keeps the given key order (gymnasium sorts plain dicts)."""
    return gym.spaces.Dict(list(items))


def require_dict_spaces(spaces_dict: Mapping[StepKey, gym.spaces.Space], what: str, wrapper: str) -> None:
    """Raise a TypeError naming the policy key whose space is not a Dict space."""
    for key, space in spaces_dict.items():
        if not isinstance(space, gym.spaces.Dict):
            raise TypeError(f"{wrapper} needs Dict {what} spaces, but policy key {key!r} has {space}; "
                            f"put a Dict{what.capitalize()}Wrapper below it")


def check_config_keys(config: Mapping[str, Any], required: Iterable[str], optional: Iterable[str],
                      where: str) -> None:
    """Raise a ConfigurationError for missing or unknown keys of one config entry."""
    if not isinstance(config, Mapping):
        raise ConfigurationError(f"{where}: expected a mapping, got {type(config).__name__} {config!r}")
    required, optional = list(required), list(optional)
    missing = [k for k in required if k not in config]
    unknown = sorted(str(k) for k in config if k not in required and k not in optional)
    if missing or unknown:
        raise ConfigurationError(f"{where}: missing keys {missing}, unknown keys {unknown}; "
                                 f"required {required}, optional {optional}")


def resolve_registered_class(name: str | type, registry: Mapping[str, type], base: type, kind: str) -> type:
    """A class from a registered short name, a dotted path (whose last part may be a registered name) or itself."""
    if isinstance(name, type):
        cls = name
    elif not isinstance(name, str) or not name:
        raise ConfigurationError(f"expected the name of a {kind} class, got {name!r}; "
                                 f"valid names: {', '.join(sorted(registry))}")
    elif name in registry:
        cls = registry[name]
    elif "." in name:
        try:
            cls = locate(name)
        except (ConfigurationError, ImportError) as err:
            short = name.rsplit(".", 1)[-1]
            if short not in registry:
                raise ConfigurationError(f"unknown {kind} '{name}' ({err}); valid names: "
                                         f"{', '.join(sorted(registry))}, or a dotted path to a {base.__name__} "
                                         f"subclass") from err
            cls = registry[short]
    else:
        raise ConfigurationError(f"unknown {kind} '{name}'; valid names: {', '.join(sorted(registry))}, "
                                 f"or a dotted path to a {base.__name__} subclass")
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigurationError(f"'{name}' is not a {base.__name__} subclass")
    return cls
