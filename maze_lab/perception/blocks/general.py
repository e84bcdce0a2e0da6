"""General purpose blocks: flatten, concat, slicing, repeat, pooling, masking, functional and torch wrappers."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from maze_lab.perception.blocks.base import ShapeError, ShapeNormalizationBlock, TensorDict
from maze_lab.perception.blocks.utils import resolve_callable


def _check_dim(dim: int, n_dims: int, owner: str, name: str) -> int:
    """Turn a dim of the normalized tensor (batch dim = 0, or negative from the end) into a negative index."""
    if 1 <= dim <= n_dims - 1:
        return dim - n_dims
    if -(n_dims - 1) <= dim <= -1:
        return dim
    raise ShapeError(f"{owner}: {name}={dim} is out of range for inputs with {n_dims - 1} sample dims "
                     f"(valid: 1..{n_dims - 1} counting the batch dim as 0, or -1..-{n_dims - 1})")


class FlattenBlock(ShapeNormalizationBlock):
    """Flattens the last ``num_flatten_dims`` dims into one.

    :param num_flatten_dims: Number of trailing dims to flatten.
    """

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 num_flatten_dims: int):
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=num_flatten_dims + 1, out_num_dims=2)
        self.num_flatten_dims = num_flatten_dims

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Flatten the sample dims."""
        t = block_input[self.in_keys[0]]
        return {self.out_keys[0]: t.reshape(t.shape[0], -1)}


class ConcatenationBlock(ShapeNormalizationBlock):
    """Concatenates the inputs along ``concat_dim``; with a single input it is the identity.

    :param concat_dim: Dim to concatenate along (negative: from the end; positive: batch dim is 0).
    """

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 concat_dim: int = -1):
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=[len(s) + 1 for s in
                                                                  _shapes_for(in_keys, in_shapes)], out_num_dims=0)
        ranks = {len(s) for s in self.in_shapes}
        if len(ranks) != 1:
            raise ShapeError("ConcatenationBlock: inputs must have the same number of dims; got "
                             + ", ".join(f"'{k}': {s}" for k, s in zip(self.in_keys, self.in_shapes, strict=True)))
        n = ranks.pop() + 1
        self.concat_dim = _check_dim(concat_dim, n, "ConcatenationBlock", "concat_dim")
        self.out_num_dims = [n]
        ref = list(self.in_shapes[0])
        for key, shape in zip(self.in_keys, self.in_shapes, strict=True):
            a, b = list(shape), list(ref)
            del a[self.concat_dim]
            del b[self.concat_dim]
            if a != b:
                raise ShapeError(
                    f"ConcatenationBlock: input '{key}' {shape} does not match '{self.in_keys[0]}' "
                    f"{self.in_shapes[0]} in all dims but concat_dim={concat_dim}"
                )
        self._single = len(self.in_keys) == 1

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Concatenate."""
        if self._single:
            return {self.out_keys[0]: block_input[self.in_keys[0]]}
        return {self.out_keys[0]: torch.cat([block_input[k] for k in self.in_keys], dim=self.concat_dim)}


def _shapes_for(in_keys: str | Sequence[str], in_shapes: Any) -> list[tuple[int, ...]]:
    from maze_lab.perception.blocks.base import as_key_list, as_shape_list

    return as_shape_list(in_shapes, len(as_key_list(in_keys)))


class FunctionalBlock(ShapeNormalizationBlock):
    """Applies a custom callable to the input tensors (passed positionally, in in_keys order).

    :param func: A callable or a dotted path to one; it returns a tensor or a tuple of tensors (one per out_key).
    """

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 func: Callable[..., Any] | str):
        shapes = _shapes_for(in_keys, in_shapes)
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=[len(s) + 1 for s in shapes], out_num_dims=0)
        self.func = resolve_callable(func)

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Apply the callable."""
        out = self.func(*[block_input[k] for k in self.in_keys])
        if isinstance(out, torch.Tensor):
            out = (out,)
        if len(out) != len(self.out_keys):
            raise ShapeError(f"FunctionalBlock: {getattr(self.func, '__name__', self.func)} returned {len(out)} "
                             f"tensors for out_keys {self.out_keys}")
        return dict(zip(self.out_keys, out, strict=True))


