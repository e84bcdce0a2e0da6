"""The InferenceBlock: composes perception blocks into one model by linking their in and out keys."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from maze_lab.perception.blocks.base import PerceptionBlock, Shape, ShapeError, ShapeNormalizationBlock, TensorDict


class InferenceBlock(PerceptionBlock):
    """Combines perception blocks into one prediction module; the execution order follows the key links.

    :param in_keys: The model inputs (e.g. observation keys).
    :param out_keys: The model outputs (e.g. action heads, 'value' or shared embeddings).
    :param in_shapes: The input shapes, one per in_key.
    :param perception_blocks: Blocks by name (names are free; blocks are linked by their keys).
    """

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 perception_blocks: Mapping[str, PerceptionBlock]):
        super().__init__(in_keys=in_keys, out_keys=out_keys, in_shapes=in_shapes)
        bad = [name for name in perception_blocks if not name or "." in name]
        if bad:
            raise ValueError(f"InferenceBlock: block names must be non-empty and contain no '.', got {bad}")
        not_blocks = [n for n, b in perception_blocks.items() if not isinstance(b, PerceptionBlock)]
        if not_blocks:
            raise TypeError(f"InferenceBlock: {not_blocks} are not PerceptionBlocks (wrap plain modules in a "
                            f"TorchModelBlock)")
        self.perception_dict = nn.ModuleDict(dict(perception_blocks))
        self.execution_plan: dict[int, list[str]] = {}
        self._producer: dict[str, str] = {}
        self._tensor_shapes: dict[str, Shape] = dict(zip(self.in_keys, self.in_shapes, strict=True))
        self._build_execution_plan()
        self._order: list[PerceptionBlock] = [self.perception_dict[n] for lvl in self.execution_plan.values()
                                              for n in lvl]
        self._out_shapes = [self._tensor_shapes[k] for k in self.out_keys]
        self._in_specs = [(k, torch.Size(s), len(s)) for k, s in zip(self.in_keys, self.in_shapes, strict=True)]
        self._plan = [(isinstance(b, ShapeNormalizationBlock) and b.accepts_batched_input_directly, b)
                      for b in self._order]

    def _build_execution_plan(self) -> None:
        """Topologically sort the blocks level by level and check that the linked shapes agree."""
        available = set(self.in_keys)
        for name, block in self.perception_dict.items():
            for key in block.out_keys:
                if key in self._producer or key in self.in_keys:
                    other = self._producer.get(key, "the model inputs")
                    raise ValueError(f"InferenceBlock: tensor '{key}' is produced by both block '{name}' and {other}")
                self._producer[key] = name
        remaining = dict(self.perception_dict.items())
        level = 0
        while remaining:
            ready = [n for n, b in remaining.items() if all(k in available for k in b.in_keys)]
            if not ready:
                details = "; ".join(
                    f"'{n}' needs {[k for k in b.in_keys if k not in available]}" for n, b in remaining.items()
                )
                raise ValueError(f"InferenceBlock: cannot link blocks: {details}. Available tensors: "
                                 f"{sorted(available)}")
            for name in ready:
                block = remaining.pop(name)
                for key, shape in zip(block.in_keys, block.in_shapes, strict=True):
                    have = self._tensor_shapes[key]
                    if tuple(have) != tuple(shape):
                        source = f"block '{self._producer[key]}'" if key in self._producer else "the model input"
                        raise ShapeError(f"InferenceBlock: block '{name}' expects '{key}' with shape {tuple(shape)}, "
                                         f"but {source} gives {tuple(have)}")
                for key, shape in zip(block.out_keys, block.out_shapes(), strict=True):
                    self._tensor_shapes[key] = tuple(shape)
                    available.add(key)
            self.execution_plan[level] = ready
            level += 1
        missing = [k for k in self.out_keys if k not in available]
        if missing:
            raise ValueError(f"InferenceBlock: out_keys {missing} are produced by no block; available tensors: "
                             f"{sorted(available)}")

    def forward(self, block_input: TensorDict) -> TensorDict:
        """Run all blocks in execution order and return the out_keys tensors.

        Inputs may have any leading (batch/time) dims, the same for all inputs; they are checked once here,
        flattened to one batch dim, and restored on the outputs.
        """
        tensors = dict(block_input)
        lead = None
        for key, shape, n in self._in_specs:
            t = tensors.get(key)
            if t is None:
                raise KeyError(f"InferenceBlock: missing input '{key}'; expected inputs {self.in_keys}, got "
                               f"{sorted(block_input)}")
            s = t.shape
            nd = len(s)
            if nd < n or s[nd - n :] != shape:
                raise ShapeError(f"InferenceBlock: input '{key}' has shape {tuple(s)}, expected "
                                 f"(*batch_dims, {', '.join(map(str, shape))})")
            this_lead = s[: nd - n]
            if lead is None:
                lead = this_lead
            elif this_lead != lead:
                raise ShapeError(f"InferenceBlock: inputs disagree in their leading (batch) dims: "
                                 f"'{self.in_keys[0]}' has {tuple(lead)}, '{key}' has {tuple(this_lead)}")
        flat = len(lead) != 1
        if flat:
            for key, shape, _ in self._in_specs:
                tensors[key] = tensors[key].reshape((-1, *shape))
        for direct, block in self._plan:
            if direct and not (block._forward_hooks or block._forward_pre_hooks):
                tensors.update(block.normalized_forward(tensors))
            else:
                tensors.update(block(tensors))
        if flat:
            return {k: tensors[k].reshape((*lead, *tensors[k].shape[1:])) for k in self.out_keys}
        return {k: tensors[k] for k in self.out_keys}

    def out_shapes(self) -> list[Shape]:
        """Output shapes, known from the linked blocks."""
        return list(self._out_shapes)

    def tensor_shapes(self) -> dict[str, Shape]:
        """Shapes of all tensors of the graph (inputs and every block output)."""
        return dict(self._tensor_shapes)

    def producer_of(self, key: str) -> str | None:
        """Name of the block producing tensor ``key`` (None for model inputs)."""
        return self._producer.get(key)

    def __repr__(self) -> str:
        lines = [f"InferenceBlock({self.in_keys} -> {self.out_keys})"]
        for level, names in self.execution_plan.items():
            for n in names:
                b = self.perception_dict[n]
                lines.append(f"  [{level}] {n}: {type(b).__name__} {b.in_keys} -> {b.out_keys} "
                             f"{[self._tensor_shapes[k] for k in b.out_keys]}")
        return "\n".join(lines)
