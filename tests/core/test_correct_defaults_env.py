"""Correct by default (issue 9): the framework resets reward aggregators, env time counts full steps for
structured envs (TimeLimitWrapper, episode lengths), observation normalization estimates its statistics, and
the statistics carry both the env's reward and the reward the agent was trained on."""

from __future__ import annotations

from abc import ABC
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from maze_lab.core.env.core_env import CoreEnv
from maze_lab.core.env.interfaces import (
    ActionConversionInterface,
    ObservationConversionInterface,
    RewardAggregatorInterface,
)
from maze_lab.core.env.maze_env import MazeEnv
from maze_lab.core.env.structured_env import ActorID, StepKey, StructuredEnv, StructuredEnvSpacesMixin
from maze_lab.core.log_stats.base_events import BaseEnvEvents
from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.core.wrappers.monitoring_wrapper import MazeEnvMonitoringWrapper
from maze_lab.core.wrappers.time_limit_wrapper import TimeLimitWrapper
from maze_lab.core.wrappers.wrapper import Wrapper


# --- a CoreEnv written as the seed's tutorial shows: events, and a reward aggregator it never resets ---------
class ShopEvents(ABC):
    """Events of the shop env."""

    def sold(self, amount: int):
        """Goods were sold."""

    def wasted(self, amount: int):
        """Goods were thrown away."""


class ShopRewardAggregator(RewardAggregatorInterface):
    """As in the seed's tutorial: queries the events it collected and sums penalties."""

    def get_interfaces(self) -> list[type]:
        """Listens to the shop events."""
        return [ShopEvents]

    def summarize_reward(self, maze_state: Any = None) -> float:
        """-1 per wasted unit, -1 per sale event (a fee)."""
        rewards = [-float(e.attributes["amount"]) for e in self.query_events(ShopEvents.wasted)]
        rewards += [-1.0 for _ in self.query_events(ShopEvents.sold)]
        return sum(rewards)


class ShopCoreEnv(CoreEnv):
    """Action ``(sold, wasted)`` fires one ``sold`` event per unit sold and one ``wasted`` event; the reset fires
    a ``wasted`` event too (it must not count towards any reward). Ends after ``length`` steps."""

    def __init__(self, length: int = 10):
        super().__init__()
        self.length = length
        self.events = self.pubsub.create_event_topic(ShopEvents)
        self.reward_aggregator = ShopRewardAggregator()
        self.pubsub.register_subscriber(self.reward_aggregator)
        self.t = 0

    def step(self, maze_action: tuple[int, int]) -> tuple[Any, float, bool, bool, dict]:
        """Fire the events of the action and let the aggregator compute the reward."""
        sold, wasted = maze_action
        for _ in range(sold):
            self.events.sold(amount=1)
        if wasted:
            self.events.wasted(amount=wasted)
        self.t += 1
        reward = self.reward_aggregator.summarize_reward(self.get_maze_state())
        return self.get_maze_state(), reward, self.t >= self.length, False, {}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> int:
        """Back to t = 0 (throwing away last episode's leftovers: an event)."""
        self.t = 0
        self.events.wasted(amount=100)
        return self.get_maze_state()

    def get_maze_state(self) -> int:
        """The step counter."""
        return self.t


class _PairAction(ActionConversionInterface):
    def space_to_maze(self, action: dict, maze_state: Any) -> tuple[int, int]:
        return int(action["sold"]), int(action["wasted"])

    def maze_to_space(self, maze_action: tuple[int, int]) -> dict:
        return {"sold": maze_action[0], "wasted": maze_action[1]}

    def space(self) -> gym.spaces.Dict:
        return gym.spaces.Dict({"sold": gym.spaces.Discrete(20), "wasted": gym.spaces.Discrete(20)})


class _TimeObs(ObservationConversionInterface):
    def maze_to_space(self, maze_state: int) -> dict:
        return {"t": np.array([maze_state], dtype=np.float32)}

    def space(self) -> gym.spaces.Dict:
        return gym.spaces.Dict({"t": gym.spaces.Box(0.0, 1000.0, (1,), np.float32)})


def _shop_env(length: int = 10) -> MazeEnv:
    return MazeEnv(ShopCoreEnv(length), {0: _PairAction()}, {0: _TimeObs()})