class GlobalAveragePoolingBlock(ShapeNormalizationBlock):
    """Averages (C, H, W) or (C, L) inputs over their spatial dims, giving (C,)."""

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any):
        shapes = _shapes_for(in_keys, in_shapes)
        if len(shapes[0]) < 2:
            raise ShapeError(f"GlobalAveragePoolingBlock: input needs (channels, *spatial) dims, got {shapes[0]}")
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=len(shapes[0]) + 1, out_num_dims=2)

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Pool the spatial dims."""
        t = block_input[self.in_keys[0]]
        return {self.out_keys[0]: t.flatten(2).mean(-1)}


class MaskedGlobalPoolingBlock(ShapeNormalizationBlock):
    """Pools a set of vectors (N, F) over N, counting only entries whose mask (N,) is non-zero.

    :param pooling_func: 'mean', 'sum' or 'max'.
    :param pooling_dim: The set dim (default -2, the N of (N, F)).
    """

    POOLING_FUNCS = ("mean", "sum", "max")

    def __init__(self, in_keys: Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 pooling_func: str = "mean", pooling_dim: int = -2):
        shapes = _shapes_for(in_keys, in_shapes)
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=[len(s) + 1 for s in shapes], out_num_dims=0)
        if pooling_func not in self.POOLING_FUNCS:
            raise ValueError(f"MaskedGlobalPoolingBlock: unknown pooling_func {pooling_func!r}; "
                             f"valid: {', '.join(self.POOLING_FUNCS)}")
        self.pooling_func = pooling_func
        n = len(self.in_shapes[0]) + 1
        self.pooling_dim = _check_dim(pooling_dim, n, "MaskedGlobalPoolingBlock", "pooling_dim")
        set_size = self.in_shapes[0][self.pooling_dim]
        if len(self.in_shapes) > 1 and self.in_shapes[1][-1] != set_size:
            raise ShapeError(f"MaskedGlobalPoolingBlock: mask '{self.in_keys[1]}' {self.in_shapes[1]} must end in "
                             f"the set size {set_size} of '{self.in_keys[0]}' {self.in_shapes[0]}")

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Pool with the mask applied."""
        x = block_input[self.in_keys[0]]
        if len(self.in_keys) == 1:
            mask = torch.ones(x.shape[self.pooling_dim], dtype=x.dtype, device=x.device)
        else:
            mask = block_input[self.in_keys[1]].to(x.dtype)
        # broadcast the mask along every dim after the pooled one
        for _ in range(-self.pooling_dim - 1):
            mask = mask.unsqueeze(-1)
        if self.pooling_func == "max":
            out = x.masked_fill(mask == 0, torch.finfo(x.dtype).min).amax(dim=self.pooling_dim)
        else:
            out = (x * mask).sum(dim=self.pooling_dim)
            if self.pooling_func == "mean":
                out = out / mask.sum(dim=self.pooling_dim).clamp(min=1.0)
        return {self.out_keys[0]: out}


class MultiIndexSlicingBlock(ShapeNormalizationBlock):
    """Selects the given indices along one dim (keeps the dim).

    :param select_dim: Dim to select from (negative: from the end; positive: batch dim is 0).
    :param select_idxs: Index or indices to keep.
    """

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 select_dim: int, select_idxs: int | Sequence[int]):
        shapes = _shapes_for(in_keys, in_shapes)
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=len(shapes[0]) + 1, out_num_dims=len(shapes[0]) + 1)
        n = len(self.in_shapes[0]) + 1
        self.select_dim = _check_dim(select_dim, n, "MultiIndexSlicingBlock", "select_dim")
        idxs = [select_idxs] if isinstance(select_idxs, int) else list(select_idxs)
        size = self.in_shapes[0][self.select_dim]
        bad = [i for i in idxs if not -size <= i < size]
        if bad:
            raise ShapeError(f"MultiIndexSlicingBlock: indices {bad} out of range for dim of size {size} "
                             f"of '{self.in_keys[0]}' {self.in_shapes[0]}")
        self.register_buffer("select_idxs", torch.tensor([i % size for i in idxs], dtype=torch.long),
                             persistent=False)

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Select the indices."""
        t = block_input[self.in_keys[0]]
        return {self.out_keys[0]: t.index_select(t.dim() + self.select_dim, self.select_idxs)}


class SliceBlock(ShapeNormalizationBlock):
    """Takes one index along one dim (the dim is dropped), e.g. the last time step.

    :param slice_dim: Dim to slice (negative: from the end; positive: batch dim is 0).
    :param slice_idx: Index to take.
    """

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 slice_dim: int, slice_idx: int):
        shapes = _shapes_for(in_keys, in_shapes)
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=len(shapes[0]) + 1, out_num_dims=len(shapes[0]))
        n = len(self.in_shapes[0]) + 1
        self.slice_dim = _check_dim(slice_dim, n, "SliceBlock", "slice_dim")
        size = self.in_shapes[0][self.slice_dim]
        if not -size <= slice_idx < size:
            raise ShapeError(f"SliceBlock: slice_idx={slice_idx} out of range for dim of size {size} "
                             f"of '{self.in_keys[0]}' {self.in_shapes[0]}")
        self.slice_idx = slice_idx

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Slice."""
        t = block_input[self.in_keys[0]]
        return {self.out_keys[0]: t.select(t.dim() + self.slice_dim, self.slice_idx)}


