"""Configuration: Hydra's compose API over maze-lab's config groups, plus checked overrides.

Config groups live in ``maze_lab/conf`` (and the example's ``maze_lab/examples/cutting2d/conf``); user config
packages are added to the search path with ``config_module="my_project.conf"``. Group selections go through
Hydra; value overrides are applied afterwards with checks, so that an unknown key lists the valid keys and a
value of the wrong type names the key and the expected type. Every field of the algorithm's config class is a valid
``algorithm.*`` key, also where the YAML file does not list it.

Nothing here imports torch or matplotlib: a configuration is composed and checked (:func:`validate_config`) in about
a second, before the heavy parts of a run are imported.

Maze's names are understood: ``model=vector_obs`` and ``critic=template_state`` are config files, the names of Maze's
tutorial envs and wrapper stacks are aliases (:data:`MAZE_ALIASES`), and Maze names without an equivalent fail with a
message naming what to use instead (:data:`MAZE_HINTS`).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import threading
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from maze_lab.core.utils.factory import ConfigurationError, locate
from maze_lab.run.run_dir import default_outputs_dir

GROUPS = ("env", "wrappers", "model", "critic", "algorithm", "runner")
"""The config groups a training run is composed of (plus ``experiment`` files)."""

DEFAULT_CRITIC = "shared"
"""The root config's critic option; template models keep their own critic instead (see :func:`compose_config`)."""

_HYDRA_LOCK = threading.Lock()  # Hydra's global state is not thread-safe

# ``log_base_dir: ${maze_lab_outputs:}`` in conf_train.yaml: the one default location of runs (run_dir.py says how
# it is found); resolved when a config is composed, so that config.yaml records the absolute path
OmegaConf.register_new_resolver("maze_lab_outputs", lambda: str(default_outputs_dir()), replace=True)

MAZE_ALIASES: dict[str, dict[str, str]] = {
    "env": {"tutorial_cutting_2d_flat": "cutting2d_flat", "tutorial_cutting_2d_struct": "cutting2d_struct",
            "tutorial_cutting_2d_struct_masked": "cutting2d_struct_masked"},
    "model": {"tutorial_cutting_2d_flat": "cutting2d_flat", "tutorial_cutting_2d_struct": "cutting2d_struct",
              "tutorial_cutting_2d_struct_masked": "cutting2d_struct_masked"},
    "wrappers": {"vector_obs": "observation_normalization", "tutorial_cutting_2d": "cutting2d"},
}
"""Maze's option names that mean the same here: group -> Maze name -> maze-lab option."""

_ROLLOUT_HINT = ("maze-lab rolls out the policy of a trained run with `maze-lab rollout RUN_DIR --episodes N` "
                 "(Python: load_run(RUN_DIR).rollout(N)); heuristic and random policies roll out with "
                 "maze_lab.core.rollout.SequentialRolloutRunner")
MAZE_HINTS: dict[str, dict[str, str]] = {
    "runner": {name: f"'{name}' is one of Maze's rollout runners; maze-lab trains with runner=dev (envs in this "
                     f"process) or runner=local (one process per env); {_ROLLOUT_HINT}"
               for name in ("sequential", "parallel")},
    "critic": {"template_state_action": "maze-lab's state-action critic (two flatten-concat Q networks, for "
                                        "algorithm=sac) is critic=state_action"},
    "env": {"tutorial_cutting_2d_basic": "maze-lab's finished Cutting-2D env is 'cutting2d_flat'",
            "tutorial_cutting_2d_events": "maze-lab's finished Cutting-2D env is 'cutting2d_flat'"},
}
"""Maze's option names without an equivalent here: group -> Maze name -> what to use instead."""

MAZE_KEY_HINTS: dict[str, str] = {
    "policy": f"'policy' is a group of Maze's rollout config (conf_rollout), not of training; {_ROLLOUT_HINT}",
    "hydra": "maze-lab composes configs with Hydra but does not run Hydra's app: runs go to "
             "<log_base_dir>/<experiment_name>/<timestamp> (set log_base_dir=DIR or $MAZE_LAB_OUTPUTS), and grids run "
             "with `maze-lab sweep key=a,b,c --jobs N`",
}
"""Root keys of Maze command lines that maze-lab does not have, with what to do instead."""


