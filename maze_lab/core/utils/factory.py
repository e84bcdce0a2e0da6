"""Instantiation of components from config: dotted class paths, ``_target_`` dicts or ready objects."""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import re
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")

ConfigType = Mapping[str, Any] | Any


class ConfigurationError(ValueError):
    """A configuration names something that does not exist or has the wrong form."""


def locate(path: str) -> Any:
    """Import the object named by a dotted path such as ``package.module.Class``.

    Inside :func:`restricted` (a run's config read from disk) only names on the allow-list of the active
    :class:`TrustPolicy` are imported; anything else raises :class:`TrustError` before it is imported.
    """
    if not isinstance(path, str) or not path:
        raise ConfigurationError(f"expected a dotted path like 'package.module.Name', got {path!r}")
    scope = _SCOPE.get()
    if scope is None:
        return _locate(path)
    scope.policy.check_path(path, scope)
    obj = _locate(path)
    scope.policy.check_object(path, obj, scope)
    return obj


def _locate(path: str) -> Any:
    """``locate`` without any allow-list."""
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
        scope = _SCOPE.get()
        if scope is not None:
            scope.policy.check_env_ids(target, params, scope)
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


# ---- configurations read from disk: an allow-list ------------------------------------------------------------------
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")

NEVER_TRUSTED: tuple[str, ...] = (
    "builtins", "os", "posix", "nt", "sys", "subprocess", "importlib", "runpy", "code", "codeop", "shutil", "pickle",
    "marshal", "ctypes", "socket", "pty", "signal", "multiprocessing", "concurrent", "threading", "webbrowser",
    "antigravity", "tempfile", "io", "pathlib", "cloudpickle", "dill", "joblib", "torch.hub", "torch.package",
    "torch.utils.cpp_extension", "torch.jit", "torch.ops",
)
"""Modules whose objects a configuration read from disk never instantiates, even where the caller trusts them:
they run commands, load code or touch files."""

MAZE_LAB_NOT_FROM_FILES: tuple[str, ...] = (
    "maze_lab.run", "maze_lab.cli", "maze_lab.demo", "maze_lab.widgets", "maze_lab.core.utils",
    "maze_lab.examples.sb3_route",
)
"""maze-lab's own modules that a configuration read from disk may not name: they start runs, notebooks, processes or
JupyterLab, or resolve names themselves."""

TRUSTED_FUNCTIONS: tuple[str, ...] = (
    "maze_lab.core.wrappers.gym_maze_env.make_gym_maze_env",
    "maze_lab.examples.cutting2d.maze_env_factory",
    "maze_lab.examples.cutting2d.make_struct_env",
    "maze_lab.examples.cutting2d.make_masked_env",
    "gymnasium.make",
    "gymnasium.envs.registration.make",
)
"""The functions a configuration read from disk may name (maze-lab's env factories and ``gymnasium.make``); every
other allowed name is a class."""

ENV_ID_PARAMETERS: dict[str, str] = {
    "maze_lab.core.wrappers.gym_maze_env.GymMazeEnv": "env",
    "maze_lab.core.wrappers.gym_maze_env.make_gym_maze_env": "name",
    "gymnasium.envs.registration.make": "id",
}
"""Parameters that take a Gymnasium env id (class or function -> parameter). An id of the form ``module:EnvId``
imports ``module``, so that module must be trusted like a ``_target_``."""

_ALLOWED_SUMMARY = "maze-lab's own classes and env factories, torch.nn modules, Gymnasium spaces and env ids"


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _never_trusted(name: str) -> str | None:
    """The module of :data:`NEVER_TRUSTED` that ``name`` lies in, if any."""
    return next((m for m in NEVER_TRUSTED if _under(name, m)), None)


def _canonical(obj: Any) -> str:
    return f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', None)}"


_TRUSTED_FUNCTION_OBJECTS: list[Any] = []


def _is_trusted_function(path: str, obj: Any) -> bool:
    """Whether ``obj`` (found at ``path``) is one of :data:`TRUSTED_FUNCTIONS`."""
    if path in TRUSTED_FUNCTIONS or _canonical(obj) in TRUSTED_FUNCTIONS:
        return True
    if not _TRUSTED_FUNCTION_OBJECTS:  # the same function under another (re-exported) name
        for name in TRUSTED_FUNCTIONS:
            try:
                _TRUSTED_FUNCTION_OBJECTS.append(_locate(name))
            except (ConfigurationError, ImportError):
                continue
    return any(obj is f for f in _TRUSTED_FUNCTION_OBJECTS)


