"""Distributions against torch.distributions, the DistributionMapper's precedence and its errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.distributions as td
from conftest_perception import box

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.distributions import (
    BernoulliProbabilityDistribution,
    BetaProbabilityDistribution,
    CategoricalProbabilityDistribution,
    DiagonalGaussianProbabilityDistribution,
    DictProbabilityDistribution,
    DistributionMapper,
    MultiCategoricalProbabilityDistribution,
    SquashedGaussianProbabilityDistribution,
)
from maze_lab.perception.blocks import ActionMaskingBlock

B = (5, 3)  # batch dims used throughout


def test_categorical_matches_torch() -> None:
    space = gym.spaces.Discrete(4)
    logits = torch.randn(*B, 4)
    d = CategoricalProbabilityDistribution(logits, space, temperature=0.5)
    ref = td.Categorical(logits=logits / 0.5)
    a = d.sample()
    assert a.shape == B and a.dtype == torch.int64
    torch.testing.assert_close(d.log_prob(a), ref.log_prob(a))
    torch.testing.assert_close(d.entropy(), ref.entropy())
    torch.testing.assert_close(d.deterministic_sample(), logits.argmax(-1))
    other = CategoricalProbabilityDistribution(torch.randn(*B, 4), space)
    torch.testing.assert_close(d.kl(other), td.kl_divergence(ref, td.Categorical(logits=other.logits)))
    assert CategoricalProbabilityDistribution.required_logits_shape(space) == (4,)


def test_categorical_with_masked_logits_never_samples_masked_actions() -> None:
    mask = torch.tensor([0.0, 1.0, 0.0, 1.0])
    logits = ActionMaskingBlock(["l", "m"], "y", [(4,), (4,)])({"l": torch.randn(1000, 4),
                                                                "m": mask.expand(1000, 4)})["y"]
    d = CategoricalProbabilityDistribution(logits, gym.spaces.Discrete(4))
    samples = d.sample()
    assert set(samples.unique().tolist()) <= {1, 3}
    assert torch.all(d.probs[:, [0, 2]] == 0.0)
    assert torch.isfinite(d.entropy()).all() and torch.isfinite(d.kl(d)).all()
    assert torch.all(d.log_prob(torch.full((1000,), 1)) > -50)


def test_multi_categorical_matches_torch() -> None:
    space = gym.spaces.MultiDiscrete([3, 2, 4])
    logits = torch.randn(*B, 9)
    d = MultiCategoricalProbabilityDistribution(logits, space)
    refs = [td.Categorical(logits=c) for c in torch.split(logits, [3, 2, 4], dim=-1)]
    a = d.sample()
    assert a.shape == (*B, 3)
    assert space.contains(a[0, 0].numpy())
    torch.testing.assert_close(d.log_prob(a), sum(r.log_prob(a[..., i]) for i, r in enumerate(refs)))
    torch.testing.assert_close(d.entropy(), sum(r.entropy() for r in refs))
    assert MultiCategoricalProbabilityDistribution.required_logits_shape(space) == (9,)


def test_bernoulli_matches_torch() -> None:
    space = gym.spaces.MultiBinary(6)
    logits = torch.randn(*B, 6)
    d = BernoulliProbabilityDistribution(logits, space)
    ref = td.Independent(td.Bernoulli(logits=logits), 1)
    a = d.sample()
    assert a.dtype == torch.int8 and a.shape == (*B, 6)
    assert space.contains(a[0, 0].numpy())
    torch.testing.assert_close(d.log_prob(a), ref.log_prob(a.float()))
    torch.testing.assert_close(d.entropy(), ref.entropy())
    torch.testing.assert_close(d.deterministic_sample(), (logits > 0).to(torch.int8))


def test_diagonal_gaussian_matches_torch() -> None:
    space = box(2)
    logits = torch.randn(*B, 4)
    d = DiagonalGaussianProbabilityDistribution(logits, space, temperature=2.0)
    ref = td.Independent(td.Normal(logits[..., :2], logits[..., 2:].clamp(-20, 2).exp() * 2.0), 1)
    a = d.sample()
    torch.testing.assert_close(d.log_prob(a), ref.log_prob(a))
    torch.testing.assert_close(d.entropy(), ref.entropy())
    torch.testing.assert_close(d.deterministic_sample(), logits[..., :2])
    other = DiagonalGaussianProbabilityDistribution(torch.randn(*B, 4), space)
    torch.testing.assert_close(d.kl(other), td.kl_divergence(ref, td.Independent(other.dist, 1)))
    assert DiagonalGaussianProbabilityDistribution.required_logits_shape(space) == (4,)


def test_beta_matches_torch_and_respects_bounds() -> None:
    space = box(2, low=-2.0, high=3.0)
    logits = torch.randn(*B, 4)
    d = BetaProbabilityDistribution(logits, space)
    alpha = torch.nn.functional.softplus(logits[..., :2]) + 1
    beta = torch.nn.functional.softplus(logits[..., 2:]) + 1
    ref = td.Independent(td.TransformedDistribution(td.Beta(alpha, beta), [td.AffineTransform(-2.0, 5.0)]), 1)
    a = d.sample()
    assert torch.all((a >= -2.0) & (a <= 3.0))
    torch.testing.assert_close(d.log_prob(a), ref.log_prob(a), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(d.entropy(), td.Independent(td.Beta(alpha, beta), 1).entropy() + 2 * np.log(5.0))
    mode = d.deterministic_sample()
    torch.testing.assert_close(mode, -2.0 + 5.0 * (alpha - 1) / (alpha + beta - 2))
    with pytest.raises(ConfigurationError, match="finite Box bounds"):
        DistributionMapper(gym.spaces.Dict({"a": box(2)}), [{"action_head": "a", "distribution": "beta"}])


def test_squashed_gaussian_matches_torch() -> None:
    space = box(3, low=-2.0, high=2.0)
    logits = torch.randn(*B, 6)
    d = SquashedGaussianProbabilityDistribution(logits, space)
    base = td.Normal(logits[..., :3], logits[..., 3:].clamp(-20, 2).exp())
    ref = td.Independent(td.TransformedDistribution(base, [td.TanhTransform(), td.AffineTransform(0.0, 2.0)]), 1)
    a = d.sample()
    assert torch.all(a.abs() <= 2.0) and torch.isfinite(d.log_prob(a)).all()
    # compare away from the bounds, where float32 tanh saturates and both sides clamp differently
    inner = torch.empty(*B, 3).uniform_(-1.9, 1.9)
    torch.testing.assert_close(d.log_prob(inner), ref.log_prob(inner), rtol=1e-4, atol=1e-4)
    # no closed form after squashing: the entropy is the Gaussian's
    torch.testing.assert_close(d.entropy(), td.Independent(base, 1).entropy())
    torch.testing.assert_close(d.deterministic_sample(), 2.0 * torch.tanh(logits[..., :3]))
    r = d.rsample()
    assert r.requires_grad is False or r.grad_fn is not None


def test_rsample_carries_gradients() -> None:
    logits = torch.randn(4, 2, requires_grad=True)
    d = SquashedGaussianProbabilityDistribution(logits, box(1, low=-1.0, high=1.0))
    d.rsample().sum().backward()
    assert logits.grad is not None and torch.any(logits.grad != 0)


def test_dict_distribution_sums_heads() -> None:
    space = gym.spaces.Dict({"move": gym.spaces.Discrete(4), "use": gym.spaces.MultiBinary(3), "force": box(2)})
    mapper = DistributionMapper(space)
    logits = {k: torch.randn(7, *mapper.required_logits_shape(k)) for k in space.spaces}
    d = mapper.logits_dict_to_distribution(logits)
    assert isinstance(d, DictProbabilityDistribution)
    a = d.sample()
    assert set(a) == {"move", "use", "force"}
    lp = d.log_prob(a)
    torch.testing.assert_close(d.joint_log_prob(a), lp["move"] + lp["use"] + lp["force"])
    ent = d.entropy()
    torch.testing.assert_close(d.joint_entropy(), ent["move"] + ent["use"] + ent["force"])
    torch.testing.assert_close(d.joint_kl(d), torch.zeros(7), atol=1e-6, rtol=0)
    assert all(v.shape == (7,) for v in d.neg_log_prob(a).values())


def test_mapper_defaults() -> None:
    space = gym.spaces.Dict({"a": gym.spaces.Discrete(3), "b": gym.spaces.MultiDiscrete([2, 3]),
                             "c": gym.spaces.MultiBinary(4), "d": box(2)})
    mapper = DistributionMapper(space, [])
    assert mapper.distribution_class("a") is CategoricalProbabilityDistribution
    assert mapper.distribution_class("b") is MultiCategoricalProbabilityDistribution
    assert mapper.distribution_class("c") is BernoulliProbabilityDistribution
    assert mapper.distribution_class("d") is DiagonalGaussianProbabilityDistribution
    assert [mapper.required_logits_shape(k) for k in "abcd"] == [(3,), (5,), (4,), (4,)]


def test_mapper_action_head_wins_over_space_type() -> None:
    space = gym.spaces.Dict({"steer": box(1, low=-1.0, high=1.0), "special_action": box(1, low=-1.0, high=1.0)})
    # the head entry comes first and still wins over the later, more general space entry
    config = [
        {"action_head": "special_action", "distribution": "maze.distributions.squashed_gaussian."
                                                          "SquashedGaussianProbabilityDistribution"},
        {"action_space": "gym.spaces.Box", "distribution": "maze.distributions.beta.BetaProbabilityDistribution"},
    ]
    mapper = DistributionMapper(space, config)
    assert mapper.distribution_class("steer") is BetaProbabilityDistribution
    assert mapper.distribution_class("special_action") is SquashedGaussianProbabilityDistribution
    d = mapper.logits_dict_to_distribution({"steer": torch.randn(2, 2), "special_action": torch.randn(2, 2)})
    assert isinstance(d["special_action"], SquashedGaussianProbabilityDistribution)


def test_mapper_accepts_classes_short_names_and_dotted_paths() -> None:
    space = gym.spaces.Dict({"a": gym.spaces.Discrete(3)})
    for name in ("categorical", "CategoricalProbabilityDistribution", CategoricalProbabilityDistribution,
                 "maze_lab.distributions.categorical.CategoricalProbabilityDistribution"):
        m = DistributionMapper(space, [{"action_space": gym.spaces.Discrete, "distribution": name}])
        assert m.distribution_class("a") is CategoricalProbabilityDistribution


def test_mapper_errors_list_valid_names() -> None:
    space = gym.spaces.Dict({"a": gym.spaces.Discrete(3)})
    with pytest.raises(ConfigurationError, match="unknown distribution 'gausian'.*beta.*categorical.*squashed_gau"):
        DistributionMapper(space, [{"action_space": "Box", "distribution": "gausian"}])
    with pytest.raises(ConfigurationError, match="unknown action head 'b'; valid heads: a"):
        DistributionMapper(space, [{"action_head": "b", "distribution": "categorical"}])
    with pytest.raises(ConfigurationError, match="unknown action space type 'Boxx'"):
        DistributionMapper(space, [{"action_space": "Boxx", "distribution": "categorical"}])
    with pytest.raises(ConfigurationError, match="exactly one of 'action_space' or 'action_head'"):
        DistributionMapper(space, [{"distribution": "categorical"}])
    with pytest.raises(ConfigurationError, match="action head 'a'.*needs a Box"):
        DistributionMapper(space, [{"action_head": "a", "distribution": "beta"}])
    with pytest.raises(KeyError, match="unknown action head 'x'"):
        DistributionMapper(space).required_logits_shape("x")


def test_temperature_sharpens_and_flattens() -> None:
    space = gym.spaces.Discrete(3)
    logits = torch.tensor([1.0, 2.0, 3.0])
    cold = CategoricalProbabilityDistribution(logits, space, temperature=0.1).entropy()
    warm = CategoricalProbabilityDistribution(logits, space, temperature=10.0).entropy()
    assert cold < CategoricalProbabilityDistribution(logits, space).entropy() < warm


def test_discrete_start_offset() -> None:
    space = gym.spaces.Discrete(3, start=5)
    d = CategoricalProbabilityDistribution(torch.tensor([0.0, 10.0, 0.0]), space)
    assert int(d.deterministic_sample()) == 6
    assert space.contains(int(d.sample()))
    torch.testing.assert_close(d.log_prob(torch.tensor(6)), torch.log_softmax(torch.tensor([0.0, 10.0, 0.0]), 0)[1])