def builtin_config_dirs() -> list[Path]:
    """maze-lab's own config directories (the package's and the Cutting-2D example's), found without importing
    the example (which would import matplotlib)."""
    spec = importlib.util.find_spec("maze_lab.examples.cutting2d")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    dirs = [Path(__file__).resolve().parents[1] / "conf"]
    return dirs + [Path(loc) / "conf" for loc in locations[:1]]


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


def _check_option(group: str, name: str, options: dict[str, list[str]]) -> str:
    """The option to use for ``group=name`` (Maze's names mapped to maze-lab's); unknown ones are refused."""
    if group not in options:
        hint = MAZE_KEY_HINTS.get(group)
        raise ConfigurationError(f"unknown config group '{group}'; valid groups: {', '.join(options)}"
                                 + (f" ({hint})" if hint else ""))
    if name in options[group]:
        return name
    alias = MAZE_ALIASES.get(group, {}).get(name)
    if alias is not None and alias in options[group]:
        return alias
    hint = MAZE_HINTS.get(group, {}).get(name)
    if group == "experiment":
        hint = f"experiment=NAME picks an experiment file; to name the runs' folder set experiment_name={name}"
    raise ConfigurationError(
        f"unknown option '{name}' for config group '{group}'; valid options: {', '.join(options[group])}"
        + (f" ({hint})" if hint else "")
    )


