"""Perception block interfaces: dict-in/dict-out torch modules with shape inference and shape normalization."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

Shape = tuple[int, ...]
TensorDict = dict[str, torch.Tensor]


class ShapeError(ValueError):
    """A tensor or a block input has a shape the block was not built for."""


def as_key_list(keys: str | Sequence[str], what: str = "keys") -> list[str]:
    """Normalize a single key or a sequence of keys to a list of keys."""
    if isinstance(keys, str):
        return [keys]
    out = list(keys)
    if not out or not all(isinstance(k, str) for k in out):
        raise ValueError(f"{what} must be a non-empty string or list of strings, got {keys!r}")
    return out


def _is_single_shape(shape: Any) -> bool:
    return isinstance(shape, torch.Size) or (
        isinstance(shape, Sequence) and not isinstance(shape, str) and all(isinstance(d, int) for d in shape)
    )


def as_shape_list(in_shapes: Any, n_keys: int, owner: str = "block") -> list[Shape]:
    """Normalize one shape or a list of shapes (one per input key) to a list of int tuples."""
    if _is_single_shape(in_shapes) and (len(in_shapes) > 0 or n_keys == 1):
        shapes = [tuple(int(d) for d in in_shapes)]
    else:
        shapes = []
        for s in in_shapes:
            if not _is_single_shape(s):
                raise ShapeError(f"{owner}: in_shapes entry {s!r} is not a shape (a sequence of ints)")
            shapes.append(tuple(int(d) for d in s))
    if len(shapes) != n_keys:
        raise ShapeError(f"{owner}: got {len(shapes)} in_shapes {shapes} for {n_keys} in_keys")
    return shapes


class PerceptionBlock(nn.Module):
    """Interface of all perception blocks: a module mapping a tensor dict to a tensor dict.

    :param in_keys: Key(s) of the input tensors.
    :param out_keys: Key(s) of the output tensors.
    :param in_shapes: Shape(s) of the inputs without any batch/time dimension, one per in_key.
    """

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any):
        super().__init__()
        self.in_keys: list[str] = as_key_list(in_keys, "in_keys")
        self.out_keys: list[str] = as_key_list(out_keys, "out_keys")
        self.in_shapes: list[Shape] = as_shape_list(in_shapes, len(self.in_keys), owner=type(self).__name__)
        self._out_shapes: list[Shape] | None = None

    @abstractmethod
    def forward(self, block_input: TensorDict) -> TensorDict:
        """Compute the output tensor dict from the input tensor dict."""

    def dummy_input(self, batch_size: int = 2) -> TensorDict:
        """A tensor dict of ones with the block's input shapes and a leading batch dimension."""
        return {k: torch.ones((batch_size, *s)) for k, s in zip(self.in_keys, self.in_shapes, strict=True)}

    def out_shapes(self) -> list[Shape]:
        """Output shapes (without batch dimension), inferred once by a forward pass on dummy input."""
        if self._out_shapes is None:
            device = next((p.device for p in self.parameters()), torch.device("cpu"))
            was_training = self.training
            self.eval()
            try:
                with torch.no_grad():
                    out = self(
                        {k: v.to(device) for k, v in self.dummy_input(batch_size=2).items()}
                    )
            finally:
                self.train(was_training)
            self._out_shapes = [tuple(out[k].shape[1:]) for k in self.out_keys]
        return list(self._out_shapes)

    def out_shapes_dict(self) -> dict[str, Shape]:
        """Output shapes keyed by output key."""
        return dict(zip(self.out_keys, self.out_shapes(), strict=True))

    def num_parameters(self) -> int:
        """Number of parameters of this block (trainable or not)."""
        return sum(p.numel() for p in self.parameters())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_keys} -> {self.out_keys}, out_shapes={self.out_shapes()})"