class RepeatToMatchBlock(ShapeNormalizationBlock):
    """Inserts a dim into the first input and repeats it to the size of that dim in the second input.

    E.g. a (F,) vector and a (N, G) set with ``repeat_at_idx=-2`` give (N, F).

    :param repeat_at_idx: Where the new dim goes (negative: from the end of the output; positive: batch dim is 0).
    """

    def __init__(self, in_keys: Sequence[str], out_keys: str | Sequence[str], in_shapes: Any, repeat_at_idx: int):
        shapes = _shapes_for(in_keys, in_shapes)
        if len(shapes) != 2:
            raise ShapeError("RepeatToMatchBlock needs two in_keys: the tensor to repeat and the one to match")
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=[len(s) + 1 for s in shapes], out_num_dims=0)
        n_out = len(self.in_shapes[0]) + 2
        self.repeat_at_idx = _check_dim(repeat_at_idx, n_out, "RepeatToMatchBlock", "repeat_at_idx")
        n_ref = len(self.in_shapes[1]) + 1
        ref_idx = repeat_at_idx if repeat_at_idx >= 0 else repeat_at_idx + n_ref
        if not 0 < ref_idx < n_ref:
            raise ShapeError(f"RepeatToMatchBlock: repeat_at_idx={repeat_at_idx} is not a dim of '{self.in_keys[1]}' "
                             f"{self.in_shapes[1]}")
        self._ref_idx = ref_idx
        self.repeats = self.in_shapes[1][ref_idx - 1]

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Repeat."""
        t = block_input[self.in_keys[0]]
        t = t.unsqueeze(t.dim() + 1 + self.repeat_at_idx)
        sizes = [-1] * t.dim()
        sizes[t.dim() + self.repeat_at_idx] = self.repeats
        return {self.out_keys[0]: t.expand(*sizes)}


class ActionMaskingBlock(ShapeNormalizationBlock):
    """Sets the logits of masked actions (mask value 0) to the lowest finite value, so they get zero probability.

    in_keys: the logits and the mask (same trailing shape; 1 = allowed, 0 = masked).
    """

    def __init__(self, in_keys: Sequence[str], out_keys: str | Sequence[str], in_shapes: Any):
        shapes = _shapes_for(in_keys, in_shapes)
        if len(shapes) != 2:
            raise ShapeError("ActionMaskingBlock needs two in_keys: [logits, mask]")
        if shapes[0] != shapes[1]:
            raise ShapeError(f"ActionMaskingBlock: mask '{as_keys(in_keys)[1]}' has shape {shapes[1]}, expected the "
                             f"logits shape {shapes[0]} of '{as_keys(in_keys)[0]}'")
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=[len(s) + 1 for s in shapes],
                         out_num_dims=len(shapes[0]) + 1)

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Mask the logits."""
        logits = block_input[self.in_keys[0]]
        mask = block_input[self.in_keys[1]]
        masked = logits.masked_fill(mask == 0, torch.finfo(logits.dtype).min)
        return {self.out_keys[0]: masked}


def as_keys(keys: str | Sequence[str]) -> list[str]:
    """Keys as a list (helper for error messages before the base class has run)."""
    return [keys] if isinstance(keys, str) else list(keys)