class TrustError(ConfigurationError):
    """A configuration read from disk names something off the allow-list; it was not imported or called.

    :ivar target: the refused name (a dotted path, or a Gymnasium env id).
    :ivar key: the configuration key that holds it, where known.
    """

    def __init__(self, target: str, reason: str, source: str = "the configuration", key: str | None = None,
                 how_to_allow: str | None = None, allowable: bool = True):
        self.target, self.reason, self.source, self.key = target, reason, source, key
        self.how_to_allow, self.allowable = how_to_allow, allowable
        super().__init__(self._message())

    def _message(self) -> str:
        what = f"{self.key} = '{self.target}'" if self.key else f"'{self.target}'"
        message = (f"{self.source}: {what} was refused: {self.reason}. A run loaded from disk instantiates only "
                   f"{_ALLOWED_SUMMARY}")
        if not self.allowable:
            return message + "; this name cannot be allowed"
        name = self.target.split(":", 1)[0].split(".", 1)[0]
        if self.how_to_allow:
            message += f". If you trust this run directory, allow it with {self.how_to_allow.format(name=name)}"
        return message

    def with_key(self, key: str | None) -> TrustError:
        """The same refusal, naming the configuration key that holds it."""
        return TrustError(self.target, self.reason, self.source, key, self.how_to_allow, self.allowable)


class _Scope:
    """One restricted build: the policy and the refusals met on the way (code in between may catch them)."""

    def __init__(self, policy: TrustPolicy):
        self.policy = policy
        self.refusals: list[TrustError] = []


_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("maze_lab_trust_scope", default=None)


@contextlib.contextmanager
def restricted(policy: TrustPolicy) -> Iterator[_Scope]:
    """Within the block, :func:`locate` and :class:`Factory` import and call only what ``policy`` allows."""
    scope = _Scope(policy)
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)


class TrustPolicy:
    """What a configuration read from an untrusted file (a run's ``config.yaml``) may import and instantiate.

    Always allowed: maze-lab's own classes (outside :data:`MAZE_LAB_NOT_FROM_FILES`), the functions of
    :data:`TRUSTED_FUNCTIONS`, ``torch.nn`` module classes, Gymnasium spaces and registered Gymnasium env ids.
    ``trust`` adds modules (``"my_project"``: everything defined in it and its submodules) or exact dotted names
    (``"my_project.envs.make_env"``); the modules of :data:`NEVER_TRUSTED` cannot be added.

    :param trust: modules or dotted names the caller trusts.
    :param source: where the configuration comes from, for messages (e.g. the path of ``config.yaml``).
    :param how_to_allow: how the caller trusts a name, for messages; ``{name}`` stands for the module to trust.
    """

    def __init__(self, trust: Iterable[str] | str | None = (), source: str = "the configuration",
                 how_to_allow: str | None = "trust=['{name}']"):
        entries = [trust] if isinstance(trust, str) else list(trust or ())
        for entry in entries:
            if not isinstance(entry, str) or not _DOTTED.fullmatch(entry):
                raise ConfigurationError(f"trust entry {entry!r} is not a module or dotted name; give e.g. "
                                         f"'my_project' or 'my_project.envs.MyEnv'")
            never = _never_trusted(entry)
            if never is not None:
                raise ConfigurationError(f"trust entry '{entry}' cannot be trusted: objects of '{never}' run commands, "
                                         f"load code or touch files, and a run's configuration never instantiates "
                                         f"them; trust the module of your own project instead (e.g. 'my_project')")
        self.trust = tuple(entries)
        self.source, self.how_to_allow = source, how_to_allow

    def extended(self, trust: Iterable[str]) -> TrustPolicy:
        """This policy with more trusted names (entries that cannot be trusted are left out)."""
        more = [t for t in trust if isinstance(t, str) and _DOTTED.fullmatch(t) and _never_trusted(t) is None]
        return TrustPolicy([*self.trust, *more], self.source, self.how_to_allow)

    def _trusted_by_caller(self, name: str) -> bool:
        return any(_under(name, entry) for entry in self.trust)

    def _refuse(self, target: str, reason: str, scope: _Scope | None, allowable: bool = True) -> TrustError:
        err = TrustError(target, reason, self.source, how_to_allow=self.how_to_allow, allowable=allowable)
        if scope is not None:
            scope.refusals.append(err)
        return err

    def check_path(self, path: str, scope: _Scope | None = None) -> None:
        """Refuse a dotted path before anything of it is imported."""
        if not _DOTTED.fullmatch(path):
            raise self._refuse(path, "it is not a dotted Python name", scope, allowable=False)
        never = _never_trusted(path)
        if never is not None:
            raise self._refuse(path, f"objects of '{never}' can run commands, load code or touch files", scope,
                               allowable=False)
        if self._trusted_by_caller(path):
            return
        if _under(path, "maze"):
            # Maze's names are mapped to maze-lab's classes by the registries that call locate; the maze package
            # itself is not imported for a configuration from disk (not a refusal: those registries fall back)
            raise ConfigurationError(f"'{path}' is a name of the Maze framework, which a configuration from disk "
                                     f"resolves through maze-lab's registries only")
        if _under(path, "maze_lab"):
            denied = next((p for p in MAZE_LAB_NOT_FROM_FILES if _under(path, p)), None)
            if denied is None:
                return
            raise self._refuse(path, f"'{denied}' starts runs, processes or notebooks and is never named by a "
                                     f"run's configuration", scope, allowable=False)
        if _under(path, "torch.nn") or _under(path, "gymnasium"):
            return
        raise self._refuse(path, f"'{path.split('.', 1)[0]}' is not on the allow-list", scope)

    def check_object(self, path: str, obj: Any, scope: _Scope | None = None) -> None:
        """Refuse what an allowed path turned out to be (a module, a function, an object re-exported from elsewhere)."""
        if isinstance(obj, types.ModuleType):
            raise self._refuse(path, f"it is the module {obj.__name__}, not a class or function", scope)
        module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
        if not isinstance(module, str) or not isinstance(qualname, str):
            raise self._refuse(path, f"it is a {type(obj).__name__} object, not a class or function", scope)
        canonical = f"{module}.{qualname}"
        never = _never_trusted(module)
        if never is not None:
            raise self._refuse(path, f"it is {canonical}, and objects of '{never}' can run commands, load code or "
                                     f"touch files", scope, allowable=False)
        if path in self.trust or (self._trusted_by_caller(path) and self._trusted_by_caller(module)):
            return
        if _under(module, "maze_lab") and not any(_under(module, p) for p in MAZE_LAB_NOT_FROM_FILES):
            if isinstance(obj, type) or _is_trusted_function(path, obj):
                return
            raise self._refuse(path, f"it is the function {canonical}; of maze-lab's functions a run's configuration "
                                     f"may name only {', '.join(TRUSTED_FUNCTIONS[:4])}", scope)
        if _is_trusted_function(path, obj):
            return
        if isinstance(obj, type) and _under(module, "torch.nn"):
            import torch

            if issubclass(obj, torch.nn.Module):
                return
        if isinstance(obj, type) and _under(module, "gymnasium.spaces"):
            return
        raise self._refuse(path, f"it is {canonical}, which is not on the allow-list", scope)

    def check_env_ids(self, target: Any, params: Mapping[str, Any], scope: _Scope | None = None) -> None:
        """Refuse a Gymnasium env id ``module:EnvId`` whose module is not trusted (Gymnasium would import it)."""
        name = ENV_ID_PARAMETERS.get(_canonical(target))
        value = params.get(name) if name is not None else None
        if not isinstance(value, str) or ":" not in value:
            return
        module = value.split(":", 1)[0]
        if not _DOTTED.fullmatch(module) or _never_trusted(module) is not None:
            raise self._refuse(value, f"Gymnasium would import the module '{module}' for this env id", scope,
                               allowable=False)
        if not self._trusted_by_caller(module):
            raise self._refuse(value, f"Gymnasium would import the module '{module}' for this env id "
                                      f"('module:EnvId' form), and '{module}' is not trusted", scope)

    def run(self, build: Callable[[], T], config: Any = None) -> T:
        """Call ``build`` restricted to this policy; a refusal surfaces as a TrustError naming its key in ``config``,
        also where the code in between caught it and raised another error."""
        with restricted(self) as scope:
            try:
                return build()
            except Exception as err:
                if not scope.refusals:
                    raise
                first = scope.refusals[0]
                keyed = first.with_key(find_key(config, first.target)) if config is not None else first
                raise keyed from (None if err is first else err)

    def check_config(self, config: Mapping[str, Any], sections: Iterable[str] | None = None) -> None:
        """Refuse a configuration that names anything off the allow-list, before anything is built: every
        ``_target_`` and every wrapper named by a dotted path (only allowed modules are imported to check them)."""
        for key, name in config_names(config, sections):
            if not isinstance(name, str):
                raise ConfigurationError(f"{self.source}: {key} must be a dotted name (a string), got {name!r}")
            try:
                self.run(lambda name=name: locate(name))
            except TrustError as err:
                raise err.with_key(key) from None