class ShapeNormalizationBlock(PerceptionBlock):
    """A block that computes on inputs with exactly one batch dimension and restores the caller's leading dims.

    Each input may carry any number of leading dimensions (none, batch, batch x time, ...): they are flattened
    into one batch dimension (or one is added) before :meth:`normalized_forward`, and the outputs get the same
    leading dimensions back.

    :param in_num_dims: Per input, the number of dims the block computes on, including the batch dimension.
        ``in_num_dims - 1`` trailing dims are sample dims; any further dims of ``in_shapes`` act as batch dims.
    :param out_num_dims: Per output, the number of dims of the normalized output (batch dimension included).
    """

    def __init__(
        self,
        in_keys: str | Sequence[str],
        out_keys: str | Sequence[str],
        in_shapes: Any,
        in_num_dims: int | Sequence[int],
        out_num_dims: int | Sequence[int],
    ):
        super().__init__(in_keys=in_keys, out_keys=out_keys, in_shapes=in_shapes)
        n_in = len(self.in_keys)
        self.in_num_dims = [int(in_num_dims)] * n_in if isinstance(in_num_dims, int) else list(in_num_dims)
        n_out = len(self.out_keys)
        self.out_num_dims = [int(out_num_dims)] * n_out if isinstance(out_num_dims, int) else list(out_num_dims)
        if len(self.in_num_dims) != n_in:
            raise ShapeError(f"{type(self).__name__}: {len(self.in_num_dims)} in_num_dims for {n_in} in_keys")
        for key, shape, nd in zip(self.in_keys, self.in_shapes, self.in_num_dims, strict=True):
            if len(shape) < nd - 1:
                raise ShapeError(
                    f"{type(self).__name__}: input '{key}' needs at least {nd - 1} dims per sample "
                    f"(e.g. {self._shape_hint(nd - 1)}), got in_shape {shape}"
                )
        # (key, expected trailing shape, number of sample dims) per input, precomputed for the hot path
        self._specs: list[tuple[str, torch.Size, int, int]] = [
            (key, torch.Size(shape), len(shape), nd - 1)
            for key, shape, nd in zip(self.in_keys, self.in_shapes, self.in_num_dims, strict=True)
        ]
        # True where inputs of shape (batch, *in_shape) need no reshaping: an InferenceBlock that has checked its
        # own inputs may then call normalized_forward directly
        self.accepts_batched_input_directly = all(len(shape) == n for _, shape, _, n in self._specs)

    @staticmethod
    def _shape_hint(n: int) -> str:
        return {1: "(features,)", 2: "(time, features) or (channels, length)", 3: "(channels, height, width)"}.get(
            n, f"{n} dims"
        )

    def _shape_error(self, key: str, tensor: torch.Tensor, shape: torch.Size) -> ShapeError:
        return ShapeError(
            f"{type(self).__name__} ({', '.join(self.in_keys)} -> {', '.join(self.out_keys)}): input '{key}' "
            f"has shape {tuple(tensor.shape)}, expected (*batch_dims, {', '.join(map(str, shape))})"
            if shape
            else f"{type(self).__name__}: input '{key}' has shape {tuple(tensor.shape)}, expected (*batch_dims,)"
        )

    def forward(self, block_input: TensorDict) -> TensorDict:
        """Normalize the inputs to one batch dim, run :meth:`normalized_forward`, restore the leading dims."""
        normalized: TensorDict = {}
        lead = None
        for key, shape, n_shape, n_sample in self._specs:
            try:
                t = block_input[key]
            except KeyError:
                raise KeyError(
                    f"{type(self).__name__} needs input '{key}'; got keys {sorted(block_input)}"
                ) from None
            s = t.shape
            nd = len(s)
            if nd < n_shape or s[nd - n_shape :] != shape:
                raise self._shape_error(key, t, shape)
            this_lead = s[: nd - n_sample]
            if lead is None:
                lead = this_lead
            elif this_lead != lead:
                raise ShapeError(
                    f"{type(self).__name__}: inputs disagree in their leading (batch) dims: '{self.in_keys[0]}' "
                    f"has {tuple(lead)}, '{key}' has {tuple(this_lead)}"
                )
            if len(this_lead) != 1:
                t = t.reshape((-1, *s[nd - n_sample :]))
            normalized[key] = t
        out = self.normalized_forward(normalized)
        if len(lead) != 1:
            out = {k: v.reshape((*lead, *v.shape[1:])) for k, v in out.items()}
        return out

    @abstractmethod
    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Forward pass on inputs that have exactly one leading batch dimension."""
