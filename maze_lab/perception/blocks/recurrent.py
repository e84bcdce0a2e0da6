"""Recurrent blocks over a stacked time window (T, F): LSTM and GRU, full sequence or last step only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from maze_lab.perception.blocks.base import ShapeNormalizationBlock, TensorDict
from maze_lab.perception.blocks.utils import NonLinType, resolve_non_lin


class _RecurrentBlock(ShapeNormalizationBlock):
    """Shared implementation: recurrent layers followed by a time-distributed dense layer with activation."""

    rnn_class: type[nn.Module] = nn.LSTM

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 hidden_size: int, num_layers: int = 1, bidirectional: bool = False,
                 non_lin: NonLinType = nn.Tanh, last_step_only: bool = False):
        super().__init__(in_keys, out_keys, in_shapes, in_num_dims=3, out_num_dims=2 if last_step_only else 3)
        self.hidden_size = int(hidden_size)
        self.rnn = self.rnn_class(input_size=self.in_shapes[0][-1], hidden_size=self.hidden_size,
                                  num_layers=num_layers, bidirectional=bidirectional, batch_first=True)
        directions = 2 if bidirectional else 1
        self.dense = nn.Sequential(nn.Linear(self.hidden_size * directions, self.hidden_size),
                                   resolve_non_lin(non_lin)())
        self.last_step_only = last_step_only

    def normalized_forward(self, block_input: TensorDict) -> TensorDict:
        """Run the recurrent layers over the time dim."""
        out, _ = self.rnn(block_input[self.in_keys[0]])
        if self.last_step_only:
            out = out[:, -1]
        return {self.out_keys[0]: self.dense(out)}


class LSTMBlock(_RecurrentBlock):
    """LSTM layers over (T, F) followed by a time-distributed dense layer; output (T, hidden_size).

    :param hidden_size: LSTM and output units.
    :param num_layers: Stacked LSTM layers.
    :param bidirectional: Whether the LSTM runs in both directions.
    :param non_lin: Activation of the final dense layer.
    """

    rnn_class = nn.LSTM

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 hidden_size: int, num_layers: int = 1, bidirectional: bool = False, non_lin: NonLinType = nn.Tanh):
        super().__init__(in_keys, out_keys, in_shapes, hidden_size, num_layers, bidirectional, non_lin)


class LSTMLastStepBlock(_RecurrentBlock):
    """Like :class:`LSTMBlock` but keeps only the output of the last time step; output (hidden_size,)."""

    rnn_class = nn.LSTM

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 hidden_size: int, num_layers: int = 1, bidirectional: bool = False, non_lin: NonLinType = nn.Tanh):
        super().__init__(in_keys, out_keys, in_shapes, hidden_size, num_layers, bidirectional, non_lin,
                         last_step_only=True)


class GRUBlock(_RecurrentBlock):
    """GRU layers over (T, F) followed by a time-distributed dense layer; output (T, hidden_size)."""

    rnn_class = nn.GRU

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 hidden_size: int, num_layers: int = 1, bidirectional: bool = False, non_lin: NonLinType = nn.Tanh):
        super().__init__(in_keys, out_keys, in_shapes, hidden_size, num_layers, bidirectional, non_lin)


class GRULastStepBlock(_RecurrentBlock):
    """Like :class:`GRUBlock` but keeps only the output of the last time step; output (hidden_size,)."""

    rnn_class = nn.GRU

    def __init__(self, in_keys: str | Sequence[str], out_keys: str | Sequence[str], in_shapes: Any,
                 hidden_size: int, num_layers: int = 1, bidirectional: bool = False, non_lin: NonLinType = nn.Tanh):
        super().__init__(in_keys, out_keys, in_shapes, hidden_size, num_layers, bidirectional, non_lin,
                         last_step_only=True)
