"""The route to Stable-Baselines3 without user glue: GymnasiumEnvAdapter(env, flat=True).

Covers the NoDict wrappers through the adapter, errors for observations that do not match their space, the
flat space mapping (round trips), structured envs as one flat step, action masks, and SB3 PPO training on the
Cutting-2D flat env and on a custom inventory env with Dict observations and Dict actions.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from dict_env import DictImageEnv
from gymnasium.utils.env_checker import check_env

from maze_lab.core.env.core_env import CoreEnv
from maze_lab.core.env.interfaces import ActionConversionInterface, ObservationConversionInterface
from maze_lab.core.env.maze_env import MazeEnv
from maze_lab.core.env.space_checks import SpaceMismatchError
from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.wrappers.flat_spaces import FlatActionLayout, FlatObservationLayout
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv, GymnasiumEnvAdapter
from maze_lab.core.wrappers.no_dict_spaces_wrapper import (
    NoDictActionWrapper,
    NoDictObservationWrapper,
    NoDictSpacesWrapper,
)
from maze_lab.core.wrappers.wrapper import ObservationWrapper, Wrapper
from maze_lab.examples.cutting2d import SIMPLE_PROBLEM, make_masked_env, make_struct_env, maze_env_factory

# --- a custom env: a shop restocks one of three items per step ----------------------------------------------
N_ITEMS, CAPACITY, EPISODE_LENGTH = 3, 3, 20


@dataclass
class ShopState:
    """Units in stock per item and the item the next customer asks for."""

    stock: np.ndarray
    demand: int


@dataclass
class Restock:
    """Add ``quantity`` units of ``item`` (up to the shelf capacity)."""

    item: int
    quantity: int


class ShopCoreEnv(CoreEnv):
    """Each step: restock, then one customer asks for the announced item (+1 if in stock, else -1); every
    restocked unit costs 0.2. A random policy earns about 0 per episode, restocking the announced item when it is
    out of stock earns 16."""

    def __init__(self) -> None:
        super().__init__()
        self.rng = np.random.default_rng()
        self.state = ShopState(np.zeros(N_ITEMS, dtype=np.int64), 0)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> ShopState:
        """Empty shelves (or ``options["stock"]``), a random first customer."""
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        stock = np.array((options or {}).get("stock", np.zeros(N_ITEMS)), dtype=np.int64)
        self.state = ShopState(stock, int(self.rng.integers(N_ITEMS)))
        return self.state

    def step(self, maze_action: Restock) -> tuple[ShopState, float, bool, bool, dict]:
        """Restock, serve the customer, announce the next one."""
        s = self.state
        s.stock[maze_action.item] = min(CAPACITY, s.stock[maze_action.item] + maze_action.quantity)
        reward = -0.2 * maze_action.quantity
        if s.stock[s.demand] > 0:
            s.stock[s.demand] -= 1
            reward += 1.0
        else:
            reward -= 1.0
        s.demand = int(self.rng.integers(N_ITEMS))
        self.t += 1
        return s, reward, False, self.t >= EPISODE_LENGTH, {}

    def get_maze_state(self) -> ShopState:
        """The current state."""
        return self.state


class ShopObservation(ObservationConversionInterface):
    """Stock levels, the announced item, and ``item_mask``: the items with room on the shelf."""

    def maze_to_space(self, maze_state: ShopState) -> dict:
        """Dict observation of the state."""
        return {"stock": maze_state.stock.astype(np.float32), "demand": np.int64(maze_state.demand),
                "item_mask": (maze_state.stock < CAPACITY).astype(np.float32)}

    def space(self) -> gym.spaces.Dict:
        """Box stock, Discrete demand, Box mask."""
        return gym.spaces.Dict({"stock": gym.spaces.Box(0, CAPACITY, (N_ITEMS,), np.float32),
                                "demand": gym.spaces.Discrete(N_ITEMS),
                                "item_mask": gym.spaces.Box(0, 1, (N_ITEMS,), np.float32)})


class ShopAction(ActionConversionInterface):
    """``{"item": Discrete(3), "quantity": Discrete(3)}`` -> Restock."""

    def space_to_maze(self, action: dict, maze_state: ShopState) -> Restock:
        """Restock of the dict action."""
        return Restock(int(action["item"]), int(action["quantity"]))

    def space(self) -> gym.spaces.Dict:
        """Two discrete heads."""
        return gym.spaces.Dict({"item": gym.spaces.Discrete(N_ITEMS), "quantity": gym.spaces.Discrete(3)})


def make_shop() -> MazeEnv:
    """The shop as a MazeEnv."""
    return MazeEnv(ShopCoreEnv(), {0: ShopAction()}, {0: ShopObservation()})


# --- helpers -------------------------------------------------------------------------------------------------
def _check(env: gym.Env) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)


def _mean_return(env: gym.Env, policy: Any, episodes: int) -> float:
    returns = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=1000 + ep)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            total += reward
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


# --- issue 9, point 1: NoDict wrappers through the adapter ---------------------------------------------------
@pytest.mark.parametrize("wrapper", [NoDictActionWrapper, NoDictObservationWrapper, NoDictSpacesWrapper])
@pytest.mark.parametrize("flat", [False, True])
def test_no_dict_wrappers_through_the_adapter(wrapper: type, flat: bool) -> None:
    """Plain spaces pass through (flat: Box and Discrete), the checker passes, steps match raw CartPole."""
    adapter = GymnasiumEnvAdapter(wrapper(GymMazeEnv("CartPole-v1")), flat=flat)
    raw = gym.make("CartPole-v1")
    if flat or wrapper is not NoDictActionWrapper:
        assert adapter.observation_space == raw.observation_space
    if flat or wrapper is not NoDictObservationWrapper:
        assert adapter.action_space == raw.action_space
    _check(adapter)
    obs, _ = adapter.reset(seed=5)
    raw_obs, _ = raw.reset(seed=5)
    for t in range(6):
        flat_obs = obs if isinstance(obs, np.ndarray) else obs["observation"]
        np.testing.assert_array_equal(flat_obs, raw_obs)
        action = t % 2 if isinstance(adapter.action_space, gym.spaces.Discrete) else {"action": t % 2}
        obs, reward, *_ = adapter.step(action)
        raw_obs, raw_reward, *_ = raw.step(t % 2)
        assert reward == raw_reward


# --- issue 9, point 2: a missing observation key names the key and the space ----------------------------------
class _DropOrderedPiece(ObservationWrapper):
    """A faulty wrapper: drops an observation but keeps declaring it in its space."""

    def observation(self, observation: dict) -> dict:
        """The observation without ``ordered_piece``."""
        return {k: v for k, v in observation.items() if k != "ordered_piece"}


@pytest.mark.parametrize("flat", [False, True])
def test_missing_observation_key_names_the_key_and_the_space(flat: bool) -> None:
    adapter = GymnasiumEnvAdapter(_DropOrderedPiece(maze_env_factory(**SIMPLE_PROBLEM)), flat=flat)
    with pytest.raises(SpaceMismatchError, match=r"missing \['ordered_piece'\].*Dict\('inventory'"):
        adapter.reset(seed=0)


def test_missing_action_key_names_the_key() -> None:
    adapter = GymnasiumEnvAdapter(maze_env_factory(**SIMPLE_PROBLEM))
    adapter.reset(seed=0)
    with pytest.raises(SpaceMismatchError, match=r"misses \['cut_rotation'\]"):
        adapter.step({"piece_idx": 0, "cut_order": 0})


# --- the flat space mapping -----------------------------------------------------------------------------------
def test_flat_observation_layout_round_trip() -> None:
    """Every supported entry type maps to the flat Box and back unchanged; the layout says where each lies."""
    space = gym.spaces.Dict({
        "image": gym.spaces.Box(0, 255, (2, 3, 3), np.uint8),
        "vector": gym.spaces.Box(-1.0, 1.0, (4,), np.float64),
        "category": gym.spaces.Discrete(3, start=-1),
        "counts": gym.spaces.MultiDiscrete([2, 5]),
        "flags": gym.spaces.MultiBinary(3),
    })
    space.seed(0)
    layout = FlatObservationLayout(space)
    assert layout.space.shape == (18 + 4 + 3 + 7 + 3,) and layout.space.dtype == np.float32
    assert [(f.name, f.start, f.stop) for f in layout.fields] == [
        ("category", 0, 3), ("counts", 3, 10), ("flags", 10, 13), ("image", 13, 31), ("vector", 31, 35)]
    for _ in range(20):
        obs = space.sample()
        vec = layout.flatten(obs)
        assert layout.space.contains(vec)
        back = layout.unflatten(vec)
        for key, value in obs.items():
            np.testing.assert_allclose(back[key], value, rtol=1e-6)
            assert np.asarray(back[key]).dtype == np.asarray(value).dtype, key
    obs = space.sample()
    obs["category"] = 1  # the last of -1, 0, 1: one-hot position 2
    assert layout.flatten(obs)[layout.field("category").slice].tolist() == [0, 0, 1]


def test_flat_action_layout_round_trip() -> None:
    """Discrete heads -> MultiDiscrete (offsets for ``start``), Box heads -> one Box, a mix is an error."""
    discrete = gym.spaces.Dict({"a": gym.spaces.Discrete(4, start=1), "b": gym.spaces.MultiDiscrete([2, 3]),
                                "c": gym.spaces.MultiBinary(2)})
    layout = FlatActionLayout(discrete)
    assert layout.space == gym.spaces.MultiDiscrete([4, 2, 3, 2, 2]) and layout.mask_size == 13
    layout.space.seed(1)
    for _ in range(20):
        flat = layout.space.sample()
        action = layout.to_dict(flat)
        assert discrete.contains(action) and isinstance(action["a"], int)
        np.testing.assert_array_equal(layout.from_dict(action), flat)
    assert layout.to_dict(np.array([0, 1, 2, 1, 0]))["a"] == 1

    assert FlatActionLayout(gym.spaces.Dict({"x": gym.spaces.Discrete(5)})).space == gym.spaces.Discrete(5)

    boxes = gym.spaces.Dict({"force": gym.spaces.Box(-2, 2, (2,), np.float64), "torque": gym.spaces.Box(0, 1, (1,))})
    box_layout = FlatActionLayout(boxes)
    assert box_layout.space == gym.spaces.Box(np.array([-2, -2, 0], np.float32), np.array([2, 2, 1], np.float32))
    flat = np.array([0.5, -1.5, 0.25], np.float32)
    action = box_layout.to_dict(flat)
    assert action["force"].dtype == np.float64 and action["force"].tolist() == [0.5, -1.5]
    np.testing.assert_array_equal(box_layout.from_dict(action), flat)

    mixed = gym.spaces.Dict({"item": gym.spaces.Discrete(3), "amount": gym.spaces.Box(0, 1, (1,))})
    with pytest.raises(TypeError, match=r"\['item'\] are discrete and \['amount'\] are continuous.*"
                                        r"DiscretizeActionsWrapper"):
        FlatActionLayout(mixed)
    with pytest.raises(SpaceMismatchError, match=r"shape \(2,\), expected \(5,\)"):
        layout.to_dict(np.array([0, 1]))


def test_cutting2d_flat_spaces_and_checker() -> None:
    """The flat Cutting-2D env: a (103,) float32 Box and MultiDiscrete([2, 2, 50]) in the Dict's key order."""
    adapter = GymnasiumEnvAdapter(maze_env_factory(**SIMPLE_PROBLEM), flat=True)
    assert adapter.observation_space.shape == (103,) and adapter.observation_space.dtype == np.float32
    assert adapter.action_space == gym.spaces.MultiDiscrete([2, 2, 50])
    assert [f.name for f in adapter.action_layout.fields] == ["cut_order", "cut_rotation", "piece_idx"]
    assert adapter.observation_layout.field("ordered_piece").slice == slice(101, 103)
    _check(adapter)
    obs, _ = adapter.reset(seed=0)
    as_dict = adapter.observation_layout.unflatten(obs)
    assert as_dict["inventory"][0].tolist() == [4.0, 3.0] and as_dict["ordered_piece"].tolist() == [1.0, 2.0]