ACTIONS = [(2, 5), (7, 0), (0, 0), (2, 10), (4, 12)]
EXPECTED = [-7.0, -7.0, 0.0, -12.0, -16.0]  # a fresh count each step; the reset's event never counts


def test_seed_style_aggregator_is_reset_every_step_and_episode_through_maze_env():
    env = _shop_env()
    for _ in range(2):  # the second episode starts from scratch as well
        env.reset(seed=0)
        rewards = [env.step({"sold": s, "wasted": w})[1] for s, w in ACTIONS]
        assert rewards == EXPECTED


def test_seed_style_aggregator_is_reset_when_the_core_env_is_stepped_directly():
    core = ShopCoreEnv()
    for _ in range(2):
        core.reset()
        assert [core.step(a)[1] for a in ACTIONS] == EXPECTED


class ExtraShopCoreEnv(ShopCoreEnv):
    """A subclass whose step fires an event before calling the parent's step (which must not drop it)."""

    def step(self, maze_action: tuple[int, int]) -> tuple[Any, float, bool, bool, dict]:
        """One extra unit sold, then the shop's step."""
        self.events.sold(amount=1)
        return super().step(maze_action)


def test_aggregator_reset_happens_once_per_step_in_a_subclass_chain():
    core = ExtraShopCoreEnv()
    core.reset()
    assert [core.step(a)[1] for a in ACTIONS] == [r - 1.0 for r in EXPECTED]


def test_cutting2d_aggregator_is_reset_once_per_step_by_the_framework_alone():
    from maze_lab.examples.cutting2d import Cutting2DCoreEnvironment, Cutting2DMazeAction
    from maze_lab.examples.cutting2d.reward import DefaultRewardAggregator

    class CountingAggregator(DefaultRewardAggregator):
        """Counts its resets."""

        resets = 0

        def reset(self) -> None:
            """Count, then forget the events."""
            self.resets += 1
            super().reset()

    aggregator = CountingAggregator()
    core = Cutting2DCoreEnvironment(max_pieces_in_inventory=5, raw_piece_size=(10, 10), static_demand=(5, 5),
                                    reward_aggregator=aggregator)
    core.reset()
    rewards = [core.step(Cutting2DMazeAction(0, False, False))[1] for _ in range(4)]
    assert rewards == [-1.0, 0.0, 0.0, -1.0]  # a raw piece is used up every fourth order
    assert aggregator.resets == 1 + 4  # once at reset, once per step: the env no longer does it by hand


# --- a structured CoreEnv: two sub-steps per full step -------------------------------------------------------
class TwoPhaseCoreEnv(CoreEnv):
    """Sub-step 0 (``order``) orders goods, sub-step 1 (``sell``) sells; events of both sub-steps count towards
    the reward the sell sub-step returns. Terminates after ``length`` full steps."""

    def __init__(self, length: int = 10):
        super().__init__()
        self.length = length
        self.events = self.pubsub.create_event_topic(ShopEvents)
        self.reward_aggregator = ShopRewardAggregator()
        self.pubsub.register_subscriber(self.reward_aggregator)
        self.phase = 0
        self.full_steps = 0

    def step(self, maze_action: int) -> tuple[Any, float, bool, bool, dict]:
        """Order (wasting ``maze_action`` units, reward 0) or sell ``maze_action`` units (reward of both)."""
        if self.phase == 0:
            if maze_action:
                self.events.wasted(amount=maze_action)
            self.phase = 1
            return self.full_steps, 0.0, False, False, {}
        for _ in range(maze_action):
            self.events.sold(amount=1)
        self.phase = 0
        self.full_steps += 1
        reward = self.reward_aggregator.summarize_reward()
        return self.full_steps, reward, self.full_steps >= self.length, False, {}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> int:
        """Back to the order sub-step of step 0."""
        self.phase, self.full_steps = 0, 0
        return 0

    def get_maze_state(self) -> int:
        """Full steps taken."""
        return self.full_steps

    def actor_id(self) -> ActorID:
        """``order`` acts first, then ``sell``."""
        return ActorID("order" if self.phase == 0 else "sell", 0)

    @property
    def agent_counts_dict(self) -> dict[StepKey, int]:
        """One agent per sub-step."""
        return {"order": 1, "sell": 1}


