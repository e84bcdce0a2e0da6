"""The ConcatModelBuilder: embed each observation by modality, concatenate, then hidden and recurrent blocks."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.perception.blocks import ConcatenationBlock, InferenceBlock, PerceptionBlock
from maze_lab.perception.builders.base import MASK_MODALITY, BaseModelBuilder


class ConcatModelBuilderKeys:
    """Reserved keys of the ConcatModelBuilder."""

    HIDDEN = "hidden"
    """Preset: block applied to the concatenated embeddings."""

    RECURRENCE = "recurrence"
    """Preset: recurrent block applied after the hidden block."""

    CONCAT = "concat"
    """Tensor: the concatenated modality embeddings."""

    LATENT = "latent"
    """Tensor: the final output of the perception network."""


class ConcatModelBuilder(BaseModelBuilder):
    """Embeds each observation with the block of its modality, concatenates the embeddings and runs the optional
    ``hidden`` and ``recurrence`` presets; the result is the tensor ``latent``.

    Observations without a modality are left out (with a warning); observations of modality ``mask`` are used
    only for action masking by the model composer.
    """

    PRESETS = (ConcatModelBuilderKeys.HIDDEN, ConcatModelBuilderKeys.RECURRENCE)

    def __init__(self, modality_config: Mapping[str, Any], observation_modality_mapping: Mapping[str, str],
                 shared_embedding_keys: Sequence[str] | Mapping[Any, Sequence[str]] | None = None,
                 action_masks: Mapping[str, str] | None = None):
        super().__init__(modality_config, observation_modality_mapping, shared_embedding_keys, action_masks)
        for preset in self.PRESETS:
            if preset not in self.modality_config:
                raise ConfigurationError(f"ConcatModelBuilder: modality_config needs the preset '{preset}' "
                                         f"(use {{}} to leave it out)")

    def _make(self, modality: str, in_key: str, out_key: str, in_shape: tuple[int, ...]) -> PerceptionBlock:
        cls = self.block_types[modality]
        try:
            return cls(in_keys=in_key, out_keys=out_key, in_shapes=in_shape, **self.block_params[modality])
        except TypeError as err:
            raise ConfigurationError(f"modality '{modality}': cannot build {cls.__name__} for '{in_key}' "
                                     f"{in_shape} with block_params {self.block_params[modality]}: {err}") from err

    def from_observation_space(self, observation_space: gym.spaces.Dict) -> InferenceBlock:
        """Build the perception network (observations -> ``latent``)."""
        blocks: dict[str, PerceptionBlock] = {}
        in_keys: list[str] = []
        in_shapes: list[tuple[int, ...]] = []
        for obs_key, space in observation_space.spaces.items():
            modality = self.modality_of(obs_key)
            if modality is None:
                warnings.warn(f"ConcatModelBuilder: observation '{obs_key}' has no entry in "
                              f"observation_modality_mapping and is not used by the model", stacklevel=2)
                continue
            if modality == MASK_MODALITY or modality not in self.block_types:
                continue
            shape = tuple(space.shape)
            block = self._make(modality, obs_key, f"{obs_key}_{self.block_types[modality].__name__}", shape)
            blocks[block.out_keys[0]] = block
            in_keys.append(obs_key)
            in_shapes.append(shape)
        if not blocks:
            raise ConfigurationError(
                f"ConcatModelBuilder: no observation is embedded; observations {list(observation_space.spaces)}, "
                f"mapping {self.observation_modality_mapping}"
            )
        has_hidden = ConcatModelBuilderKeys.HIDDEN in self.block_types
        has_rec = ConcatModelBuilderKeys.RECURRENCE in self.block_types
        key = ConcatModelBuilderKeys.CONCAT if (has_hidden or has_rec) else ConcatModelBuilderKeys.LATENT
        embeddings = list(blocks)
        shapes = [blocks[k].out_shapes()[0] for k in embeddings]
        ranks = {len(s) for s in shapes}
        if len(ranks) > 1:
            raise ConfigurationError(
                "ConcatModelBuilder: modality embeddings must have the same number of dims to be concatenated; got "
                + ", ".join(f"'{k}': {s}" for k, s in zip(embeddings, shapes, strict=True))
                + " (use blocks that end in a flat vector, e.g. VGGConvolutionDenseBlock)"
            )
        blocks[key] = ConcatenationBlock(in_keys=embeddings, out_keys=key, in_shapes=shapes, concat_dim=-1)
        for preset, last in ((ConcatModelBuilderKeys.HIDDEN, not has_rec), (ConcatModelBuilderKeys.RECURRENCE, True)):
            if preset not in self.block_types:
                continue
            out_key = ConcatModelBuilderKeys.LATENT if last else preset
            blocks[out_key] = self._make(preset, key, out_key, blocks[key].out_shapes()[0])
            key = out_key
        return InferenceBlock(in_keys=in_keys, out_keys=ConcatModelBuilderKeys.LATENT, in_shapes=in_shapes,
                              perception_blocks=blocks)
