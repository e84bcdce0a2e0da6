"""Bounded Box actions work out of the box: the default distribution keeps every action inside [low, high], the
issue's CLI example trains, PPO takes its ``bounded_box`` values and learns Pendulum-v1."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.distributions as td

from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.distributions import (
    DiagonalGaussianProbabilityDistribution,
    DistributionMapper,
    SquashedGaussianProbabilityDistribution,
    default_distribution,
    is_bounded_box,
)
from maze_lab.run.run_context import RunContext
from maze_lab.train.trainers.common.config import PPO_BOUNDED_BOX_DEFAULTS, PPOAlgorithmConfig


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _box(low, high, shape=(1,)) -> gym.spaces.Box:
    return gym.spaces.Box(np.float32(low), np.float32(high), shape, np.float32)


# ---- the default distribution ------------------------------------------------------------------------------------
def test_a_bounded_box_defaults_to_the_squashed_gaussian_an_unbounded_one_to_the_gaussian() -> None:
    partly = gym.spaces.Box(np.array([-1.0, -np.inf], np.float32), np.array([1.0, np.inf], np.float32))
    space = gym.spaces.Dict({"torque": _box(-2.0, 2.0), "free": _box(-np.inf, np.inf, (2,)), "partly": partly})
    mapper = DistributionMapper(space)
    assert mapper.distribution_class("torque") is SquashedGaussianProbabilityDistribution
    assert mapper.distribution_class("free") is DiagonalGaussianProbabilityDistribution
    assert mapper.distribution_class("partly") is DiagonalGaussianProbabilityDistribution
    assert [is_bounded_box(space[k]) for k in ("torque", "free", "partly")] == [True, False, False]
    assert default_distribution(gym.spaces.Discrete(3)).__name__ == "CategoricalProbabilityDistribution"
    # a config entry still wins over the default
    config = [{"action_space": "Box", "distribution": "beta"}]
    assert DistributionMapper(gym.spaces.Dict({"torque": _box(-2.0, 2.0)}), config).distribution_class(
        "torque").__name__ == "BetaProbabilityDistribution"


@pytest.mark.parametrize("bounds", [(-2.0, 2.0), (0.001, 0.9), (-5.1, 3.3), (0.1, 0.7)])
@pytest.mark.parametrize("distribution", ["default", "squashed_gaussian", "beta"])
def test_samples_and_deterministic_actions_stay_in_bounds_for_extreme_logits(bounds, distribution) -> None:
    space = _box(*bounds, shape=(3,))
    config = [] if distribution == "default" else [{"action_head": "a", "distribution": distribution}]
    mapper = DistributionMapper(gym.spaces.Dict({"a": space}), config)
    # means far outside the bounds (a saturated tanh, a Beta at its edge) and stds from tiny to the maximum
    extremes = torch.tensor([-40.0, -8.0, 0.0, 8.0, 40.0])
    mean = extremes.repeat_interleave(5).reshape(-1, 1).expand(-1, 3)
    log_std = extremes.repeat(5).reshape(-1, 1).expand(-1, 3) / 2.0
    d = mapper.logits_dict_to_distribution({"a": torch.cat([mean, log_std], dim=-1)})
    for actions in (d.sample()["a"], d.deterministic_sample()["a"]):
        outside = [a for a in actions.numpy() if not space.contains(a)]
        assert not outside, f"actions outside {space}: {outside[:3]}"
    assert torch.isfinite(d.log_prob(d.sample())["a"]).all()


def test_squashed_gaussian_entropy_kl_and_temperature_match_the_underlying_gaussian() -> None:
    space = _box(-1.0, 3.0, shape=(2,))
    generator = torch.Generator().manual_seed(0)
    logits, other_logits = torch.randn(6, 4, generator=generator), torch.randn(6, 4, generator=generator)
    d = SquashedGaussianProbabilityDistribution(logits, space, temperature=0.5)
    other = SquashedGaussianProbabilityDistribution(other_logits, space)
    # log-stds are clamped to [-20, 2]
    base = td.Normal(logits[:, :2], logits[:, 2:].clamp(-20, 2).exp() * 0.5)
    other_base = td.Normal(other_logits[:, :2], other_logits[:, 2:].clamp(-20, 2).exp())
    torch.testing.assert_close(d.entropy(), base.entropy().sum(-1))
    torch.testing.assert_close(d.kl(other), td.kl_divergence(base, other_base).sum(-1))
    torch.testing.assert_close(d.kl(d), torch.zeros(6), atol=1e-6, rtol=0)
    ref = td.TransformedDistribution(base, [td.TanhTransform(), td.AffineTransform(1.0, 2.0)])
    inner = torch.empty(6, 2).uniform_(-0.9, 2.9, generator=generator)
    torch.testing.assert_close(d.log_prob(inner), ref.log_prob(inner).sum(-1), rtol=1e-4, atol=1e-4)
    with pytest.raises(TypeError, match="KL between SquashedGaussian.* and DiagonalGaussian"):
        d.kl(DiagonalGaussianProbabilityDistribution(logits, space))


# ---- the example and the PPO defaults ---------------------------------------------------------------------
def _push_mean_out_of_bounds(rc: RunContext) -> None:
    """Make the policy's mean torque 5 (bounds ±2): a distribution that is not bounded would leave the bounds."""
    head = rc.trainer.policy.networks[0].perception_dict["action"].net
    with torch.no_grad():
        head.bias[0] = 5.0