class _IntAction(ActionConversionInterface):
    def space_to_maze(self, action: dict, maze_state: Any) -> int:
        return int(action["n"])

    def maze_to_space(self, maze_action: int) -> dict:
        return {"n": maze_action}

    def space(self) -> gym.spaces.Dict:
        return gym.spaces.Dict({"n": gym.spaces.Discrete(20)})


def _two_phase_env(length: int = 10) -> MazeEnv:
    keys = ("order", "sell")
    return MazeEnv(TwoPhaseCoreEnv(length), {k: _IntAction() for k in keys}, {k: _TimeObs() for k in keys})


def test_sub_steps_of_a_structured_core_env_share_one_env_time():
    env = _two_phase_env()
    env.reset(seed=0)
    times, rewards = [], []
    for wasted, sold in [(3, 1), (0, 2), (5, 0)]:
        rewards.append(env.step({"n": wasted})[1])
        times.append(env.get_env_time())
        rewards.append(env.step({"n": sold})[1])
        times.append(env.get_env_time())
    assert times == [0, 1, 1, 2, 2, 3]
    # the aggregator collects the events of both sub-steps of a full step, and only those
    assert rewards == [0.0, -4.0, 0.0, -2.0, 0.0, -5.0]
    env.reset()
    assert env.get_env_time() == 0


class ManualTimeCoreEnv(TwoPhaseCoreEnv):
    """Advances env time itself (the Maze convention for structured core envs): the framework leaves it alone."""

    def step(self, maze_action: int) -> tuple[Any, float, bool, bool, dict]:
        """The two-phase step; after the sell sub-step the env time advances twice (a 'day' of two hours)."""
        result = super().step(maze_action)
        if self.phase == 0:
            self.context.increment_env_step()
            self.context.increment_env_step()
        return result


def test_core_env_that_manages_its_env_time_is_not_counted_twice():
    keys = ("order", "sell")
    env = MazeEnv(ManualTimeCoreEnv(), {k: _IntAction() for k in keys}, {k: _TimeObs() for k in keys})
    env.reset()
    times = []
    for _ in range(3):
        env.step({"n": 0})
        times.append(env.get_env_time())
    assert times == [0, 2, 2]


def test_time_limit_counts_full_steps_of_a_structured_core_env():
    env = TimeLimitWrapper(_two_phase_env(), max_episode_steps=2)
    env.reset(seed=0)
    flags = [env.step({"n": 1})[3] for _ in range(4)]
    assert flags == [False, False, False, True]  # truncated on the last sub-step of the second full step
    assert env.elapsed_steps == 2