class TorchModelBlock(ShapeNormalizationBlock):
    """Wraps any ``nn.Module`` that maps a tensor dict to a tensor dict into a shape-normalized block.

    :param net: The module; it receives the inputs with exactly one batch dim.
    """

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 in_num_dims: int | Sequence[int], out_num_dims: int | Sequence[int], net: nn.Module):
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=in_num_dims, out_num_dims=out_num_dims)
        self.net = net

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Run the wrapped module."""
        out = self.net(block_input)
        if not isinstance(out, dict):
            raise TypeError(f"TorchModelBlock: {type(self.net).__name__} must return a dict of tensors, "
                            f"got {type(out).__name__}")
        missing = [k for k in self.out_keys if k not in out]
        if missing:
            raise KeyError(f"TorchModelBlock: {type(self.net).__name__} did not return {missing}; got {sorted(out)}")
        return {k: out[k] for k in self.out_keys}


class SelfAttentionSeqBlock(ShapeNormalizationBlock):
    """Multi-head scaled dot-product self-attention over a sequence (N, F) (Vaswani et al., 2017).

    Output (N, F): ``x + attention(x)`` (residual), followed by layer norm if enabled. An optional second in_key
    is a padding mask (N,) with 1 = valid element; an optional second out_key receives the attention weights (N, N).

    :param num_heads: Number of attention heads (must divide F).
    :param dropout: Dropout on the attention weights.
    :param add_input_to_output: Whether to add the residual connection.
    :param use_layer_norm: Whether to apply layer norm to the output.
    """

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 num_heads: int = 1, dropout: float = 0.0, add_input_to_output: bool = True,
                 use_layer_norm: bool = False, bias: bool = True):
        shapes = _shapes_for(in_keys, in_shapes)
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=[3] + [2] * (len(shapes) - 1), out_num_dims=3)
        n, f = self.in_shapes[0][-2:]
        if f % num_heads:
            raise ShapeError(f"SelfAttentionSeqBlock: features {f} of '{self.in_keys[0]}' not divisible by "
                             f"num_heads={num_heads}")
        self.attention = nn.MultiheadAttention(f, num_heads, dropout=dropout, bias=bias, batch_first=True)
        self.add_input_to_output = add_input_to_output
        self.norm = nn.LayerNorm(f) if use_layer_norm else None

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Attend."""
        x = block_input[self.in_keys[0]]
        pad = None
        if len(self.in_keys) > 1:
            pad = block_input[self.in_keys[1]] == 0
            # a fully padded sequence would give NaNs: let such rows attend everywhere
            pad = pad & ~pad.all(-1, keepdim=True)
        out, weights = self.attention(x, x, x, key_padding_mask=pad, need_weights=len(self.out_keys) > 1)
        if self.add_input_to_output:
            out = out + x
        if self.norm is not None:
            out = self.norm(out)
        result = {self.out_keys[0]: out}
        if len(self.out_keys) > 1:
            result[self.out_keys[1]] = weights
        return result


class SelfAttentionConvBlock(ShapeNormalizationBlock):
    """Self-attention over the positions of a feature map (C, H, W) (Zhang et al., 2018, SAGAN).

    Output ``gamma * attention(x) + x`` with ``gamma`` learned and starting at 0; an optional second out_key
    receives the attention map (H*W, H*W).

    :param embed_dim: Channels of the query/key projections (default C // 8, at least 1).
    """

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 embed_dim: int | None = None, add_input_to_output: bool = True):
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=4, out_num_dims=4)
        c = self.in_shapes[0][-3]
        d = embed_dim or max(1, c // 8)
        self.query = nn.Conv2d(c, d, kernel_size=1)
        self.key = nn.Conv2d(c, d, kernel_size=1)
        self.value = nn.Conv2d(c, c, kernel_size=1)
        self.gamma = nn.Parameter(torch.zeros(1))
        self.add_input_to_output = add_input_to_output
        self._scale = 1.0 / math.sqrt(d)

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Attend over positions."""
        x = block_input[self.in_keys[0]]
        b, c, h, w = x.shape
        q = self.query(x).flatten(2).transpose(1, 2)  # (B, HW, d)
        k = self.key(x).flatten(2)  # (B, d, HW)
        v = self.value(x).flatten(2)  # (B, C, HW)
        attn = torch.softmax(torch.bmm(q, k) * self._scale, dim=-1)  # (B, HW, HW)
        out = torch.bmm(v, attn.transpose(1, 2)).reshape(b, c, h, w)
        out = self.gamma * out
        if self.add_input_to_output:
            out = out + x
        result = {self.out_keys[0]: out}
        if len(self.out_keys) > 1:
            result[self.out_keys[1]] = attn
        return result


class CorrelationBlock(ShapeNormalizationBlock):
    """Element-wise product of two inputs of the same shape (a simple feature correlation)."""

    def __init__(self, in_keys: Sequence[str], out_keys: str | Sequence[str], in_shapes: Any):
        shapes = _shapes_for(in_keys, in_shapes)
        if len(shapes) != 2 or shapes[0] != shapes[1]:
            raise ShapeError(f"CorrelationBlock needs two inputs of the same shape, got {shapes}")
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=len(shapes[0]) + 1, out_num_dims=0)

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Multiply."""
        return {self.out_keys[0]: block_input[self.in_keys[0]] * block_input[self.in_keys[1]]}


class LinearOutputBlock(ShapeNormalizationBlock):
    """A single linear layer without activation, e.g. for action logits or a value.

    :param output_units: Number of outputs.
    """

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 output_units: int):
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=2, out_num_dims=2)
        self.output_units = int(output_units)
        self.net = nn.Linear(self.in_shapes[0][-1], self.output_units)
        self._in_key, self._out_key = self.in_keys[0], self.out_keys[0]

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Apply the linear layer."""
        return {self._out_key: self.net(block_input[self._in_key])}