def parse_override(word: str) -> tuple[str, list[Any], bool]:
    """One command-line override read with Hydra's override grammar, as Maze's command lines are: its key (a leading
    ``+`` dropped), its values, and whether it is a sweep (``a,b,c``, ``range(1,4)``, ``choice(a,b)``: several values).
    Values are Hydra's: ``0.001``, ``1e-3``, ``[64,64]``, ``{type: linear, start: 0.1}``, ``true``, ``null``, quoted
    text (``'a,b'``); anything else is text (``CartPole-v1``, ``ALE/Pong-v5``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import OverrideParseException

    if "=" not in word:
        raise ConfigurationError(f"override '{word}' must look like key=value (e.g. algorithm=a2c, "
                                 f"algorithm.lr=0.001)")
    try:
        override = OverridesParser.create().parse_overrides([word])[0]
    except OverrideParseException as err:
        raise ConfigurationError(f"override '{word}' is not valid override syntax: {' '.join(str(err).split())[:300]}"
                                 f" (quote a value with commas or brackets that is text: key='a,b')") from None
    if override.type == OverrideType.DEL:
        raise ConfigurationError(f"override '{word}': deleting a key (~key) is not supported; set it to null instead")
    key = override.key_or_group
    if override.package:
        key = f"{key}@{override.package}"
    if not override.is_sweep_override():
        return key, [_plain_value(override.value())], False
    try:
        values = list(override.sweep_iterator())
    except Exception:  # noqa: BLE001 - interval() and other sweeps without a list of values
        raise ConfigurationError(f"override '{word}': a sweep needs a list of values (a,b,c, range(...) or "
                                 f"choice(...)); interval(...) is for hyperparameter search (maze-lab optimize with a "
                                 f"search space)") from None
    return key, [_plain_value(v) for v in values], True


def _plain_value(value: Any) -> Any:
    """Hydra's parsed value as plain Python (its containers hold Hydra's types for quoted text)."""
    if isinstance(value, dict):
        return {str(k): _plain_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_value(v) for v in value]
    return value


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
        where = ".".join(parts[:i]) or "the root config"
        if isinstance(node, ListConfig):
            node = node[_list_index(key, where, node, part)]
            continue
        if not isinstance(node, DictConfig) or part not in node:
            valid = sorted(node.keys()) if isinstance(node, DictConfig) else []
            raise ConfigurationError(f"unknown config key '{key}': '{part}' is not in {where}; valid keys there: "
                                     f"{', '.join(map(str, valid))}")
        node = node[part]
    last = parts[-1]
    if isinstance(node, ListConfig):
        index = _list_index(key, ".".join(parts[:-1]), node, last)
        old = node[index]
        node[index] = _check_type(key, OmegaConf.to_container(old) if isinstance(old, DictConfig | ListConfig)
                                  else old, value)
        return
    if not isinstance(node, DictConfig):
        raise ConfigurationError(f"cannot set '{key}': '{'.'.join(parts[:-1])}' is not a mapping")
    if last not in node:
        # free-form mappings (wrapper parameters, env kwargs) may gain keys; typed sections may not, except that
        # every field of the algorithm's config class is a key of the algorithm section
        if _typed_section(parts):
            hints = algorithm_fields(cfg.algorithm) if parts[:-1] == ["algorithm"] else {}
            if last in hints:
                node[last] = _check_hint(key, hints[last], value)
                return
            where = f"'{'.'.join(parts[:-1])}'" if len(parts) > 1 else "the root config"
            valid = sorted({*map(str, node.keys()), *hints}) if parts[:-1] == ["algorithm"] else \
                sorted(map(str, node.keys()))
            raise ConfigurationError(f"unknown config key '{key}'; valid keys in {where}: {', '.join(valid)}")
        node[last] = value
        return
    node[last] = _check_type(key, OmegaConf.to_container(node[last]) if isinstance(node[last], DictConfig | ListConfig)
                             else node[last], value)


def _list_index(key: str, where: str, node: ListConfig, part: str) -> int:
    """The list position ``part`` names in an override key (``model.critic.networks.0.hidden_units``)."""
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigurationError(f"unknown config key '{key}': {where} is a list of {len(node)} item(s); index it with "
                                 f"0..{len(node) - 1} (e.g. '{where}.0.<key>'), or replace the whole list "
                                 f"('{where}=[...]')")
    return int(part)


def _typed_section(parts: list[str]) -> bool:
    """Sections whose keys are fixed (dataclass parameters, runner settings, root keys)."""
    return len(parts) == 1 or parts[0] in ("algorithm", "runner")


# The trainer modules import torch; their config classes live in a module that does not, so that a configuration
# is checked before torch is imported. tests/run/test_config.py checks that both names are the same class.
_LIGHT_ALGORITHM_CONFIGS = {
    "maze_lab.train.trainers.ppo.PPOAlgorithmConfig": "maze_lab.train.trainers.common.config.PPOAlgorithmConfig",
    "maze_lab.train.trainers.a2c.A2CAlgorithmConfig": "maze_lab.train.trainers.common.config.A2CAlgorithmConfig",
    "maze_lab.train.trainers.sac.SACAlgorithmConfig": "maze_lab.train.trainers.sac.config.SACAlgorithmConfig",
    "maze_lab.train.trainers.impala.ImpalaAlgorithmConfig": "maze_lab.train.trainers.impala.config.ImpalaAlgorithmConfig",  # noqa: E501
    "maze_lab.train.trainers.es.ESAlgorithmConfig": "maze_lab.train.trainers.es.config.ESAlgorithmConfig",
    "maze_lab.train.trainers.bc.BCAlgorithmConfig": "maze_lab.train.trainers.bc.config.BCAlgorithmConfig",
}


def algorithm_config_class(target: str) -> type:
    """The algorithm config class named by an algorithm section's ``_target_`` (maze-lab's own without torch)."""
    cls = locate(_LIGHT_ALGORITHM_CONFIGS.get(target, target))
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise ConfigurationError(f"algorithm._target_ '{target}' is not an algorithm config class (a dataclass such "
                                 f"as maze_lab.train.trainers.ppo.PPOAlgorithmConfig)")
    return cls


def algorithm_fields(section: Any) -> dict[str, Any]:
    """Field name -> type hint of the algorithm config class of an algorithm section (empty without one)."""
    target = section.get("_target_") if isinstance(section, DictConfig | Mapping) else None
    if not isinstance(target, str):
        return {}
    cls = algorithm_config_class(target)
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


def _hint_name(hint: Any) -> str:
    if hint is type(None):
        return "None"
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return " or ".join(_hint_name(h) for h in typing.get_args(hint))
    origin = typing.get_origin(hint)
    return getattr(origin or hint, "__name__", str(hint))


def _check_hint(key: str, hint: Any, value: Any) -> Any:
    """Return ``value`` (converted where lossless) if it fits the type hint, else raise naming the expected type."""
    if hint is Any:
        return value
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        for member in typing.get_args(hint):
            try:
                return _check_hint(key, member, value)
            except ConfigurationError:
                continue
    elif hint is type(None):
        if value is None:
            return value
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    else:
        origin = typing.get_origin(hint) or hint
        if origin in (dict, Mapping) and isinstance(value, Mapping):
            return value
        if origin in (list, tuple) and isinstance(value, list | tuple):
            return value
        if isinstance(origin, type) and (isinstance(value, origin) or isinstance(value, Mapping)):
            return value  # e.g. a Schedule given as its config dict
    raise ConfigurationError(f"override '{key}': expected a value of type {_hint_name(hint)}, got "
                             f"{_type_name(value)} {value!r}")


def algorithm_params(cfg: DictConfig) -> tuple[type, dict[str, Any]]:
    """The algorithm config class and its parameters as a run uses them (root ``n_epochs`` and ``seed`` applied)."""
    params = OmegaConf.to_container(cfg.algorithm)
    target = params.pop("_target_", None)
    if target is None:
        raise ConfigurationError("the algorithm config needs a '_target_' naming its config class "
                                 "(maze_lab.train.trainers.ppo.PPOAlgorithmConfig or ...a2c.A2CAlgorithmConfig)")
    cls = algorithm_config_class(target)
    n_epochs = root_int(cfg, "n_epochs", "an int >= 0 (0 or null: until early stopping)")
    if n_epochs is not None:
        params["n_epochs"] = n_epochs
    if params.get("seed") is None:
        params["seed"] = root_int(cfg, "seed", "an int (or null: unseeded)")
    return cls, params


def root_int(cfg: DictConfig, key: str, expected: str) -> int | None:
    """The root config value ``key`` as an int (None where null); anything else (``n_epochs=abc``, whose root default
    is null and so takes any type) is refused naming the key, ``expected`` and what was given."""
    value = cfg.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{key} must be {expected}, got {_type_name(value)} {value!r}")
    return value


def build_algorithm_config(cfg: DictConfig) -> Any:
    """The algorithm config object of a composed configuration; invalid values raise ConfigurationError."""
    cls, params = algorithm_params(cfg)
    if params.get("rollout_evaluator") is not None:
        raise ConfigurationError("algorithm.rollout_evaluator is built by the run from runner.eval_concurrency, "
                                 "algorithm.eval_repeats and algorithm.deterministic_eval; set those instead")
    try:
        return cls.from_dict(params)
    except (TypeError, ValueError) as err:
        raise ConfigurationError(f"algorithm config: {err}") from err


TRAJECTORY_SUFFIX = ".trajectory.zip"
"""The name ending of recorded episode files (``maze_lab.core.trajectory.files.SUFFIX``, without importing numpy)."""

_RECORD_HINT = ("record episodes with `maze-lab rollout RUN_DIR --episodes N` (Python: RunContext.rollout, or "
                "SequentialRolloutRunner(..., trajectory_dir=DIR) for a heuristic policy)")


def imitation_dataset_dir(value: Any, key: str = "algorithm.dataset") -> Path:
    """The directory of recorded episodes that ``key`` names: a directory holding ``*.trajectory.zip`` files
    (searched recursively), or a run directory (its ``trajectories/``). Raises ConfigurationError naming ``key``
    and what is expected where it is unset, missing, empty or holds no recorded episodes."""
    from maze_lab.run.run_dir import MARKER

    expected = "a directory of recorded episodes (*.trajectory.zip files) or a run directory holding trajectories/"
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ConfigurationError(f"{key} is not set; behavioural cloning needs {expected}: {key}=DIR; {_RECORD_HINT}")
    if not isinstance(value, str | Path):
        raise ConfigurationError(f"{key} must be a path ({expected}), got {type(value).__name__} {value!r}")
    path = Path(value).expanduser().resolve()
    if not path.exists():
        raise ConfigurationError(f"{key}={value}: {path} does not exist; expected {expected}")
    if not path.is_dir():
        raise ConfigurationError(f"{key}={value}: {path} is a file, not a directory; expected {expected}")
    if (path / MARKER).is_file():
        # a run directory: only the episodes it recorded, not anything else below it
        episodes = path / "trajectories"
        if not (episodes.is_dir() and any(p.is_file() for p in episodes.rglob(f"*{TRAJECTORY_SUFFIX}"))):
            raise ConfigurationError(f"{key}={value}: the run directory {path} has no recorded episodes in "
                                     f"trajectories/; {_RECORD_HINT}")
        return episodes
    if not any(p.is_file() for p in path.rglob(f"*{TRAJECTORY_SUFFIX}")):
        others = sorted(p.name for p in path.iterdir())[:5]
        found = f"it holds {others}" if others else "it is empty"
        raise ConfigurationError(f"{key}={value}: {path} holds no recorded episodes ({found}); expected {expected}; "
                                 f"{_RECORD_HINT}")
    return path


def learns_from_data(algorithm: Any) -> bool:
    """Whether ``algorithm`` is the config of a trainer that reads recorded episodes instead of a training env."""
    from maze_lab.train.trainers.bc.config import BCAlgorithmConfig

    return isinstance(algorithm, BCAlgorithmConfig)


def validate_config(cfg: DictConfig, explicit: Iterable[str] = ()) -> None:
    """Check a composed configuration as far as can be done without building envs or importing torch.

    :param explicit: the dotted keys the user set (overrides): a value set on purpose that cannot work as asked
        (``algorithm.batch_size`` larger than a rollout) is refused, where a default is used as it works.
    """
    algorithm = build_algorithm_config(cfg)
    if learns_from_data(algorithm):
        imitation_dataset_dir(algorithm.dataset)
    epochs = getattr(algorithm, "n_epochs", 0)
    if isinstance(epochs, int) and epochs < 0:
        key = "n_epochs" if cfg.get("n_epochs") is not None else "algorithm.n_epochs"
        raise ConfigurationError(f"{key} must be >= 0 (0 or null: until early stopping), got {epochs}")
    runner = cfg.runner
    if runner.get("vector_env") not in ("sequential", "subprocess", "ray", "processes"):
        raise ConfigurationError(f"runner.vector_env must be 'sequential' (runner=dev) or 'subprocess' (runner=local), "
                                 f"or rollout workers: 'processes' (runner=processes) or 'ray' (runner=ray), got "
                                 f"{runner.get('vector_env')!r}")
    if runner.get("vector_env") == "processes":
        from maze_lab.train.process_rollouts import validate_process_runner

        validate_process_runner(runner, algorithm)
    if runner.get("vector_env") == "ray":
        from maze_lab.train.ray_config import validate_ray_runner

        validate_ray_runner(runner, algorithm)
    for key in ("concurrency", "eval_concurrency"):
        if int(runner.get(key, 1)) < 1:
            raise ConfigurationError(f"runner.{key} must be >= 1, got {runner.get(key)}")
    if cfg.get("n_epochs") is not None and int(cfg.n_epochs) < 0:
        raise ConfigurationError(f"n_epochs must be >= 0 (0 or null: until early stopping), got {cfg.n_epochs}")
    threads = root_int(cfg, "torch_threads", "an int >= 1, or null for torch's default")
    if threads is not None and threads < 1:
        raise ConfigurationError(f"torch_threads must be >= 1, or null for torch's default, got {threads}")
    if "algorithm.batch_size" in set(explicit):
        _check_batch_size(cfg, algorithm)


def _check_batch_size(cfg: DictConfig, algorithm: Any) -> None:
    """Refuse a PPO ``batch_size`` larger than one rollout (``n_rollout_steps`` x training envs): its minibatches
    are cut from one rollout, so it would train on whole rollouts while the config says otherwise."""
    batch, steps = getattr(algorithm, "batch_size", None), getattr(algorithm, "n_rollout_steps", None)
    if not hasattr(algorithm, "n_optimization_epochs") or not isinstance(batch, int) or not isinstance(steps, int):
        return  # minibatches of rollouts are PPO's
    runner = cfg.runner
    if runner.get("vector_env") in ("ray", "processes"):
        n_envs = int(runner.get("n_workers", 1)) * int(runner.get("envs_per_worker", 1))
        envs = f"{n_envs} envs (runner.n_workers x runner.envs_per_worker)"
    else:
        n_envs = int(runner.get("concurrency", 1))
        envs = f"{n_envs} env{'s' if n_envs != 1 else ''} (runner.concurrency)"
    if batch <= steps * n_envs:
        return
    if getattr(algorithm, "bounded_box", None):  # where every action head is a bounded Box its values may apply
        bounded_steps = algorithm.for_bounded_box_actions()[0].n_rollout_steps
        if bounded_steps != steps and bounded_box_actions(cfg) is not False:
            steps = bounded_steps
            if batch <= steps * n_envs:
                return
    rollout = steps * n_envs
    raise ConfigurationError(f"algorithm.batch_size={batch} is larger than a rollout of algorithm.n_rollout_steps="
                             f"{steps} x {envs} = {rollout} samples, from which PPO cuts its minibatches; set "
                             f"algorithm.batch_size to at most {rollout}, or raise algorithm.n_rollout_steps or the "
                             f"number of envs")


def bounded_box_actions(cfg: DictConfig) -> bool | None:
    """Whether every action head of ``cfg``'s env is a bounded Box (PPO's ``bounded_box`` values then apply).

    Known for Gymnasium envs (``env.name``, read from the unwrapped env's action space); None where it is only
    known once the run's env is built.
    """
    env = cfg.get("env") if isinstance(cfg, DictConfig) else None
    if not isinstance(env, DictConfig) or not env.get("name"):
        return None
    if not str(env.get("_target_", "")).endswith(("make_gym_maze_env", "GymMazeEnv")):
        return None
    try:
        import gymnasium as gym
        import numpy as np

        probe = gym.make(str(env.name))
        space = probe.action_space
        probe.close()
    except Exception:  # noqa: BLE001 - an env that cannot be made here is reported when the run builds it
        return None
    heads = list(space.spaces.values()) if isinstance(space, gym.spaces.Dict) else [space]
    return all(isinstance(h, gym.spaces.Box) and bool(np.all(np.isfinite(h.low)) and np.all(np.isfinite(h.high)))
               for h in heads)


def describe_run(cfg: DictConfig, env_factory: Any = None) -> str:
    """One line on what a run of ``cfg`` trains: env, algorithm, model, runner and seed (the start of a command
    says what runs).

    :param env_factory: the Python env factory the run was given instead of the env config, if any.
    """
    env = cfg.get("env") or {}
    if env_factory is not None:
        env_text = f"your env factory {getattr(env_factory, '__qualname__', type(env_factory).__name__)}"
    elif env.get("name"):
        env_text = f"{env.get('name')}"
    else:
        env_text = str(env.get("_target_", "?")).rsplit(".", 1)[-1]
    algorithm = str(OmegaConf.select(cfg, "algorithm._target_", default="?")).rsplit(".", 1)[-1]
    model = str(OmegaConf.select(cfg, "model._target_", default="?")).rsplit(".", 1)[-1]
    runner = cfg.get("runner") or {}
    envs = runner.get("n_workers") or runner.get("concurrency")
    where = f"runner {runner.get('vector_env', '?')}" + (f" ({envs} envs)" if envs else "")
    name = algorithm.removesuffix("AlgorithmConfig")
    name = {"Impala": "IMPALA"}.get(name, name)
    return (f"env {env_text}, algorithm {name}, model {model}, {where}, "
            f"seed {cfg.get('seed')}")


def training_plan(cfg: DictConfig, n_epochs: int | None = None, bounded_box: bool | None = None) -> str:
    """One line on how long a run of ``cfg`` trains: a number of epochs, or until early stopping or Ctrl-C.

    :param n_epochs: epochs asked for by ``train(n_epochs)``; None: the configured ones.
    :param bounded_box: whether every action head is a bounded Box (then the ``algorithm.bounded_box`` values
        replace the epoch length); None: found out with :func:`bounded_box_actions` where it can be.
    """
    algorithm = build_algorithm_config(cfg)
    if learns_from_data(algorithm):
        epochs = int(n_epochs) if n_epochs is not None else int(algorithm.n_epochs)
        if epochs > 0:
            return (f"training for {epochs} epoch{'s' if epochs != 1 else ''}, each a pass over the recorded "
                    f"episodes of algorithm.dataset")
        return ("no n_epochs given: passes over the recorded episodes of algorithm.dataset until you stop it with "
                "Ctrl-C (the last checkpoint stays); set n_epochs=N to end by itself")
    bounded = bounded_box_actions(cfg) if bounded_box is None else bounded_box
    bounded_config, changes = (algorithm.for_bounded_box_actions() if getattr(algorithm, "bounded_box", None)
                               else (algorithm, {}))
    note = ""
    if bounded and changes:
        algorithm = bounded_config
        note = " (algorithm.bounded_box values: every action head is a bounded Box)"
    elif bounded is None and "epoch_length" in changes:
        note = (f" (the bounded-Box defaults may apply: where every action head is a bounded Box, "
                f"algorithm.bounded_box trains epochs of {changes['epoch_length']} updates)")
    epochs = int(n_epochs) if n_epochs is not None else int(algorithm.n_epochs)
    patience, length = int(algorithm.patience), int(algorithm.epoch_length)
    updates = f"{length} update{'s' if length != 1 else ''}{note}"
    if epochs > 0:
        plan = f"training for {epochs} epoch{'s' if epochs != 1 else ''} of {updates}"
        if 0 < patience < epochs:
            plan += f", or less where {patience} epochs in a row bring no better evaluation reward (algorithm.patience)"
        return plan
    if patience > 0:
        return (f"no n_epochs given: training until early stopping, after {patience} epochs in a row without a better "
                f"evaluation reward (algorithm.patience), in epochs of {updates}; stop with Ctrl-C (the last "
                f"checkpoint stays), or set n_epochs=N")
    return ("no n_epochs given and algorithm.patience=0: training until you stop it with Ctrl-C (the last checkpoint "
            "stays); set n_epochs=N to end by itself")


def compose_config(components: Mapping[str, Any] | None = None, overrides: Mapping[str, Any] | None = None,
                   experiment: str | None = None, config_modules: Iterable[str] = (),
                   config_name: str = "conf_train") -> DictConfig:
    """Compose a run configuration.

    :param components: group -> option name (str) or a config dict replacing the group's value.
    :param overrides: dotted key -> value (a group name with a str value selects an option; ``experiment`` picks
        the experiment file, as ``experiment=`` does; ``experiment_name`` names the runs' folder).
    :param experiment: an experiment file (group ``experiment``) applied on top.
    :param config_modules: importable packages with further config groups (searched first).

    A template model (``TemplateModelComposer``) builds its critic networks itself: unless a critic option is chosen
    (here or by the experiment file), it keeps the critic of its model file instead of the default ``shared`` one.
    """
    config_modules = list(config_modules)
    options = available_options(config_modules)
    components = dict(components or {})
    overrides = dict(overrides or {})
    for key in list(overrides):
        if key in GROUPS and isinstance(overrides[key], str):
            components[key] = overrides.pop(key)
    if "experiment" in overrides:  # one meaning everywhere: experiment=NAME picks the experiment file, as on the CLI
        named = overrides.pop("experiment")
        if not isinstance(named, str) or not named:
            raise ConfigurationError(f"experiment={named!r}: experiment=NAME picks an experiment file by name; "
                                     f"valid options: {', '.join(options['experiment'])}")
        if experiment and experiment != named:
            raise ConfigurationError(f"two experiments given: experiment={experiment!r} and the override "
                                     f"experiment={named!r}")
        experiment = named
    hydra_overrides = []
    dict_components = {}
    for group, value in components.items():
        if value is None:
            continue
        if group not in GROUPS:
            hint = MAZE_KEY_HINTS.get(group)
            raise ConfigurationError(f"unknown config group '{group}'; valid groups: {', '.join(GROUPS)}"
                                     + (f" ({hint})" if hint else ""))
        if isinstance(value, str):
            hydra_overrides.append(f"{group}={_check_option(group, value, options)}")
        elif isinstance(value, Mapping | DictConfig):
            dict_components[group] = value
        else:
            raise ConfigurationError(f"component '{group}' must be an option name or a config dict here, got "
                                     f"{type(value).__name__}")
    if experiment:
        hydra_overrides.append(f"+experiment={_check_option('experiment', experiment, options)}")
    for key in overrides:
        hint = MAZE_KEY_HINTS.get(key.replace("/", ".").split(".", 1)[0])
        if hint is not None:
            raise ConfigurationError(f"unknown config key '{key}': {hint}")
    dirs = config_dirs(config_modules)
    primary = next((d for d in dirs if (d / f"{config_name}.yaml").exists()), None)
    if primary is None:
        raise ConfigurationError(f"no root config '{config_name}.yaml' in the search path {[str(d) for d in dirs]}")
    others = [d for d in dirs if d != primary]
    if others:
        hydra_overrides.append("hydra.searchpath=[" + ",".join(f"file://{d}" for d in others) + "]")
    try:
        cfg, choices = _hydra_compose(primary, config_name, hydra_overrides)
    except Exception as err:  # noqa: BLE001 - Hydra's composition errors have several types
        if components.get("critic") is not None or "critic/" not in str(err):
            raise
        # the model file brings its own critic, which the default critic option cannot be merged into: keep the
        # model's (as for template models below); a model without one still needs a critic option that fits it
        cfg, choices = _hydra_compose(primary, config_name, [*hydra_overrides, "critic=none"])
        if not cfg.model.get("critic"):
            raise ConfigurationError(f"the default critic option does not fit model '{choices.get('model')}' "
                                     f"({' '.join(str(err).split())[:300]}); choose a critic option that fits it "
                                     f"(critic=...), or critic=none for none") from None
    if (components.get("critic") is None and choices.get("critic") == DEFAULT_CRITIC
            and str(OmegaConf.select(cfg, "model._target_", default="")).endswith("TemplateModelComposer")):
        cfg, _ = _hydra_compose(primary, config_name, [*hydra_overrides, "critic=none"])
        if not cfg.model.get("critic"):
            cfg.model.critic = {"_target_": "maze_lab.agent.composers.critics.SharedStateCriticComposer"}
    if "experiment" in cfg:
        raise ConfigurationError(f"the configuration sets a root key 'experiment' ({cfg.experiment!r}), which has no "
                                 f"meaning: experiment=FILE picks an experiment file, and the runs' folder is named by "
                                 f"experiment_name (in an experiment file: experiment_name: {cfg.experiment})")
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


def _hydra_compose(config_dir: Path, config_name: str, overrides: list[str]) -> tuple[DictConfig, dict[str, Any]]:
    """Compose with Hydra; returns a plain (unresolved, not struct) config and the option chosen per group."""
    from hydra import compose, initialize_config_dir

    with _HYDRA_LOCK, initialize_config_dir(config_dir=str(config_dir), version_base=None):
        cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
    OmegaConf.set_struct(cfg, False)
    plain = OmegaConf.to_container(cfg, resolve=False)
    plain.pop("hydra", None)
    return OmegaConf.create(plain), choices


def parse_cli_overrides(args: Iterable[str]) -> tuple[dict[str, str], dict[str, Any]]:
    """Split ``group=option`` selections from ``dotted.key=value`` overrides (Hydra's override grammar, see
    :func:`parse_override`); several values for one key are a sweep, which ``maze-lab sweep`` runs."""
    components, overrides = {}, {}
    for arg in args:
        key, values, sweep = parse_override(arg)
        if sweep:
            raise ConfigurationError(f"override '{arg}' gives {len(values)} values: that is a sweep, one run per "
                                     f"value (maze-lab sweep {arg}); quote a text value that holds commas: "
                                     f"{key}='...'")
        value = values[0]
        if key in GROUPS or key == "experiment":
            components[key] = value if isinstance(value, str) else str(value)
        else:
            overrides[key] = value
    return components, overrides


def split_values(text: str) -> list[str]:
    """Split ``a,b,c`` at commas outside brackets, braces and quotes (``[64,64],[32,32]`` is two values)."""
    values, depth, quote, current = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            values.append("".join(current))
            current = []
            continue
        current.append(ch)
    values.append("".join(current))
    return values