@pytest.mark.parametrize("make", [make_struct_env, make_masked_env])
def test_structured_env_as_one_flat_step_matches_the_flat_env(make: Any) -> None:
    """Piece selection and cutting as one flat step give the flat env's observations and rewards."""
    struct = GymnasiumEnvAdapter(make(**SIMPLE_PROBLEM), flat=True)
    flat = GymnasiumEnvAdapter(maze_env_factory(**SIMPLE_PROBLEM), flat=True)
    assert struct.action_space == gym.spaces.MultiDiscrete([50, 2, 2])  # sub-step 0's heads first
    _check(struct)
    obs_s, _ = struct.reset(seed=3)
    obs_f, _ = flat.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(40):
        action = {"piece_idx": int(rng.integers(3)), "cut_rotation": int(rng.integers(2)),
                  "cut_order": int(rng.integers(2))}
        for key in ("inventory", "inventory_size", "ordered_piece"):
            np.testing.assert_array_equal(struct.observation_layout.unflatten(obs_s)[key],
                                          flat.observation_layout.unflatten(obs_f)[key])
        obs_s, r_s, term_s, trunc_s, _ = struct.step(struct.action_layout.from_dict(action))
        obs_f, r_f, term_f, trunc_f, _ = flat.step(flat.action_layout.from_dict(action))
        assert (r_s, term_s, trunc_s) == (r_f, term_f, trunc_f)


