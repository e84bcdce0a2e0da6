"""Perception blocks: torch modules on tensor dicts with shape inference and shape normalization."""

from __future__ import annotations

from maze_lab.core.utils.factory import ConfigurationError, locate
from maze_lab.perception.blocks.base import PerceptionBlock, ShapeError, ShapeNormalizationBlock
from maze_lab.perception.blocks.feed_forward import (
    ConvolutionBlock,
    DenseBlock,
    GraphConvBlock,
    StridedConvolutionBlock,
    VGGConvolutionBlock,
)
from maze_lab.perception.blocks.general import (
    ActionMaskingBlock,
    ConcatenationBlock,
    CorrelationBlock,
    FlattenBlock,
    FunctionalBlock,
    GlobalAveragePoolingBlock,
    LinearOutputBlock,
    MaskedGlobalPoolingBlock,
    MultiIndexSlicingBlock,
    RepeatToMatchBlock,
    SelfAttentionConvBlock,
    SelfAttentionSeqBlock,
    SliceBlock,
    TorchModelBlock,
)
from maze_lab.perception.blocks.inference import InferenceBlock
from maze_lab.perception.blocks.joint import (
    FlattenDenseBlock,
    StridedConvolutionDenseBlock,
    VGGConvolutionDenseBlock,
    VGGConvolutionGAPBlock,
)
from maze_lab.perception.blocks.recurrent import GRUBlock, GRULastStepBlock, LSTMBlock, LSTMLastStepBlock

BLOCK_REGISTRY: dict[str, type[PerceptionBlock]] = {
    cls.__name__: cls
    for cls in (
        ActionMaskingBlock, ConcatenationBlock, ConvolutionBlock, CorrelationBlock, DenseBlock, FlattenBlock,
        FlattenDenseBlock, FunctionalBlock, GRUBlock, GRULastStepBlock, GlobalAveragePoolingBlock, GraphConvBlock,
        InferenceBlock, LSTMBlock, LSTMLastStepBlock, LinearOutputBlock, MaskedGlobalPoolingBlock,
        MultiIndexSlicingBlock, RepeatToMatchBlock, SelfAttentionConvBlock, SelfAttentionSeqBlock, SliceBlock,
        StridedConvolutionBlock, StridedConvolutionDenseBlock, TorchModelBlock, VGGConvolutionBlock,
        VGGConvolutionDenseBlock, VGGConvolutionGAPBlock,
    )
}
"""Built-in blocks by class name."""


def block_type_from_name(name: str | type) -> type[PerceptionBlock]:
    """Resolve a block class from a class, its short name, a maze_lab/Maze dotted path or any dotted path."""
    if isinstance(name, type):
        if issubclass(name, PerceptionBlock):
            return name
        raise ConfigurationError(f"{name.__qualname__} is not a PerceptionBlock")
    short = name.rsplit(".", 1)[-1]
    if short in BLOCK_REGISTRY and (name == short or name.startswith(("maze.", "maze_lab."))):
        return BLOCK_REGISTRY[short]
    if "." in name:
        try:
            cls = locate(name)
        except ConfigurationError:
            cls = None
        if isinstance(cls, type) and issubclass(cls, PerceptionBlock):
            return cls
    raise ConfigurationError(
        f"unknown perception block {name!r}; valid names: {', '.join(sorted(BLOCK_REGISTRY))} "
        f"(or a dotted path to a PerceptionBlock subclass)"
    )


__all__ = ["BLOCK_REGISTRY", "PerceptionBlock", "ShapeError", "ShapeNormalizationBlock", "block_type_from_name",
           *sorted(BLOCK_REGISTRY)]