class PlainStructuredEnv(StructuredEnv, StructuredEnvSpacesMixin):
    """A structured env without env time (no MazeEnv below): three agents act in turn on one key."""

    observation_space = gym.spaces.Dict({"t": gym.spaces.Box(0.0, 1000.0, (1,), np.float32)})
    action_space = gym.spaces.Dict({"n": gym.spaces.Discrete(3)})

    def __init__(self) -> None:
        self.agent = 0

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """The next agent acts."""
        self.agent = (self.agent + 1) % 3
        return {"t": np.zeros(1, np.float32)}, 1.0, False, False, {}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Agent 0 acts first."""
        self.agent = 0
        return {"t": np.zeros(1, np.float32)}, {}

    def actor_id(self) -> ActorID:
        """Agents 0, 1, 2 of key 0 in turn."""
        return ActorID(0, self.agent)

    @property
    def agent_counts_dict(self) -> dict[StepKey, int]:
        """Three agents on key 0."""
        return {0: 3}

    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """One key."""
        return {0: self.observation_space}

    @property
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """One key."""
        return {0: self.action_space}


def test_time_limit_counts_full_steps_of_a_structured_env_without_env_time():
    env = TimeLimitWrapper(PlainStructuredEnv(), max_episode_steps=2)
    env.reset()
    flags = [env.step({"n": 0})[3] for _ in range(6)]
    assert flags == [False] * 5 + [True]
    assert env.elapsed_steps == 2


def test_episode_length_statistics_count_full_steps_of_a_structured_core_env():
    env = LogStatsWrapper(MazeEnvMonitoringWrapper(_two_phase_env(length=3)), writers=[])
    env.reset(seed=0)
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step({"n": 1})
        done = terminated or truncated
    env.reset()
    assert env.get_stats_value(BaseEnvEvents.reward, "episode", "step_count") == 3
    assert env.get_stats_value(BaseEnvEvents.reward, "episode") == -6.0  # (-1 wasted, -1 sold) x 3


# --- logged rewards: the env's reward and the reward the agent is trained on ---------------------------------
def _play(env: Any, actions: list, reset: bool = True) -> list[float]:
    env.reset(seed=0)
    rewards = []
    for action in actions:
        _, reward, terminated, truncated, _ = env.step(action)
        rewards.append(reward)
        if terminated or truncated:
            break
    if reset:
        env.reset()  # closes the episode
    return rewards


def test_statistics_carry_original_and_trained_on_reward_of_stacked_reward_wrappers():
    from maze_lab.core.wrappers.reward_clipping_wrapper import RewardClippingWrapper
    from maze_lab.core.wrappers.reward_scaling_wrapper import RewardScalingWrapper

    env = LogStatsWrapper(MazeEnvMonitoringWrapper(RewardClippingWrapper(
        RewardScalingWrapper(_shop_env(length=5), scale=0.1), min_val=-1.0, max_val=0.0)), writers=[])
    trained = _play(env, [{"sold": s, "wasted": w} for s, w in ACTIONS])
    assert trained == pytest.approx([-0.7, -0.7, 0.0, -1.0, -1.0])  # scaled, then clipped
    assert env.get_stats_value(BaseEnvEvents.reward, "episode") == pytest.approx(-3.4)
    assert env.get_stats_value(BaseEnvEvents.reward_original, "episode") == sum(EXPECTED)
    stats = env.write_epoch_stats()
    assert stats[(BaseEnvEvents.reward_original, "mean", None)] == sum(EXPECTED)
    assert stats[(BaseEnvEvents.reward, "mean", None)] == pytest.approx(-3.4)


def test_original_reward_equals_reward_without_reward_wrappers():
    env = LogStatsWrapper(MazeEnvMonitoringWrapper(_shop_env(length=5)), writers=[])
    _play(env, [{"sold": s, "wasted": w} for s, w in ACTIONS])
    assert env.get_stats_value(BaseEnvEvents.reward_original, "episode") == sum(EXPECTED)
    assert env.get_stats_value(BaseEnvEvents.reward, "episode") == sum(EXPECTED)


def test_original_reward_of_a_structured_env_above_a_reward_wrapper():
    from maze_lab.core.wrappers.reward_scaling_wrapper import RewardScalingWrapper
    from maze_lab.examples.cutting2d.env.maze_env import maze_env_factory
    from maze_lab.examples.cutting2d.env.struct_env import StructuredCutting2DEnvironment

    flat = RewardScalingWrapper(maze_env_factory(max_pieces_in_inventory=5, raw_piece_size=(10, 10),
                                                 static_demand=(5, 5), max_steps=4), scale=10.0)
    env = LogStatsWrapper(MazeEnvMonitoringWrapper(StructuredCutting2DEnvironment(flat)), writers=[])
    select, cut = {"piece_idx": 0}, {"cut_rotation": 0, "cut_order": 0}
    trained = _play(env, [select, cut] * 4)
    assert trained == [0.0, -10.0, 0.0, 0.0, 0.0, 0.0, 0.0, -10.0]
    assert env.get_stats_value(BaseEnvEvents.reward, "episode", "step_count") == 4
    assert env.get_stats_value(BaseEnvEvents.reward, "episode") == -20.0
    assert env.get_stats_value(BaseEnvEvents.reward_original, "episode") == -2.0


def test_rewards_of_steps_taken_inside_reset_do_not_leak_into_the_first_step():
    from maze_lab.core.wrappers.reward_scaling_wrapper import RewardScalingWrapper

    class SkipOnReset(Wrapper):
        """Takes one step with a large waste inside reset (like a random-reset or a sampling wrapper)."""

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
            """Reset, then one step."""
            self.env.reset(seed=seed, options=options)
            obs, *_ = self.env.step({"sold": 0, "wasted": 19})
            return obs, {}

    env = LogStatsWrapper(SkipOnReset(RewardScalingWrapper(_shop_env(length=5), scale=2.0)), writers=[])
    _play(env, [{"sold": 1, "wasted": 0}, {"sold": 0, "wasted": 1}])
    assert env.get_stats_value(BaseEnvEvents.reward_original, "episode") == -2.0
    assert env.get_stats_value(BaseEnvEvents.reward, "episode") == -4.0


def test_run_context_statistics_and_summary_show_both_rewards(tmp_path):
    from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
    from maze_lab.run.run_context import RunContext

    rc = RunContext(env=lambda: GymMazeEnv("CartPole-v1"), wrappers={"RewardScalingWrapper": {"scale": 0.1}},
                    overrides={"algorithm.epoch_length": 2, "algorithm.n_rollout_steps": 32,
                               "runner.concurrency": 2, "algorithm.eval_repeats": 1, "n_epochs": 1,
                               "log_base_dir": str(tmp_path / "outputs")}, silent=True)
    rc.train()
    df = rc.stats
    means = df[(df.prefix == "train") & (df.topic == "BaseEnvEvents") & (df.name == "mean")]
    original = float(means[means.event == "reward_original"].value.iloc[-1])
    trained = float(means[means.event == "reward"].value.iloc[-1])
    assert original == pytest.approx(10 * trained) and original >= 8  # CartPole: +1 per step, >= 8 steps
    from maze_lab.run.run_dir import RunDirectory

    assert RunDirectory(rc.run_dir).read_summary()["final_train_reward"] == pytest.approx(trained)
    evaluation = rc.evaluate()
    assert evaluation["BaseEnvEvents/reward_original/mean"] == pytest.approx(
        10 * evaluation["BaseEnvEvents/reward/mean"])
    rc.close()


# --- observation normalization: the shipped option estimates its statistics by sampling --------------------
def _shipped_normalization_config() -> dict:
    from pathlib import Path

    from omegaconf import OmegaConf

    import maze_lab.conf

    path = Path(maze_lab.conf.__file__).parent / "wrappers" / "observation_normalization.yaml"
    return OmegaConf.to_container(OmegaConf.load(path))


def _gym_dict_env() -> Any:
    from dict_env import DictImageEnv

    from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv

    return GymMazeEnv(DictImageEnv())


def _cartpole_env() -> Any:
    from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv

    return TimeLimitWrapper(GymMazeEnv("CartPole-v1"), max_episode_steps=50)


@pytest.mark.parametrize("make_env, act", [
    (_cartpole_env, lambda t, env: {"action": t % 2}),
    (_gym_dict_env, lambda t, env: {"action": t % 4}),
    (lambda: _two_phase_env(length=6), lambda t, env: {"n": t % 3}),  # structured: two policy keys
    (lambda: _shop_env(length=6), lambda t, env: {"sold": t % 3, "wasted": t % 2}),
])
def test_shipped_normalization_option_estimates_statistics_on_every_env(make_env, act):
    from maze_lab.core.wrappers.observation_normalization import find_normalization_wrapper
    from maze_lab.core.wrappers.wrapper import wrap_env

    env = wrap_env(make_env(), _shipped_normalization_config())
    wrapper = find_normalization_wrapper(env)
    obs, _ = env.reset(seed=1)
    assert wrapper.has_all_statistics() and wrapper.get_normalization_statistics()
    for t in range(8):
        for name in wrapper.strategies:
            if name in obs:
                assert obs[name].dtype == np.float32 and np.all(np.abs(obs[name]) <= 5.0)  # clip_range [-5, 5]
        assert env.observation_space.contains(obs)
        obs, _, terminated, truncated, _ = env.step(act(t, env))
        if terminated or truncated:
            obs, _ = env.reset()


def test_estimated_statistics_are_the_same_in_every_env_instance_and_match_explicit_sampling():
    from maze_lab.core.wrappers.observation_normalization import (
        ObservationNormalizationWrapper,
        obtain_normalization_statistics,
    )

    first = ObservationNormalizationWrapper(_gym_dict_env(), statistics_dump=None, n_samples=60, sampling_seed=7)
    second = ObservationNormalizationWrapper(_gym_dict_env(), statistics_dump=None, n_samples=60, sampling_seed=7)
    first.reset(seed=0)
    second.reset()
    explicit = ObservationNormalizationWrapper(_gym_dict_env(), statistics_dump=None, n_samples=None)
    expected = obtain_normalization_statistics(explicit, n_samples=60, seed=7)
    for env in (first, second):
        stats = env.get_normalization_statistics()
        assert set(stats) == {"rgb_image", "feature_vector"}  # the Discrete observation passes through
        for name in stats:
            for key in ("mean", "std"):
                np.testing.assert_array_equal(stats[name][key], expected[name][key])


def test_unseeded_first_reset_after_estimation_is_not_the_same_in_every_env():
    from maze_lab.core.wrappers.observation_normalization import ObservationNormalizationWrapper

    firsts = [ObservationNormalizationWrapper(_gym_dict_env(), statistics_dump=None, n_samples=20).reset()[0]
              for _ in range(2)]
    assert not np.array_equal(firsts[0]["rgb_image"], firsts[1]["rgb_image"])


def test_statistics_given_before_the_first_reset_skip_sampling():
    from maze_lab.core.wrappers.observation_normalization import ObservationNormalizationWrapper

    class NoStepping(Wrapper):
        """Fails on step: the wrapper must not sample."""

        def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
            """Refuse."""
            raise AssertionError("sampled although statistics were given")

    env = ObservationNormalizationWrapper(NoStepping(_cartpole_env()), statistics_dump=None, n_samples=50)
    env.set_normalization_statistics({"observation": {"mean": np.float32(1.0), "std": np.float32(2.0)}})
    obs, _ = env.reset(seed=3)
    raw, _ = _cartpole_env().reset(seed=3)
    np.testing.assert_allclose(obs["observation"], (raw["observation"] - 1.0) / 2.0, rtol=1e-6)


def test_no_automatic_estimation_names_the_option_in_its_error():
    from maze_lab.core.wrappers.observation_normalization import ObservationNormalizationWrapper

    env = ObservationNormalizationWrapper(_cartpole_env(), statistics_dump=None, n_samples=None)
    with pytest.raises(RuntimeError, match="no normalization statistics for observation 'observation'.*n_samples"):
        env.reset(seed=0)
    with pytest.raises(ValueError, match="n_samples must be a positive number of env steps or None, got 0"):
        ObservationNormalizationWrapper(_cartpole_env(), statistics_dump=None, n_samples=0)


def test_run_context_trains_with_the_normalization_option_and_checkpoints_its_statistics(tmp_path):
    import torch

    from maze_lab.run.run_context import RunContext

    rc = RunContext(wrappers="observation_normalization",
                    overrides={"algorithm.epoch_length": 2, "algorithm.n_rollout_steps": 16, "runner.concurrency": 2,
                               "algorithm.eval_repeats": 1, "n_epochs": 1, "log_base_dir": str(tmp_path / "out")},
                    silent=True)
    rc.train()
    train_stats = [e.get_normalization_statistics() for e in rc._single().train_env.envs]
    eval_stats = rc._single().eval_env.envs[0].get_normalization_statistics()
    state = torch.load(rc.run_dir / "checkpoints" / "state_dict_last.pt", weights_only=True)
    saved = state["normalization_statistics"]["observation"]
    for stats in [*train_stats, eval_stats]:
        for key in ("mean", "std"):
            np.testing.assert_array_equal(stats["observation"][key], saved[key].numpy())
    rc.close()


def test_cli_trains_with_the_normalization_option(tmp_path):
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).parent / "maze-lab"
    command = [str(script)] if script.exists() else [shutil.which("maze-lab") or "maze-lab"]
    proc = subprocess.run([*command, "train", "wrappers=observation_normalization", "n_epochs=1",
                           "algorithm.epoch_length=2", "algorithm.n_rollout_steps=16", "runner.concurrency=2",
                           "algorithm.eval_repeats=1"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "run directory: " in proc.stdout