class _TwoAgents(Wrapper):
    """Declares two agents under policy key 0 (as a multi-agent env would)."""

    @property
    def agent_counts_dict(self) -> dict[StepKey, int]:
        """Two agents."""
        return {0: 2}


def test_flat_step_needs_a_fixed_order_and_one_agent_per_key() -> None:
    adapter = GymnasiumEnvAdapter(make_struct_env(**SIMPLE_PROBLEM), flat=True, substep_order=[1, 0])
    with pytest.raises(RuntimeError, match=r"policy key 0 acts where 1 was expected.*substep_order.*flat=False"):
        adapter.reset(seed=0)
    with pytest.raises(ValueError, match=r"every policy key once.*\[0, 1\]"):
        GymnasiumEnvAdapter(make_struct_env(**SIMPLE_PROBLEM), flat=True, substep_order=[0])
    with pytest.raises(ValueError, match=r"one agent per policy key.*\{0: 2\}.*flat=False"):
        GymnasiumEnvAdapter(_TwoAgents(maze_env_factory(**SIMPLE_PROBLEM)), flat=True)


def test_dict_observations_with_flat_actions() -> None:
    """flatten_observation=False keeps Dict observations (e.g. images for SB3's MultiInputPolicy)."""
    adapter = GymnasiumEnvAdapter(GymMazeEnv(DictImageEnv()), flat=True, flatten_observation=False)
    assert isinstance(adapter.observation_space, gym.spaces.Dict) and adapter.action_space == gym.spaces.Discrete(4)
    assert adapter.observation_layout is None
    _check(adapter)
    flat_obs = GymnasiumEnvAdapter(GymMazeEnv(DictImageEnv()), flat=True)
    assert flat_obs.observation_space.shape == (12 * 16 * 3 + 3 + 4,)
    _check(flat_obs)


