"""Feed-forward blocks: dense stacks, convolutions (plain, VGG-style, strided) and graph convolutions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from maze_lab.perception.blocks.base import ShapeError, ShapeNormalizationBlock, TensorDict
from maze_lab.perception.blocks.utils import NonLinType, conv_module, per_layer, resolve_non_lin


class DenseBlock(ShapeNormalizationBlock):
    """A stack of fully connected layers, each followed by a non-linearity, applied to the last dim.

    :param hidden_units: Units per layer.
    :param non_lin: Activation class or name, or one per layer.
    """

    def __init__(
        self,
        in_keys: str | Sequence[str],
        out_keys: str | Sequence[str],
        in_shapes: Any,
        hidden_units: Sequence[int],
        non_lin: NonLinType | Sequence[NonLinType] = nn.ReLU,
    ):
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=2, out_num_dims=2)
        if not hidden_units:
            raise ValueError("DenseBlock: hidden_units must list at least one layer size")
        self.hidden_units = [int(h) for h in hidden_units]
        non_lins = per_layer(non_lin, len(self.hidden_units), "non_lin")
        layers: list[nn.Module] = []
        units = self.in_shapes[0][-1]
        for h, nl in zip(self.hidden_units, non_lins, strict=True):
            layers += [nn.Linear(units, h), resolve_non_lin(nl)()]
            units = h
        self.net = nn.Sequential(*layers)
        self._in_key, self._out_key = self.in_keys[0], self.out_keys[0]

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Apply the dense stack."""
        return {self._out_key: self.net(block_input[self._in_key])}


class ConvolutionBlock(ShapeNormalizationBlock):
    """A stack of 1d or 2d convolutions, each followed by a non-linearity (input: channels first).

    :param hidden_channels: Output channels per layer.
    :param hidden_kernels: Kernel size per layer (or one for all).
    :param convolution_dimension: 1 for (C, L) inputs, 2 for (C, H, W) inputs.
    :param hidden_strides: Stride per layer (or one for all).
    :param hidden_dilations: Dilation per layer (or one for all).
    :param hidden_padding: Padding per layer (int or 'same'/'valid'; or one for all).
    :param padding_mode: 'zeros', 'reflect', 'replicate' or 'circular'.
    """

    def __init__(
        self,
        in_keys: str | Sequence[str],
        out_keys: str | Sequence[str],
        in_shapes: Any,
        hidden_channels: Sequence[int],
        hidden_kernels: int | Sequence[int] = 3,
        non_lin: NonLinType | Sequence[NonLinType] = nn.ReLU,
        convolution_dimension: int = 2,
        hidden_strides: int | Sequence[int] = 1,
        hidden_dilations: int | Sequence[int] = 1,
        hidden_padding: int | str | Sequence[int | str] = 0,
        padding_mode: str = "zeros",
    ):
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=convolution_dimension + 2,
                         out_num_dims=convolution_dimension + 2)
        n = len(hidden_channels)
        conv = conv_module(convolution_dimension)
        kernels = per_layer(hidden_kernels, n, "hidden_kernels")
        strides = per_layer(hidden_strides, n, "hidden_strides")
        dilations = per_layer(hidden_dilations, n, "hidden_dilations")
        paddings = per_layer(hidden_padding, n, "hidden_padding")
        non_lins = per_layer(non_lin, n, "non_lin")
        channels = self.in_shapes[0][-convolution_dimension - 1]
        layers: list[nn.Module] = []
        for out_c, k, s, d, p, nl in zip(hidden_channels, kernels, strides, dilations, paddings, non_lins, strict=True):
            layers += [conv(channels, int(out_c), kernel_size=k, stride=s, dilation=d, padding=p,
                            padding_mode=padding_mode), resolve_non_lin(nl)()]
            channels = int(out_c)
        self.net = nn.Sequential(*layers)
        self.convolution_dimension = convolution_dimension

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Apply the convolution stack."""
        return {self.out_keys[0]: self.net(block_input[self.in_keys[0]])}


class StridedConvolutionBlock(ConvolutionBlock):
    """A stack of strided convolutions (downsampling by stride instead of pooling); see :class:`ConvolutionBlock`."""

    def __init__(
        self,
        in_keys: str | Sequence[str],
        out_keys: str | Sequence[str],
        in_shapes: Any,
        hidden_channels: Sequence[int],
        hidden_kernels: int | Sequence[int],
        non_lin: NonLinType | Sequence[NonLinType] = nn.ReLU,
        convolution_dimension: int = 2,
        hidden_strides: int | Sequence[int] = 2,
        hidden_dilations: int | Sequence[int] = 1,
        hidden_padding: int | str | Sequence[int | str] = 1,
        padding_mode: str = "zeros",
    ):
        super().__init__(in_keys, out_keys, in_shapes, hidden_channels=hidden_channels, hidden_kernels=hidden_kernels,
                         non_lin=non_lin, convolution_dimension=convolution_dimension, hidden_strides=hidden_strides,
                         hidden_dilations=hidden_dilations, hidden_padding=hidden_padding, padding_mode=padding_mode)


class VGGConvolutionBlock(ShapeNormalizationBlock):
    """VGG-style stacks on (C, H, W) inputs: per stack two 3x3 convolutions with activation and 2x2 max-pooling.

    :param hidden_channels: Channels per stack.
    :param non_lin: Activation class or name.
    """

    def __init__(
        self,
        in_keys: str | Sequence[str],
        out_keys: str | Sequence[str],
        in_shapes: Any,
        hidden_channels: Sequence[int],
        non_lin: NonLinType = nn.ReLU,
    ):
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=4, out_num_dims=4)
        act = resolve_non_lin(non_lin)
        channels = self.in_shapes[0][-3]
        layers: list[nn.Module] = []
        for out_c in hidden_channels:
            layers += [
                nn.Conv2d(channels, int(out_c), kernel_size=3, padding=1), act(),
                nn.Conv2d(int(out_c), int(out_c), kernel_size=3, padding=1), act(),
                nn.MaxPool2d(kernel_size=2, stride=2),
            ]
            channels = int(out_c)
        self.hidden_channels = [int(c) for c in hidden_channels]
        self.net = nn.Sequential(*layers)

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Apply the VGG stacks."""
        return {self.out_keys[0]: self.net(block_input[self.in_keys[0]])}