def config_names(config: Mapping[str, Any], sections: Iterable[str] | None = None) -> Iterator[tuple[str, Any]]:
    """``(dotted key, name)`` of every ``_target_`` and every wrapper given by a dotted path in ``config``."""
    chosen = list(config) if sections is None else [s for s in sections if s in config]

    def walk(value: Any, key: str) -> Iterator[tuple[str, Any]]:
        if isinstance(value, Mapping):
            for k, v in value.items():
                sub = f"{key}.{k}" if key else str(k)
                if k == "_target_":
                    yield sub, v
                elif key == "wrappers" and isinstance(k, str) and "." in k:
                    yield sub, k
                    yield from walk(v, sub)
                else:
                    yield from walk(v, sub)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                if key == "wrappers" and isinstance(v, str) and "." in v:
                    yield f"{key}[{i}]", v
                else:
                    yield from walk(v, f"{key}[{i}]")

    for section in chosen:
        yield from walk(config[section], str(section))


def find_key(config: Any, target: str, key: str = "") -> str | None:
    """The dotted key in ``config`` whose value (or whose own name) is ``target``; None where there is none."""
    if isinstance(config, Mapping):
        for k, v in config.items():
            sub = f"{key}.{k}" if key else str(k)
            if k == target or v == target:
                return sub
            found = find_key(v, target, sub)
            if found is not None:
                return found
    elif isinstance(config, list):
        for i, v in enumerate(config):
            sub = f"{key}[{i}]"
            if v == target:
                return sub
            found = find_key(v, target, sub)
            if found is not None:
                return found
    return None
