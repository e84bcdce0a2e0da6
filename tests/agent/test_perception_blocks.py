"""Perception blocks: output shapes with 0-3 leading dims, shape inference, shape errors, InferenceBlock linking."""

from __future__ import annotations

import pytest
import torch
from conftest_perception import F32  # noqa: F401  (sets torch threads)
from torch import nn

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.perception.blocks import (
    BLOCK_REGISTRY,
    ActionMaskingBlock,
    ConcatenationBlock,
    ConvolutionBlock,
    CorrelationBlock,
    DenseBlock,
    FlattenBlock,
    FlattenDenseBlock,
    FunctionalBlock,
    GlobalAveragePoolingBlock,
    GraphConvBlock,
    GRUBlock,
    GRULastStepBlock,
    InferenceBlock,
    LinearOutputBlock,
    LSTMBlock,
    LSTMLastStepBlock,
    MaskedGlobalPoolingBlock,
    MultiIndexSlicingBlock,
    RepeatToMatchBlock,
    SelfAttentionConvBlock,
    SelfAttentionSeqBlock,
    ShapeError,
    SliceBlock,
    StridedConvolutionBlock,
    StridedConvolutionDenseBlock,
    TorchModelBlock,
    VGGConvolutionBlock,
    VGGConvolutionDenseBlock,
    VGGConvolutionGAPBlock,
    block_type_from_name,
)


