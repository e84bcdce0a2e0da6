"""PreProcessingWrapper: applies configured pre-processors to observations and updates the spaces."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.utils.factory import ConfigurationError, _to_plain
from maze_lab.core.wrappers.observation_preprocessing.preprocessors import PRE_PROCESSOR_REGISTRY, PreProcessor
from maze_lab.core.wrappers.space_utils import (
    check_config_keys,
    ordered_dict_space,
    require_dict_spaces,
    resolve_registered_class,
)
from maze_lab.core.wrappers.wrapper import ObservationWrapper

_REQUIRED = ("observation", "_target_")
_OPTIONAL = ("keep_original", "config")


def resolve_pre_processor(name: str | type) -> type[PreProcessor]:
    """A PreProcessor class from its class name (e.g. ``"Rgb2GrayPreProcessor"``), a dotted path or itself."""
    return resolve_registered_class(name, PRE_PROCESSOR_REGISTRY, PreProcessor, "pre-processor")


class PreProcessingWrapper(ObservationWrapper):
    """Runs pre-processors on selected observations, in config order, and adapts the observation spaces.

    Each entry of ``pre_processor_mapping`` is a dict with

    - ``observation``: the observation to process; it may be the output of an earlier entry (cascading);
    - ``_target_``: the PreProcessor, by class name (``"Rgb2GrayPreProcessor"``) or dotted path;
    - ``keep_original`` (default False): keep the input next to the result; inputs not kept are removed
      after all entries ran, so several entries may read the same input;
    - ``config`` (default {}): the pre-processor's parameters.

    The result is called ``<observation>-<tag>`` (e.g. ``rgb_image-rgb2gray``) and is appended to the
    observation dict of every policy key that has the input.
    """

    # the mapping's ``_target_`` entries name pre-processors that need the observation space, so wrap_env must
    # pass them on as plain config instead of instantiating them
    instantiate_params: ClassVar[bool] = False

    def __init__(self, env: Any, pre_processor_mapping: Sequence[Mapping[str, Any]]):
        super().__init__(env)
        require_dict_spaces(env.observation_spaces_dict, "observation", "PreProcessingWrapper")
        mapping = _to_plain(pre_processor_mapping)
        if isinstance(mapping, Mapping):
            mapping = [mapping]
        self.pre_processor_mapping: list[dict[str, Any]] = []
        for i, entry in enumerate(mapping):
            where = f"PreProcessingWrapper pre_processor_mapping[{i}]"
            check_config_keys(entry, _REQUIRED, _OPTIONAL, where)
            cfg = {"keep_original": False, "config": {}, **entry}
            cfg["config"] = dict(cfg["config"] or {})
            try:
                cfg["cls"] = resolve_pre_processor(cfg["_target_"])
            except ConfigurationError as err:
                raise ConfigurationError(f"{where}: {err}") from err
            self.pre_processor_mapping.append(cfg)

        # per policy key: the (input, output, processor) steps and the inputs to drop afterwards
        self._steps: dict[StepKey, list[tuple[str, str, PreProcessor]]] = {}
        self._drop: dict[StepKey, set[str]] = {}
        self._observation_spaces: dict[StepKey, gym.spaces.Dict] = {}
        used = [False] * len(self.pre_processor_mapping)
        seen: set[str] = set()
        for step_key, space in env.observation_spaces_dict.items():
            spaces = dict(space.spaces)
            steps, drop = [], set()
            for i, cfg in enumerate(self.pre_processor_mapping):
                obs = cfg["observation"]
                if obs not in spaces:
                    continue
                processor = _build(cfg["cls"], spaces[obs], cfg["config"], i)
                out_key = f"{obs}-{processor.tag}"
                if out_key in spaces:
                    raise ConfigurationError(f"PreProcessingWrapper pre_processor_mapping[{i}]: observation "
                                             f"'{out_key}' exists already (policy key {step_key!r})")
                spaces[out_key] = processor.processed_space()
                steps.append((obs, out_key, processor))
                used[i] = True
                if not cfg["keep_original"]:
                    drop.add(obs)
            seen.update(spaces)
            self._steps[step_key], self._drop[step_key] = steps, drop
            self._observation_spaces[step_key] = ordered_dict_space((k, s) for k, s in spaces.items() if k not in drop)
        for i, cfg in enumerate(self.pre_processor_mapping):
            if not used[i]:
                raise ConfigurationError(f"PreProcessingWrapper pre_processor_mapping[{i}]: no policy key has the "
                                         f"observation '{cfg['observation']}'; available observations (including "
                                         f"pre-processed ones): {sorted(seen)}")

    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Observation spaces after pre-processing."""
        return self._observation_spaces

    def observation(self, observation: dict) -> dict:
        """The pre-processed observation."""
        step_key = self.env.actor_id().step_key
        out = dict(observation)
        for obs, out_key, processor in self._steps[step_key]:
            out[out_key] = processor.process(out[obs])
        for obs in self._drop[step_key]:
            del out[obs]
        return out

    def get_pre_processors(self, step_key: StepKey | None = None) -> list[tuple[str, str, PreProcessor]]:
        """The (input, output, pre-processor) steps of a policy key (the first one by default)."""
        return list(self._steps[next(iter(self._steps)) if step_key is None else step_key])


def _build(cls: type[PreProcessor], space: gym.spaces.Space, config: dict[str, Any], index: int) -> PreProcessor:
    """Instantiate a pre-processor; unknown or missing parameters give an error with the valid ones."""
    params = inspect.signature(cls.__init__).parameters
    var_kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    valid = [n for n, p in params.items() if n not in ("self", "observation_space") and p.kind not in var_kinds]
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    unknown = sorted(k for k in config if k not in valid)
    if unknown and not takes_kwargs:
        raise ConfigurationError(f"PreProcessingWrapper pre_processor_mapping[{index}]: {cls.__name__} has no "
                                 f"parameter(s) {unknown}; valid parameters: {valid}")
    try:
        return cls(space, **config)
    except TypeError as err:
        raise ConfigurationError(f"PreProcessingWrapper pre_processor_mapping[{index}]: {cls.__name__}"
                                 f"({', '.join(config)}) failed: {err}; valid parameters: {valid}") from err