def test_the_cli_example_a2c_on_pendulum_trains_an_epoch(tmp_path) -> None:
    """`maze-lab train env.name=Pendulum-v1 algorithm=a2c n_epochs=1`, the example of conf_train.yaml."""
    rc = RunContext(algorithm="a2c", overrides={"env.name": "Pendulum-v1", "n_epochs": 1}, run_dir=tmp_path,
                    silent=True)
    _push_mean_out_of_bounds(rc)
    rc.train()
    trainer = rc.trainer
    assert trainer.epoch == 1 and trainer.stop_reason == "done"
    assert trainer.env_steps == 25 * 100 * 2  # a2c.yaml's epoch: the generic values, A2C has no bounded_box ones
    assert trainer.bounded_box_changes == {} and trainer.config.gamma == 0.98
    assert np.isfinite(trainer.last_eval_reward)
    rc.close()


def test_ppo_on_pendulum_takes_its_bounded_box_values_and_trains(tmp_path, capsys) -> None:
    rc = RunContext(overrides={"env.name": "Pendulum-v1", "n_epochs": 1, "algorithm.n_optimization_epochs": 1},
                    run_dir=tmp_path, silent=True)
    _push_mean_out_of_bounds(rc)
    trainer = rc.trainer
    assert "every action head is a bounded Box: training with algorithm.bounded_box gamma=0.9" in \
        capsys.readouterr().err
    expected = {**PPO_BOUNDED_BOX_DEFAULTS}
    expected.pop("n_optimization_epochs")  # set by this test: the user's value wins
    assert trainer.bounded_box_changes == expected
    assert {k: getattr(trainer.config, k) for k in PPO_BOUNDED_BOX_DEFAULTS} == {**PPO_BOUNDED_BOX_DEFAULTS,
                                                                                "n_optimization_epochs": 1}
    rc.train()
    assert trainer.stop_reason == "done" and trainer.env_steps == 2 * 1024 * 2
    rc.close()


