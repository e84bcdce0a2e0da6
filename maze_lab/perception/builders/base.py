"""Model builders: architecture templates that turn an observation space into a perception network."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from maze_lab.core.utils.factory import ConfigurationError, _to_plain
from maze_lab.perception.blocks import InferenceBlock, PerceptionBlock, block_type_from_name

MASK_MODALITY = "mask"
"""Observations of this modality are not embedded; they mask the logits of the action head they belong to."""


class BaseModelBuilder(ABC):
    """Base of the template builders: modality blocks per observation plus preset blocks.

    :param modality_config: Per modality ``{"block_type": <block>, "block_params": {...}}``; an empty dict means
        the modality (or preset) is not used.
    :param observation_modality_mapping: Modality of each observation key.
    :param shared_embedding_keys: Tensors of the policy network the critic reuses as its input (None: no sharing);
        a list for all policy keys or a dict per policy key.
    :param action_masks: Observation key masking each action head; heads not listed are matched by name (see
        :mod:`maze_lab.perception.action_masks`).
    """

    PRESETS: tuple[str, ...] = ()

    def __init__(self, modality_config: Mapping[str, Any], observation_modality_mapping: Mapping[str, str],
                 shared_embedding_keys: Sequence[str] | Mapping[Any, Sequence[str]] | None = None,
                 action_masks: Mapping[str, str] | None = None):
        self.modality_config: dict[str, dict] = dict(_to_plain(modality_config) or {})
        self.observation_modality_mapping: dict[str, str] = dict(_to_plain(observation_modality_mapping) or {})
        self.shared_embedding_keys = _to_plain(shared_embedding_keys)
        self.action_masks: dict[str, str] = dict(_to_plain(action_masks) or {})
        self.block_types: dict[str, type[PerceptionBlock]] = {}
        self.block_params: dict[str, dict] = {}
        for modality, cfg in self.modality_config.items():
            if not cfg:
                continue
            if not isinstance(cfg, Mapping) or set(cfg) - {"block_type", "block_params"} or "block_type" not in cfg:
                raise ConfigurationError(
                    f"{type(self).__name__}: modality '{modality}' needs a dict with 'block_type' and 'block_params', "
                    f"got {cfg!r}"
                )
            try:
                self.block_types[modality] = block_type_from_name(cfg["block_type"])
            except ConfigurationError as err:
                raise ConfigurationError(f"modality '{modality}': {err}") from err
            self.block_params[modality] = dict(cfg.get("block_params") or {})
        valid = set(self.modality_config) | {MASK_MODALITY}
        for obs_key, modality in self.observation_modality_mapping.items():
            if modality not in valid or modality in self.PRESETS:
                raise ConfigurationError(
                    f"{type(self).__name__}: observation '{obs_key}' maps to unknown modality '{modality}'; "
                    f"modalities in modality_config: {', '.join(sorted(set(self.modality_config) - set(self.PRESETS)))}"
                    f" (or '{MASK_MODALITY}')"
                )

    def modality_of(self, obs_key: str) -> str | None:
        """The modality of an observation key (None where it is not mapped)."""
        return self.observation_modality_mapping.get(obs_key)

    @abstractmethod
    def from_observation_space(self, observation_space: gym.spaces.Dict) -> InferenceBlock:
        """A perception network from the observation space to the tensor ``latent``."""
