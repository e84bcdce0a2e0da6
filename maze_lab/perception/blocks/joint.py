"""Joint blocks: common chains of blocks (conv/flatten/dense, conv/pooling) packed into one block."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from maze_lab.perception.blocks.base import PerceptionBlock, TensorDict
from maze_lab.perception.blocks.feed_forward import DenseBlock, StridedConvolutionBlock, VGGConvolutionBlock
from maze_lab.perception.blocks.general import FlattenBlock, GlobalAveragePoolingBlock
from maze_lab.perception.blocks.utils import NonLinType


class _ChainBlock(PerceptionBlock):
    """Runs a chain of single-input blocks; internal tensors use the out key plus a stage suffix."""

    def _build_chain(self, stages: list[tuple[type[PerceptionBlock], dict[str, Any]]]) -> None:
        key, shape = self.in_keys[0], self.in_shapes[0]
        blocks = []
        for i, (cls, params) in enumerate(stages):
            out_key = self.out_keys[0] if i == len(stages) - 1 else f"{self.out_keys[0]}_{cls.__name__}"
            block = cls(in_keys=key, out_keys=out_key, in_shapes=shape, **params)
            blocks.append(block)
            key, shape = out_key, block.out_shapes()[0]
        self.chain = nn.ModuleList(blocks)
        self._out_shapes = [shape]

    def forward(self, block_input: TensorDict) -> TensorDict:
        """Run the chain."""
        out = block_input
        for block in self.chain:
            out = block(out)
        return out


class FlattenDenseBlock(_ChainBlock):
    """Flattens the last ``num_flatten_dims`` dims, then applies a :class:`DenseBlock`."""

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 num_flatten_dims: int, hidden_units: Sequence[int], non_lin: NonLinType = nn.ReLU):
        super().__init__(in_keys, out_keys, in_shapes)
        self._build_chain([(FlattenBlock, {"num_flatten_dims": num_flatten_dims}),
                           (DenseBlock, {"hidden_units": hidden_units, "non_lin": non_lin})])


class VGGConvolutionDenseBlock(_ChainBlock):
    """VGG-style conv stacks on (C, H, W), flattening and a dense stack."""

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 hidden_channels: Sequence[int], hidden_units: Sequence[int], non_lin: NonLinType = nn.ReLU):
        super().__init__(in_keys, out_keys, in_shapes)
        self._build_chain([(VGGConvolutionBlock, {"hidden_channels": hidden_channels, "non_lin": non_lin}),
                           (FlattenBlock, {"num_flatten_dims": 3}),
                           (DenseBlock, {"hidden_units": hidden_units, "non_lin": non_lin})])


class VGGConvolutionGAPBlock(_ChainBlock):
    """VGG-style conv stacks on (C, H, W) followed by global average pooling; output (channels,)."""

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 hidden_channels: Sequence[int], non_lin: NonLinType = nn.ReLU):
        super().__init__(in_keys, out_keys, in_shapes)
        self._build_chain([(VGGConvolutionBlock, {"hidden_channels": hidden_channels, "non_lin": non_lin}),
                           (GlobalAveragePoolingBlock, {})])


class StridedConvolutionDenseBlock(_ChainBlock):
    """Strided convolutions, flattening and a dense stack."""

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 hidden_channels: Sequence[int], hidden_kernels: int | Sequence[int], hidden_units: Sequence[int],
                 non_lin: NonLinType = nn.ReLU, convolution_dimension: int = 2,
                 hidden_strides: int | Sequence[int] = 2, hidden_dilations: int | Sequence[int] = 1,
                 hidden_padding: int | str | Sequence[int | str] = 1, padding_mode: str = "zeros"):
        super().__init__(in_keys, out_keys, in_shapes)
        self._build_chain([
            (StridedConvolutionBlock, {"hidden_channels": hidden_channels, "hidden_kernels": hidden_kernels,
                                       "non_lin": non_lin, "convolution_dimension": convolution_dimension,
                                       "hidden_strides": hidden_strides, "hidden_dilations": hidden_dilations,
                                       "hidden_padding": hidden_padding, "padding_mode": padding_mode}),
            (FlattenBlock, {"num_flatten_dims": convolution_dimension + 1}),
            (DenseBlock, {"hidden_units": hidden_units, "non_lin": non_lin}),
        ])