def test_continuous_actions_become_one_box() -> None:
    adapter = GymnasiumEnvAdapter(GymMazeEnv("Pendulum-v1"), flat=True)
    assert adapter.action_space == gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    _check(adapter)


# --- action masks -------------------------------------------------------------------------------------------
def test_action_masks_follow_the_mask_observations() -> None:
    """``<head>_mask`` is found by name; masks stay in the flat observation; an all-zero mask allows all."""
    adapter = GymnasiumEnvAdapter(make_shop(), flat=True)
    assert adapter.action_mask_keys == {"item": "item_mask"}
    obs, _ = adapter.reset(seed=0, options={"stock": [3, 1, 3]})
    assert adapter.action_masks().tolist() == [False, True, False, True, True, True]
    assert obs[adapter.observation_layout.field("item_mask").slice].tolist() == [0, 1, 0]
    adapter.reset(seed=0, options={"stock": [3, 3, 3]})
    assert adapter.action_masks().all()

    masked = GymnasiumEnvAdapter(make_masked_env(**SIMPLE_PROBLEM), flat=True,
                                 action_mask_keys={"piece_idx": "inventory_mask"})
    obs, _ = masked.reset(seed=0)
    inventory_mask = masked.observation_layout.unflatten(obs)["inventory_mask"]
    assert masked.action_masks().tolist() == (inventory_mask > 0).tolist() + [True] * 4
    with pytest.raises(ValueError, match=r"'cutting_mask'.*only in sub-step 1.*flat=False"):
        GymnasiumEnvAdapter(make_masked_env(**SIMPLE_PROBLEM), flat=True,
                            action_mask_keys={"cut_rotation": "cutting_mask"})
    with pytest.raises(ValueError, match=r"must have 2 entries"):
        GymnasiumEnvAdapter(make_masked_env(**SIMPLE_PROBLEM), flat=True,
                            action_mask_keys={"cut_order": "inventory_mask"})
    with pytest.raises(RuntimeError, match="flat discrete actions only"):
        GymnasiumEnvAdapter(make_shop()).action_masks()


