"""The structured Cutting-2D envs: piece selection (policy key 0), then cutting configuration (policy key 1).

The masked variant adds ``inventory_mask`` to the selection observation and ``cutting_mask`` (indexed by
``cut_rotation``) to the cutting observation, so that a policy can rule out invalid choices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from maze_lab.core.env.interfaces import RewardAggregatorInterface
from maze_lab.core.env.space_checks import dict_action_checker
from maze_lab.core.env.structured_env import ActorID, StepKey
from maze_lab.core.wrappers.wrapper import Wrapper

from .maze_env import maze_env_factory
from .maze_state import Cutting2DMazeAction, Cutting2DMazeState

SELECTION_KEY = 0
CUTTING_KEY = 1


class StructuredCutting2DEnvironment(Wrapper):
    """Splits each flat step into two sub-steps with their own spaces.

    - Policy key 0 (piece selection): observes the flat observation (``inventory``, ``inventory_size``,
      ``ordered_piece``) and acts with ``{"piece_idx"}``; the reward of this sub-step is 0.
    - Policy key 1 (cutting): observes ``selected_piece`` and ``ordered_piece`` and acts with
      ``{"cut_rotation", "cut_order"}``; only now the flat env steps and its reward is returned.

    Events of both sub-steps belong to the same flat step (the flat env steps once per cycle).

    :param env: the flat Cutting-2D env (a :class:`Cutting2DEnvironment`, possibly wrapped).
    """

    def __init__(self, env: Any):
        super().__init__(env)
        flat_obs: gym.spaces.Dict = env.observation_spaces_dict[0]
        flat_act: gym.spaces.Dict = env.action_spaces_dict[0]
        self.max_pieces_in_inventory = int(flat_act["piece_idx"].n)
        self._action_spaces: dict[StepKey, gym.spaces.Dict] = {
            SELECTION_KEY: gym.spaces.Dict({"piece_idx": flat_act["piece_idx"]}),
            CUTTING_KEY: gym.spaces.Dict({"cut_rotation": flat_act["cut_rotation"],
                                          "cut_order": flat_act["cut_order"]}),
        }
        self._observation_spaces: dict[StepKey, gym.spaces.Dict] = {
            SELECTION_KEY: gym.spaces.Dict(dict(flat_obs.spaces)),
            CUTTING_KEY: gym.spaces.Dict({"selected_piece": flat_obs["ordered_piece"],
                                          "ordered_piece": flat_obs["ordered_piece"]}),
        }
        self._checks = {k: dict_action_checker(s, f"{type(self).__name__} policy key {k!r}")
                        for k, s in self._action_spaces.items()}
        self._sub_step: int = SELECTION_KEY
        self._flat_obs: dict[str, np.ndarray] | None = None
        self._piece_idx = 0
        self._actor_rewards: np.ndarray | None = None

    # --- spaces and actors ----------------------------------------------------------------------------
    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Observation space per sub-step key."""
        return self._observation_spaces

    @property
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """Action space per sub-step key."""
        return self._action_spaces

    def actor_id(self) -> ActorID:
        """``(0, 0)`` before piece selection, ``(1, 0)`` before the cutting configuration."""
        return ActorID(self._sub_step, 0)

    @property
    def agent_counts_dict(self) -> dict[StepKey, int]:
        """One agent in each of the two sub-steps."""
        return {SELECTION_KEY: 1, CUTTING_KEY: 1}

    def is_actor_done(self) -> bool:
        """Actors are never retired."""
        return False

    def get_actor_rewards(self) -> np.ndarray | None:
        """After the cutting sub-step: the flat step's reward split evenly between the two actors; else None."""
        return self._actor_rewards

    # --- stepping -----------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Reset the flat env; the piece selection acts first."""
        obs, info = self.env.reset(seed=seed, options=options)
        self._flat_obs = obs
        self._sub_step = SELECTION_KEY
        self._actor_rewards = None
        return self._selection_obs(obs), info

    def step(self, action: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        """Piece selection (remembered, reward 0) or cutting configuration (steps the flat env)."""
        if self._flat_obs is None:
            raise RuntimeError(f"{type(self).__name__}.step() was called before reset(); call env.reset() first")
        self._checks[self._sub_step](action)
        if self._sub_step == SELECTION_KEY:
            self._piece_idx = int(action["piece_idx"])
            self._sub_step = CUTTING_KEY
            self._actor_rewards = None
            return self._cutting_obs(self._flat_obs, self._piece_idx), 0.0, False, False, {}
        flat_action = {"piece_idx": self._piece_idx, "cut_rotation": action["cut_rotation"],
                       "cut_order": action["cut_order"]}
        obs, reward, terminated, truncated, info = self.env.step(flat_action)
        self._flat_obs = obs
        self._sub_step = SELECTION_KEY
        self._actor_rewards = np.array([reward / 2.0, reward / 2.0], dtype=np.float64)
        return self._selection_obs(obs), reward, terminated, truncated, info

    # --- observations -------------------------------------------------------------------------------
    def _selection_obs(self, flat_obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Observation of the piece selection sub-step (the flat observation itself)."""
        return flat_obs

    def _cutting_obs(self, flat_obs: dict[str, np.ndarray], piece_idx: int) -> dict[str, np.ndarray]:
        """Observation of the cutting sub-step: the selected inventory row (zeros for an empty slot)."""
        return {"selected_piece": flat_obs["inventory"][piece_idx].copy(),
                "ordered_piece": flat_obs["ordered_piece"].copy()}

    def get_observation_and_action_dicts(self, maze_state: Cutting2DMazeState, maze_action: Cutting2DMazeAction,
                                         first_step_in_episode: bool = False
                                         ) -> tuple[dict[StepKey, dict], dict[StepKey, dict]]:
        """Per sub-step observations and actions of a recorded flat state and action (for imitation learning)."""
        if maze_state is None or maze_action is None:
            raise ValueError("both the MazeState and the MazeAction are needed to split a step into sub-steps")
        inner = self.unwrapped
        flat_obs = inner.observation_conversion_dict[0].maze_to_space(maze_state)
        flat_act = inner.action_conversion_dict[0].maze_to_space(maze_action)
        obs = {SELECTION_KEY: self._selection_obs(flat_obs),
               CUTTING_KEY: self._cutting_obs(flat_obs, min(flat_act["piece_idx"], self.max_pieces_in_inventory - 1))}
        act = {SELECTION_KEY: {"piece_idx": flat_act["piece_idx"]},
               CUTTING_KEY: {"cut_rotation": flat_act["cut_rotation"], "cut_order": flat_act["cut_order"]}}
        return obs, act


def inventory_fit_mask(inventory: np.ndarray, ordered_piece: np.ndarray) -> np.ndarray:
    """1.0 for every inventory row that holds a piece the order fits into (in either orientation), else 0.0."""
    a, b = float(ordered_piece[0]), float(ordered_piece[1])
    o_short, o_long = (a, b) if a <= b else (b, a)
    x, y = inventory[:, 0], inventory[:, 1]
    fits = (np.minimum(x, y) >= o_short) & (np.maximum(x, y) >= o_long)
    if o_short <= 0:  # a degenerate order would "fit" the zero padding of empty slots
        fits &= x > 0
    return fits.astype(np.float32)


def cutting_fit_mask(selected_piece: np.ndarray, ordered_piece: np.ndarray) -> np.ndarray:
    """``[fits as ordered, fits rotated]`` as float32, indexed by the ``cut_rotation`` action."""
    px, py = float(selected_piece[0]), float(selected_piece[1])
    ox, oy = float(ordered_piece[0]), float(ordered_piece[1])
    return np.array([ox <= px and oy <= py and px > 0, oy <= px and ox <= py and px > 0], dtype=np.float32)


class MaskedStructuredCutting2DEnvironment(StructuredCutting2DEnvironment):
    """The structured env with step-conditional action masks.

    - ``inventory_mask`` (max,) in the selection observation: 1 where the slot holds a piece the order fits.
    - ``cutting_mask`` (2,) in the cutting observation: entry ``r`` is 1 where ``cut_rotation=r`` fits the
      selected piece (both 0 after an invalid selection).
    """

    def __init__(self, env: Any):
        super().__init__(env)
        unit = {"low": np.float32(0), "high": np.float32(1), "dtype": np.float32}
        sel = dict(self._observation_spaces[SELECTION_KEY].spaces)
        sel["inventory_mask"] = gym.spaces.Box(shape=(self.max_pieces_in_inventory,), **unit)
        cut = dict(self._observation_spaces[CUTTING_KEY].spaces)
        cut["cutting_mask"] = gym.spaces.Box(shape=(2,), **unit)
        self._observation_spaces = {SELECTION_KEY: gym.spaces.Dict(sel), CUTTING_KEY: gym.spaces.Dict(cut)}

    def _selection_obs(self, flat_obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The flat observation plus ``inventory_mask``."""
        obs = dict(flat_obs)
        obs["inventory_mask"] = inventory_fit_mask(flat_obs["inventory"], flat_obs["ordered_piece"])
        return obs

    def _cutting_obs(self, flat_obs: dict[str, np.ndarray], piece_idx: int) -> dict[str, np.ndarray]:
        """Selected and ordered piece plus ``cutting_mask``."""
        selected = flat_obs["inventory"][piece_idx].copy()
        ordered = flat_obs["ordered_piece"].copy()
        return {"selected_piece": selected, "ordered_piece": ordered,
                "cutting_mask": cutting_fit_mask(selected, ordered)}


def make_struct_env(max_pieces_in_inventory: int = 200, raw_piece_size: Sequence[int] = (100, 100),
                    static_demand: Any = (30, 15), reward_aggregator: RewardAggregatorInterface | Mapping | None = None,
                    max_steps: int | None = None, random_demand: bool = False,
                    check_spaces: bool = True) -> StructuredCutting2DEnvironment:
    """Build the structured env (arguments as for :func:`maze_env_factory`)."""
    return StructuredCutting2DEnvironment(maze_env_factory(
        max_pieces_in_inventory=max_pieces_in_inventory, raw_piece_size=raw_piece_size, static_demand=static_demand,
        reward_aggregator=reward_aggregator, max_steps=max_steps, random_demand=random_demand,
        check_spaces=check_spaces))


def make_masked_env(max_pieces_in_inventory: int = 200, raw_piece_size: Sequence[int] = (100, 100),
                    static_demand: Any = (30, 15), reward_aggregator: RewardAggregatorInterface | Mapping | None = None,
                    max_steps: int | None = None, random_demand: bool = False,
                    check_spaces: bool = True) -> MaskedStructuredCutting2DEnvironment:
    """Build the masked structured env (arguments as for :func:`maze_env_factory`)."""
    return MaskedStructuredCutting2DEnvironment(maze_env_factory(
        max_pieces_in_inventory=max_pieces_in_inventory, raw_piece_size=raw_piece_size, static_demand=static_demand,
        reward_aggregator=reward_aggregator, max_steps=max_steps, random_demand=random_demand,
        check_spaces=check_spaces))
