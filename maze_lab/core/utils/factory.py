"""Instantiation of components from config: dotted class paths, ``_target_`` dicts or ready objects."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")

ConfigType = Mapping[str, Any] | Any


class ConfigurationError(ValueError):
    """A configuration names something that does not exist or has the wrong form."""


def locate(path: str) -> Any:
    """Import the object named by a dotted path such as ``package.module.Class``."""
    if not isinstance(path, str) or not path:
        raise ConfigurationError(f"expected a dotted path like 'package.module.Name', got {path!r}")
    parts = path.split(".")
    # import the longest importable module prefix, then walk attributes
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            # a missing module deeper inside the imported code is a real error, not a lookup miss
            if err.name is not None and not module_name.startswith(err.name) and err.name != module_name:
                raise
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                valid = sorted(n for n in dir(obj) if not n.startswith("_"))
                raise ConfigurationError(
                    f"'{path}': module or object '{'.'.join(parts[:cut])}' has no attribute '{attr}'; "
                    f"valid names there: {', '.join(valid[:40])}"
                )
            obj = getattr(obj, attr)
        return obj
    raise ConfigurationError(f"'{path}' cannot be imported: no module '{parts[0]}' is installed")


def _to_plain(config: Any) -> Any:
    """OmegaConf containers become plain dicts/lists; everything else passes through."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        return config
    if isinstance(config, DictConfig | ListConfig):
        return OmegaConf.to_container(config, resolve=True)
    return config


class Factory(Generic[T]):
    """Builds instances of ``base_type`` from a class, a dotted path, a ``_target_`` dict or an instance."""

    def __init__(self, base_type: type[T] | None = None):
        self.base_type = base_type

    def type_from_name(self, name: str | type) -> type:
        """Resolve a dotted name (or a class) and check it against ``base_type``."""
        cls = locate(name) if isinstance(name, str) else name
        if self.base_type is not None and isinstance(cls, type) and not issubclass(cls, self.base_type):
            raise ConfigurationError(f"{cls.__module__}.{cls.__qualname__} is not a {self.base_type.__name__}")
        return cls

    def instantiate(self, config: ConfigType, **kwargs: Any) -> T:
        """Instantiate from config; ``kwargs`` are extra constructor arguments (config values win)."""
        config = _to_plain(config)
        if self.base_type is not None and isinstance(config, self.base_type):
            return config
        if isinstance(config, str) or isinstance(config, type):
            return self._call(self.type_from_name(config), {}, kwargs)
        if isinstance(config, Mapping):
            if "_target_" not in config:
                raise ConfigurationError(
                    f"config for {self._what()} needs a '_target_' key naming the class or function; "
                    f"got keys {sorted(config)}"
                )
            params = {k: v for k, v in config.items() if k != "_target_"}
            return self._call(self.type_from_name(config["_target_"]), params, kwargs)
        if callable(config) and self.base_type is None:
            return config(**kwargs)
        raise ConfigurationError(
            f"cannot build {self._what()} from {type(config).__name__} {config!r}; give a dotted class path, "
            f"a dict with '_target_', or an instance"
        )

    def _what(self) -> str:
        return self.base_type.__name__ if self.base_type is not None else "an object"

    @staticmethod
    def _call(target: Any, params: dict, kwargs: dict) -> Any:
        # config values may hold nested `_target_` dicts; extra kwargs are ready objects and pass unchanged
        nested = {**kwargs, **{k: instantiate_nested(v) for k, v in params.items()}}
        try:
            return target(**nested)
        except TypeError as err:
            name = getattr(target, "__qualname__", repr(target))
            raise ConfigurationError(f"{name}({', '.join(sorted(nested))}) failed: {err}") from err


def instantiate_nested(value: Any) -> Any:
    """Recursively instantiate ``_target_`` dicts inside containers (left-over values pass through)."""
    if type(value) is dict:  # plain dicts only: gymnasium Dict spaces and other mappings pass unchanged
        if "_target_" in value:
            return Factory().instantiate(value)
        return {k: instantiate_nested(v) for k, v in value.items()}
    if isinstance(value, list):
        return [instantiate_nested(v) for v in value]
    return value