class GraphConvBlock(ShapeNormalizationBlock):
    """Graph convolution stack (Kipf & Welling) on node features (N, F) and an adjacency matrix (N, N).

    Each layer computes ``act(A_hat @ X @ W)`` with ``A_hat = D^-1/2 (A + s I) D^-1/2``.

    :param hidden_features: Output features per layer.
    :param non_lin: Activation class or name.
    :param bias: Whether the layers have a bias.
    :param node_self_importance: Weight ``s`` of the self loops added to the adjacency.
    :param trainable_node_self_importance: Whether ``s`` is learned.
    :param preprocess_adj: Normalize the adjacency as above; set False if it is normalized already.
    """

    def __init__(
        self,
        in_keys: Sequence[str],
        out_keys: str | Sequence[str],
        in_shapes: Any,
        hidden_features: Sequence[int],
        non_lin: NonLinType = nn.ReLU,
        bias: bool = True,
        node_self_importance: float = 1.0,
        trainable_node_self_importance: bool = False,
        preprocess_adj: bool = True,
    ):
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=[3, 3], out_num_dims=3)
        (n_nodes, n_feat), adj_shape = self.in_shapes[0][-2:], self.in_shapes[1][-2:]
        if adj_shape != (n_nodes, n_nodes):
            raise ShapeError(
                f"GraphConvBlock: adjacency '{self.in_keys[1]}' must have shape ({n_nodes}, {n_nodes}) to match "
                f"node features '{self.in_keys[0]}' {self.in_shapes[0]}, got {self.in_shapes[1]}"
            )
        self.layers = nn.ModuleList()
        for h in hidden_features:
            self.layers.append(nn.Linear(n_feat, int(h), bias=bias))
            n_feat = int(h)
        self.act = resolve_non_lin(non_lin)()
        self.node_self_importance = nn.Parameter(
            torch.tensor(float(node_self_importance)), requires_grad=trainable_node_self_importance
        )
        self.preprocess_adj = preprocess_adj

    def _normalized_adjacency(self, adj: torch.Tensor) -> torch.Tensor:
        eye = torch.eye(adj.shape[-1], dtype=adj.dtype, device=adj.device)
        a = adj + self.node_self_importance * eye
        deg = a.sum(-1).clamp(min=1e-6).rsqrt()
        return deg.unsqueeze(-1) * a * deg.unsqueeze(-2)

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Propagate node features over the graph."""
        x = block_input[self.in_keys[0]]
        adj = block_input[self.in_keys[1]]
        if self.preprocess_adj:
            adj = self._normalized_adjacency(adj)
        for layer in self.layers:
            x = self.act(adj @ layer(x))
        return {self.out_keys[0]: x}