def test_values_you_set_win_over_the_bounded_box_ones_and_other_spaces_keep_the_generic_ones(tmp_path) -> None:
    def trainer(**overrides):
        rc = RunContext(overrides={"env.name": "Pendulum-v1", **overrides}, run_dir=tmp_path / str(len(runs)),
                        silent=True)
        runs.append(rc)
        return rc.trainer

    runs: list[RunContext] = []
    mine = trainer(**{"algorithm.gamma": 0.95, "algorithm.bounded_box.lr": 0.0005})
    assert mine.config.gamma == 0.95 and mine.config.lr == 0.0005 and mine.config.gae_lambda == 0.95
    off = trainer(**{"algorithm.bounded_box": {}})
    assert off.config.gamma == 0.98 and off.config.lr == 0.00025 and off.bounded_box_changes == {}
    cartpole = trainer(**{"env.name": "CartPole-v1"})
    assert cartpole.config.gamma == 0.98 and cartpole.config.n_rollout_steps == 100
    for rc in runs:
        rc.close()


class _PushAndBrake(gym.Env):
    """A point on a line: a bounded force and a discrete brake (a Dict action space, not only bounded Boxes)."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = gym.spaces.Dict({"force": gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
                                    "brake": gym.spaces.Discrete(2)})

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._state = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        self._t = 0
        return self._state.copy(), {}

    def step(self, action):
        assert self.action_space["force"].contains(action["force"]), action
        velocity = self._state[1] * (0.5 if action["brake"] else 1.0) + 0.1 * float(action["force"][0])
        self._state = np.clip([self._state[0] + velocity, velocity], -10.0, 10.0).astype(np.float32)
        self._t += 1
        return self._state.copy(), -abs(float(self._state[0])), False, self._t >= 20, {}


def test_mixed_action_spaces_keep_the_generic_values_and_squash_their_box_head(tmp_path) -> None:
    rc = RunContext(env=lambda: GymMazeEnv(_PushAndBrake()),
                    overrides={"n_epochs": 1, "algorithm.epoch_length": 2, "algorithm.n_rollout_steps": 16},
                    run_dir=tmp_path, silent=True)
    trainer = rc.trainer
    assert trainer.bounded_box_changes == {} and trainer.config.gamma == 0.98
    assert trainer.policy.distribution_mapper.distribution_class("force") is SquashedGaussianProbabilityDistribution
    rc.train()
    assert trainer.stop_reason == "done"
    rc.close()


def test_bounded_box_values_are_checked() -> None:
    with pytest.raises(ValueError, match=r"bounded_box: unknown parameter\(s\) \['gama'\]; valid: \['epoch_length'"):
        PPOAlgorithmConfig(bounded_box={"gama": 0.9})
    with pytest.raises(ValueError, match=r"bounded_box: .*gamma must be in \[0, 1\], got 1.5"):
        PPOAlgorithmConfig(bounded_box={"gamma": 1.5})
    with pytest.raises(ValueError, match="bounded_box must be a dict of parameters"):
        PPOAlgorithmConfig(bounded_box=0.9)  # type: ignore[arg-type]
    config, changes = PPOAlgorithmConfig(gamma=0.95).for_bounded_box_actions()
    assert config.gamma == 0.95 and changes["lr"] == 0.002 and "gamma" not in changes


# ---- learning ----------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_ppo_with_the_default_config_learns_pendulum(tmp_path) -> None:
    """Deterministic evaluation (8 episodes) better than -300 (random: about -1,250) within 36,864 env steps; the
    issue allows 100,000. Seed 1 gets there after 16,384 steps."""
    rc = RunContext(overrides={"env.name": "Pendulum-v1", "seed": 1, "algorithm.deterministic_eval": True,
                               "algorithm.eval_repeats": 8, "runner.eval_concurrency": 8, "algorithm.patience": 0},
                    run_dir=tmp_path, silent=True)
    trainer = rc.trainer
    rewards = []

    def stop_when_solved(tr, _stats):
        rewards.append(tr.last_eval_reward)
        if tr.last_eval_reward > -300 or tr.env_steps >= 36_864:
            tr.request_stop()

    trainer.callbacks.append(stop_when_solved)
    rc.train(n_epochs=0)
    rc.close()
    assert rewards[-1] > -300, f"deterministic evaluation rewards per 4,096 env steps: {[round(r) for r in rewards]}"
    assert rewards[0] < -600  # it did learn: one epoch in, the policy is still far off