class _DictLinear(nn.Module):
    """A plain torch module on tensor dicts, for TorchModelBlock."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 3)

    def forward(self, d: dict) -> dict:
        return {"y": self.lin(d["x"])}


def _graph_adj(n: int) -> torch.Tensor:
    return (torch.rand(n, n) > 0.5).float()


# (factory, input shapes (without batch), expected output shapes (without batch))
CASES = {
    "dense": (lambda: DenseBlock("x", "y", (5,), hidden_units=[7, 3]), {"x": (5,)}, {"y": (3,)}),
    "dense_time_distributed": (lambda: DenseBlock("x", "y", (4, 5), hidden_units=[6]), {"x": (4, 5)}, {"y": (4, 6)}),
    "linear_output": (lambda: LinearOutputBlock("x", "y", (5,), output_units=2), {"x": (5,)}, {"y": (2,)}),
    "flatten": (lambda: FlattenBlock("x", "y", (2, 3, 4), num_flatten_dims=2), {"x": (2, 3, 4)}, {"y": (2, 12)}),
    "concat": (lambda: ConcatenationBlock(["a", "b"], "y", [(3,), (4,)]), {"a": (3,), "b": (4,)}, {"y": (7,)}),
    "concat_dim": (lambda: ConcatenationBlock(["a", "b"], "y", [(2, 3), (5, 3)], concat_dim=-2),
                   {"a": (2, 3), "b": (5, 3)}, {"y": (7, 3)}),
    "conv1d": (lambda: ConvolutionBlock("x", "y", (2, 10), hidden_channels=[4, 6], hidden_kernels=3,
                                        convolution_dimension=1), {"x": (2, 10)}, {"y": (6, 6)}),
    "conv2d": (lambda: ConvolutionBlock("x", "y", (3, 8, 8), hidden_channels=[4], hidden_kernels=[3],
                                        hidden_padding=1), {"x": (3, 8, 8)}, {"y": (4, 8, 8)}),
    "strided_conv": (lambda: StridedConvolutionBlock("x", "y", (3, 8, 8), hidden_channels=[4, 5], hidden_kernels=3),
                     {"x": (3, 8, 8)}, {"y": (5, 2, 2)}),
    "vgg": (lambda: VGGConvolutionBlock("x", "y", (3, 8, 8), hidden_channels=[4, 6]), {"x": (3, 8, 8)},
            {"y": (6, 2, 2)}),
    "vgg_dense": (lambda: VGGConvolutionDenseBlock("x", "y", (3, 8, 8), hidden_channels=[4], hidden_units=[9]),
                  {"x": (3, 8, 8)}, {"y": (9,)}),
    "vgg_gap": (lambda: VGGConvolutionGAPBlock("x", "y", (3, 8, 8), hidden_channels=[4, 6]), {"x": (3, 8, 8)},
                {"y": (6,)}),
    "strided_dense": (lambda: StridedConvolutionDenseBlock("x", "y", (1, 10), hidden_channels=[3], hidden_kernels=3,
                                                           hidden_units=[5], convolution_dimension=1),
                      {"x": (1, 10)}, {"y": (5,)}),
    "flatten_dense": (lambda: FlattenDenseBlock("x", "y", (4, 2), num_flatten_dims=2, hidden_units=[6]),
                      {"x": (4, 2)}, {"y": (6,)}),
    "gap": (lambda: GlobalAveragePoolingBlock("x", "y", (3, 4, 5)), {"x": (3, 4, 5)}, {"y": (3,)}),
    "masked_pool_mean": (lambda: MaskedGlobalPoolingBlock(["x", "m"], "y", [(6, 4), (6,)], pooling_func="mean"),
                         {"x": (6, 4), "m": (6,)}, {"y": (4,)}),
    "masked_pool_max": (lambda: MaskedGlobalPoolingBlock(["x", "m"], "y", [(6, 4), (6,)], pooling_func="max"),
                        {"x": (6, 4), "m": (6,)}, {"y": (4,)}),
    "lstm": (lambda: LSTMBlock("x", "y", (5, 3), hidden_size=4), {"x": (5, 3)}, {"y": (5, 4)}),
    "lstm_bidirectional": (lambda: LSTMBlock("x", "y", (5, 3), hidden_size=4, num_layers=2, bidirectional=True),
                           {"x": (5, 3)}, {"y": (5, 4)}),
    "lstm_last": (lambda: LSTMLastStepBlock("x", "y", (5, 3), hidden_size=4), {"x": (5, 3)}, {"y": (4,)}),
    "gru": (lambda: GRUBlock("x", "y", (5, 3), hidden_size=4), {"x": (5, 3)}, {"y": (5, 4)}),
    "gru_last": (lambda: GRULastStepBlock("x", "y", (5, 3), hidden_size=4), {"x": (5, 3)}, {"y": (4,)}),
    "self_attention_seq": (lambda: SelfAttentionSeqBlock(["x", "m"], ["y", "w"], [(5, 8), (5,)], num_heads=2,
                                                         use_layer_norm=True),
                           {"x": (5, 8), "m": (5,)}, {"y": (5, 8), "w": (5, 5)}),
    "self_attention_conv": (lambda: SelfAttentionConvBlock("x", ["y", "a"], (8, 3, 4)), {"x": (8, 3, 4)},
                            {"y": (8, 3, 4), "a": (12, 12)}),
    "multi_index_slicing": (lambda: MultiIndexSlicingBlock("x", "y", (6, 4), select_dim=-2, select_idxs=[0, 2, 5]),
                            {"x": (6, 4)}, {"y": (3, 4)}),
    "slice": (lambda: SliceBlock("x", "y", (6, 4), slice_dim=1, slice_idx=-1), {"x": (6, 4)}, {"y": (4,)}),
    "repeat_to_match": (lambda: RepeatToMatchBlock(["v", "s"], "y", [(3,), (7, 2)], repeat_at_idx=-2),
                        {"v": (3,), "s": (7, 2)}, {"y": (7, 3)}),
    "functional": (lambda: FunctionalBlock(["a", "b"], "y", [(3,), (3,)], func=torch.add), {"a": (3,), "b": (3,)},
                   {"y": (3,)}),
    "action_masking": (lambda: ActionMaskingBlock(["l", "m"], "y", [(4,), (4,)]), {"l": (4,), "m": (4,)},
                       {"y": (4,)}),
    "graph_conv": (lambda: GraphConvBlock(["n", "adj"], "y", [(5, 3), (5, 5)], hidden_features=[4, 6]),
                   {"n": (5, 3), "adj": (5, 5)}, {"y": (5, 6)}),
    "correlation": (lambda: CorrelationBlock(["a", "b"], "y", [(3, 2), (3, 2)]), {"a": (3, 2), "b": (3, 2)},
                    {"y": (3, 2)}),
    "torch_model": (lambda: TorchModelBlock("x", "y", (5,), in_num_dims=2, out_num_dims=2, net=_DictLinear()),
                    {"x": (5,)}, {"y": (3,)}),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("lead", [(), (2,), (2, 3), (2, 3, 2)], ids=["no_batch", "batch", "batch_time", "3_dims"])
def test_block_output_shapes(name: str, lead: tuple[int, ...]) -> None:
    make, in_shapes, out_shapes = CASES[name]
    block = make()
    assert block.out_shapes() == list(out_shapes.values())
    inputs = {k: torch.rand(*lead, *s) for k, s in in_shapes.items()}
    out = block(inputs)
    assert set(out) == set(out_shapes)
    for key, shape in out_shapes.items():
        assert tuple(out[key].shape) == (*lead, *shape), (name, key)


@pytest.mark.parametrize("name", ["dense", "vgg_dense", "lstm_last", "self_attention_seq", "graph_conv"])
def test_leading_dims_are_independent_samples(name: str) -> None:
    """A batch of 6 computed as (2, 3) gives the same numbers as computed flat."""
    make, in_shapes, out_shapes = CASES[name]
    block = make().eval()
    flat = {k: torch.rand(6, *s) for k, s in in_shapes.items()}
    nested = {k: v.reshape(2, 3, *v.shape[1:]) for k, v in flat.items()}
    a, b = block(flat), block(nested)
    for key in out_shapes:
        torch.testing.assert_close(a[key].reshape(b[key].shape), b[key])


def test_all_registered_blocks_are_covered() -> None:
    covered = {type(make()).__name__ for make, _, _ in CASES.values()}
    assert set(BLOCK_REGISTRY) - covered == {"InferenceBlock"}


def test_action_masking_gives_zero_probability() -> None:
    block = ActionMaskingBlock(["logits", "mask"], "masked", [(5,), (5,)])
    logits = torch.randn(3, 4, 5)
    mask = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0]).expand(3, 4, 5)
    probs = torch.softmax(block({"logits": logits, "mask": mask})["masked"], dim=-1)
    assert torch.all(probs[..., [1, 3, 4]] == 0.0)
    torch.testing.assert_close(probs.sum(-1), torch.ones(3, 4))


def test_masked_pooling_ignores_masked_entries() -> None:
    x = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    m = torch.tensor([[1.0, 1.0, 0.0]])
    mean = MaskedGlobalPoolingBlock(["x", "m"], "y", [(3, 2), (3,)], pooling_func="mean")({"x": x, "m": m})["y"]
    mx = MaskedGlobalPoolingBlock(["x", "m"], "y", [(3, 2), (3,)], pooling_func="max")({"x": x, "m": m})["y"]
    torch.testing.assert_close(mean, torch.tensor([[2.0, 3.0]]))
    torch.testing.assert_close(mx, torch.tensor([[3.0, 4.0]]))


def test_self_attention_conv_starts_as_identity() -> None:
    block = SelfAttentionConvBlock("x", "y", (8, 3, 3))
    x = torch.rand(2, 8, 3, 3)
    torch.testing.assert_close(block({"x": x})["y"], x)


def test_wrong_trailing_shape_names_key_and_expected_shape() -> None:
    block = DenseBlock("obs", "h", (4,), hidden_units=[8])
    with pytest.raises(ShapeError, match=r"'obs'.*shape \(3, 5\).*\(\*batch_dims, 4\)"):
        block({"obs": torch.rand(3, 5)})
    conv = VGGConvolutionBlock("screen", "h", (3, 8, 8), hidden_channels=[4])
    with pytest.raises(ShapeError, match=r"'screen'.*\(\*batch_dims, 3, 8, 8\)"):
        conv({"screen": torch.rand(2, 8, 8, 3)})


def test_missing_input_names_key() -> None:
    block = ConcatenationBlock(["a", "b"], "y", [(3,), (4,)])
    with pytest.raises(KeyError, match="'b'"):
        block({"a": torch.rand(2, 3)})


def test_mismatched_leading_dims_raise() -> None:
    block = ConcatenationBlock(["a", "b"], "y", [(3,), (4,)])
    with pytest.raises(ShapeError, match="leading"):
        block({"a": torch.rand(2, 3), "b": torch.rand(5, 4)})


def test_construction_errors_name_keys_and_shapes() -> None:
    with pytest.raises(ShapeError, match="'b'.*concat_dim"):
        ConcatenationBlock(["a", "b"], "y", [(2, 3), (2, 4)], concat_dim=-2)
    with pytest.raises(ShapeError, match=r"mask 'm'.*\(3,\).*\(4,\)"):
        ActionMaskingBlock(["l", "m"], "y", [(4,), (3,)])
    with pytest.raises(ShapeError, match="adjacency 'adj'"):
        GraphConvBlock(["n", "adj"], "y", [(5, 3), (4, 4)], hidden_features=[2])
    with pytest.raises(ShapeError, match="'x'.*at least 3 dims"):
        VGGConvolutionBlock("x", "y", (8, 8), hidden_channels=[4])
    with pytest.raises(ShapeError, match="2 in_shapes .* for 1 in_keys"):
        DenseBlock("x", "y", [(3,), (4,)], hidden_units=[2])


def test_unknown_block_and_activation_names_list_valid_names() -> None:
    with pytest.raises(ConfigurationError, match="unknown perception block 'DenseBlok'.*DenseBlock.*LSTMBlock"):
        block_type_from_name("DenseBlok")
    with pytest.raises(ConfigurationError, match="unknown non-linearity 'Relu'.*ReLU"):
        DenseBlock("x", "y", (3,), hidden_units=[2], non_lin="Relu")
    assert block_type_from_name("maze.perception.blocks.DenseBlock") is DenseBlock
    assert block_type_from_name("maze_lab.perception.blocks.feed_forward.DenseBlock") is DenseBlock


def _two_branch_net() -> InferenceBlock:
    blocks = {
        "inv": DenseBlock("inventory", "inv", (16,), hidden_units=[8]),
        "scr": VGGConvolutionDenseBlock("screen", "scr", (3, 8, 8), hidden_channels=[4], hidden_units=[8]),
        "cat": ConcatenationBlock(["inv", "scr"], "cat", [(8,), (8,)]),
        "move_logits": LinearOutputBlock("cat", "move_logits", (16,), output_units=4),
        "move": ActionMaskingBlock(["move_logits", "move_mask"], "move", [(4,), (4,)]),
        "use": LinearOutputBlock("cat", "use", (16,), output_units=16),
    }
    return InferenceBlock(["inventory", "screen", "move_mask"], ["move", "use"], [(16,), (3, 8, 8), (4,)], blocks)


@pytest.mark.parametrize("lead", [(), (3,), (2, 3), (2, 2, 3)])
def test_inference_block_shapes_and_order(lead: tuple[int, ...]) -> None:
    net = _two_branch_net()
    assert net.out_shapes() == [(4,), (16,)]
    assert list(net.execution_plan) == [0, 1, 2, 3]
    assert set(net.execution_plan[0]) == {"inv", "scr"}
    inputs = {"inventory": torch.rand(*lead, 16), "screen": torch.rand(*lead, 3, 8, 8),
              "move_mask": torch.ones(*lead, 4)}
    out = net(inputs)
    assert out["move"].shape == (*lead, 4)
    assert out["use"].shape == (*lead, 16)


def test_inference_block_errors() -> None:
    net = _two_branch_net()
    with pytest.raises(KeyError, match="missing input 'move_mask'"):
        net({"inventory": torch.rand(2, 16), "screen": torch.rand(2, 3, 8, 8)})
    with pytest.raises(ShapeError, match=r"'screen' has shape \(2, 8, 8, 3\).*\(\*batch_dims, 3, 8, 8\)"):
        net({"inventory": torch.rand(2, 16), "screen": torch.rand(2, 8, 8, 3), "move_mask": torch.ones(2, 4)})
    with pytest.raises(ShapeError, match=r"block 'b' expects 'a' with shape \(5,\).*gives \(3,\)"):
        InferenceBlock("x", "b", (4,), {"a": DenseBlock("x", "a", (4,), hidden_units=[3]),
                                        "b": DenseBlock("a", "b", (5,), hidden_units=[2])})
    with pytest.raises(ValueError, match="cannot link blocks: 'b' needs \\['z'\\]"):
        InferenceBlock("x", "b", (4,), {"b": DenseBlock("z", "b", (4,), hidden_units=[2])})
    with pytest.raises(ValueError, match="out_keys \\['nope'\\]"):
        InferenceBlock("x", "nope", (4,), {"b": DenseBlock("x", "b", (4,), hidden_units=[2])})


def test_inference_block_respects_hooks_and_grads() -> None:
    net = _two_branch_net()
    seen = []
    net.perception_dict["inv"].register_forward_hook(lambda m, i, o: seen.append(o["inv"].shape))
    out = net({"inventory": torch.rand(2, 16), "screen": torch.rand(2, 3, 8, 8), "move_mask": torch.ones(2, 4)})
    assert seen == [torch.Size([2, 8])]
    out["use"].sum().backward()
    assert net.perception_dict["inv"].net[0].weight.grad is not None