# --- Stable-Baselines3 --------------------------------------------------------------------------------------
def test_sb3_ppo_trains_on_the_cutting2d_flat_env() -> None:
    """PPO trains on the flat adapter; its actions, mapped back to dicts, replay to the same rewards."""
    stable_baselines3 = pytest.importorskip("stable_baselines3")
    setting = dict(SIMPLE_PROBLEM, max_steps=40)
    env = GymnasiumEnvAdapter(maze_env_factory(**setting), flat=True)
    model = stable_baselines3.PPO("MlpPolicy", env, n_steps=128, batch_size=64, n_epochs=2, seed=0, device="cpu")
    model.learn(total_timesteps=256)
    assert model.num_timesteps == 256

    obs, _ = env.reset(seed=7)
    replay = maze_env_factory(**setting)
    replay.reset(seed=7)
    done, steps = False, 0
    while not done:
        action, _ = model.predict(obs, deterministic=True)
        assert env.action_space.contains(action)
        obs, reward, terminated, truncated, _ = env.step(action)
        _, replay_reward, *_ = replay.step(env.action_layout.to_dict(action))
        assert reward == replay_reward
        done, steps = terminated or truncated, steps + 1
    assert steps == 40


def test_sb3_ppo_beats_random_on_a_custom_dict_env() -> None:
    """A custom MazeEnv with Dict observations and Dict actions trains with SB3 PPO as it is."""
    stable_baselines3 = pytest.importorskip("stable_baselines3")
    env = GymnasiumEnvAdapter(make_shop(), flat=True)
    assert env.observation_space.shape == (3 + N_ITEMS + N_ITEMS,)  # demand one-hot, item_mask, stock
    assert env.action_space == gym.spaces.MultiDiscrete([N_ITEMS, 3])
    env.action_space.seed(0)
    random_return = _mean_return(env, lambda _: env.action_space.sample(), episodes=20)

    model = stable_baselines3.PPO("MlpPolicy", GymnasiumEnvAdapter(make_shop(), flat=True), n_steps=256,
                                  batch_size=64, learning_rate=3e-3, seed=0, device="cpu")
    model.learn(total_timesteps=3072)
    trained_return = _mean_return(env, lambda obs: model.predict(obs, deterministic=True)[0], episodes=20)
    assert trained_return > random_return + 8.0, (trained_return, random_return)


def test_maskable_ppo_takes_the_action_masks() -> None:
    """sb3-contrib's MaskablePPO (where installed) trains with ``action_masks()`` of the masked Cutting-2D env."""
    sb3_contrib = pytest.importorskip("sb3_contrib")
    env = GymnasiumEnvAdapter(make_masked_env(**dict(SIMPLE_PROBLEM, max_steps=40)), flat=True,
                              action_mask_keys={"piece_idx": "inventory_mask"})
    model = sb3_contrib.MaskablePPO("MlpPolicy", env, n_steps=128, batch_size=64, n_epochs=2, seed=0, device="cpu")
    model.learn(total_timesteps=256)
    obs, _ = env.reset(seed=1)
    for _ in range(20):
        masks = env.action_masks()
        action, _ = model.predict(obs, action_masks=masks)
        assert masks[int(action[0])]  # the chosen piece is one the order fits
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break


def test_the_example_script_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/sb3_route.py (installed as maze_lab.examples.sb3_route) trains and rolls out."""
    pytest.importorskip("stable_baselines3")
    from maze_lab.examples.sb3_route import main

    main(total_timesteps=64, n_steps=64)
    out = capsys.readouterr().out
    assert "observation: (103,) action: MultiDiscrete([ 2  2 50])" in out and "episode return:" in out
