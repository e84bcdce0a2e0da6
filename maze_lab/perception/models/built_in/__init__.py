"""Built-in networks."""

from maze_lab.perception.models.built_in.flatten_concat import (
    FlattenConcatBaseNet,
    FlattenConcatMaskedPolicyNet,
    FlattenConcatPolicyNet,
    FlattenConcatStateActionValueNet,
    FlattenConcatStateValueNet,
)

__all__ = ["FlattenConcatBaseNet", "FlattenConcatMaskedPolicyNet", "FlattenConcatPolicyNet",
           "FlattenConcatStateActionValueNet", "FlattenConcatStateValueNet"]
