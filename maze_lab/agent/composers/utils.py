"""Helpers of the model composers: building networks from config and reading config entries."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from maze_lab.core.env.structured_env import ActorID, StepKey
from maze_lab.core.utils.factory import ConfigurationError, Factory, _to_plain


def _registry() -> dict[str, type]:
    """Built-in components by class name (for short names and Maze dotted paths in configs)."""
    from maze_lab.agent import composers
    from maze_lab.perception import builders
    from maze_lab.perception.models import built_in

    reg: dict[str, type] = {}
    for module in (builders, composers, built_in):
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if isinstance(obj, type):
                reg[name] = obj
    return reg


def resolve_type(name: Any, base: type | tuple[type, ...], what: str) -> type:
    """Resolve a class from a class, a built-in short name, a maze/maze_lab dotted path or any dotted path."""
    if isinstance(name, type):
        cls = name
    else:
        if not isinstance(name, str):
            raise ConfigurationError(f"{what}: expected a class or a dotted class path, got {name!r}")
        reg = _registry()
        short = name.rsplit(".", 1)[-1]
        if short in reg and (name == short or name.startswith(("maze.", "maze_lab."))):
            cls = reg[short]
        else:
            try:
                cls = Factory().type_from_name(name)
            except ConfigurationError as err:
                valid = sorted(k for k, v in reg.items() if issubclass(v, base))
                raise ConfigurationError(f"{what}: {err}; built-in choices: {', '.join(valid)}") from err
    if not isinstance(cls, type) or not issubclass(cls, base):
        names = base.__name__ if isinstance(base, type) else " or ".join(b.__name__ for b in base)
        raise ConfigurationError(f"{what}: {getattr(cls, '__qualname__', cls)!r} is not a {names}")
    return cls


def _accepts(cls: Any, name: str) -> bool:
    """Whether ``cls(...)`` takes a parameter called ``name`` (not merely ``**kwargs``)."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False
    param = params.get(name)
    return param is not None and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)


def build_network(spec: Any, what: str, optional_kwargs: Mapping[str, Any] | None = None,
                  **shape_kwargs: Any) -> nn.Module:
    """Build a network from a module instance, a class / dotted path or a ``_target_`` dict plus shape kwargs.

    :param optional_kwargs: Passed only to networks whose constructor names them (e.g. ``action_spaces``).
    """
    spec = _to_plain(spec)
    if isinstance(spec, nn.Module):
        return spec
    if isinstance(spec, Mapping) and "_target_" in spec:
        spec = {**spec, "_target_": resolve_type(spec["_target_"], nn.Module, what)}
        cls = spec["_target_"]
    elif isinstance(spec, str):
        spec = cls = resolve_type(spec, nn.Module, what)
    else:
        cls = spec
    for name, value in (optional_kwargs or {}).items():
        if name not in shape_kwargs and not (isinstance(spec, Mapping) and name in spec) and _accepts(cls, name):
            shape_kwargs[name] = value
    try:
        net = Factory(nn.Module).instantiate(spec, **shape_kwargs)
    except ConfigurationError as err:
        raise ConfigurationError(f"{what}: {err}") from err
    if not isinstance(net, nn.Module):
        raise ConfigurationError(f"{what}: {spec!r} did not build a torch.nn.Module but {type(net).__name__}")
    return net


def specs_per_key(networks: Any, keys: Sequence[StepKey | ActorID], what: str) -> dict[StepKey | ActorID, Any]:
    """Assign network specs to keys: a dict by key, a list (one per key, or one for all) or one spec for all."""
    networks = _to_plain(networks)
    if networks is None:
        raise ConfigurationError(f"{what}: 'networks' is required (one network config per policy key)")
    if isinstance(networks, Mapping) and "_target_" not in networks:
        missing = [k for k in keys if k not in networks and getattr(k, "step_key", None) not in networks]
        if missing:
            raise ConfigurationError(f"{what}: no network for keys {missing}; networks given for {list(networks)}")
        return {k: networks[k] if k in networks else networks[k.step_key] for k in keys}  # type: ignore[union-attr]
    if isinstance(networks, Sequence) and not isinstance(networks, str):
        nets = list(networks)
        if len(nets) == 1:
            return dict.fromkeys(keys, nets[0])
        if len(nets) != len(keys):
            raise ConfigurationError(f"{what}: {len(nets)} networks for {len(keys)} keys {list(keys)}; give one per "
                                     f"key (in order) or a single one for all")
        return dict(zip(keys, nets, strict=True))
    return dict.fromkeys(keys, networks)


def split_target(config: Any, what: str) -> tuple[Any, dict[str, Any]]:
    """Split a ``_target_`` config into (target, other params)."""
    config = _to_plain(config)
    if not isinstance(config, Mapping) or "_target_" not in config:
        raise ConfigurationError(f"{what} config needs a '_target_' key, got {config!r}")
    return config["_target_"], {k: v for k, v in config.items() if k != "_target_"}


def build_model_composer(config: Any, action_spaces_dict: Mapping[StepKey, Any],
                         observation_spaces_dict: Mapping[StepKey, Any],
                         agent_counts_dict: Mapping[StepKey, int] | None = None, **kwargs: Any) -> Any:
    """Build a model composer from a model config (``_target_`` dict, e.g. a model YAML) for the given spaces.

    Unlike a recursive ``_target_`` instantiation, nested ``_target_`` entries (model builder, policy and critic
    composers, networks) are handed to the composer as config, because they can only be built once the spaces
    are known.
    """
    from maze_lab.agent.composers.base import BaseModelComposer

    config = _to_plain(config)
    if isinstance(config, BaseModelComposer):
        return config
    target, params = split_target(config, "model")
    cls = resolve_type(target, BaseModelComposer, "model")
    params.pop("_recursive_", None)
    return cls(action_spaces_dict=action_spaces_dict, observation_spaces_dict=observation_spaces_dict,
               agent_counts_dict=agent_counts_dict, **{**params, **kwargs})
