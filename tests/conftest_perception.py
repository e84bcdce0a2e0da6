"""Spaces and model configs shared by the perception, distribution, model, policy and graph tests."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

torch.set_num_threads(1)

F32 = np.float32


def box(*shape: int, low: float = -np.inf, high: float = np.inf) -> gym.spaces.Box:
    """A float32 Box."""
    return gym.spaces.Box(low=low, high=high, shape=shape, dtype=F32)


def cartpole_spaces() -> tuple[dict, dict]:
    """CartPole as maze-lab wraps it: obs 'observation' (4,), action 'action' Discrete(2), policy key 0."""
    return ({0: gym.spaces.Dict({"observation": box(4)})}, {0: gym.spaces.Dict({"action": gym.spaces.Discrete(2)})})


def pendulum_spaces() -> tuple[dict, dict]:
    """Pendulum: obs (3,), a bounded Box(1,) action in [-2, 2]."""
    return ({0: gym.spaces.Dict({"observation": box(3, low=-8.0, high=8.0)})},
            {0: gym.spaces.Dict({"action": box(1, low=-2.0, high=2.0)})})


def image_vector_spaces(size: int = 16) -> tuple[dict, dict]:
    """An inventory vector and an RGB screen; a categorical move and a multi-binary use action."""
    obs = gym.spaces.Dict({"observation_inventory": box(16, low=0.0, high=1.0),
                           "observation_screen": box(3, size, size, low=0.0, high=1.0)})
    act = gym.spaces.Dict({"action_move": gym.spaces.Discrete(4), "action_use": gym.spaces.MultiBinary(16)})
    return {0: obs}, {0: act}


N_INVENTORY = 8


def cutting2d_masked_spaces(n: int = N_INVENTORY) -> tuple[dict, dict]:
    """The masked structured Cutting-2D spaces, built by hand (policy keys 'selection' and 'cutting')."""
    obs = {
        "selection": gym.spaces.Dict({"inventory": box(n, 2, low=0.0, high=100.0),
                                      "inventory_size": box(1, low=0.0, high=n),
                                      "ordered_piece": box(2, low=0.0, high=100.0),
                                      "inventory_mask": box(n, low=0.0, high=1.0)}),
        "cutting": gym.spaces.Dict({"ordered_piece": box(2, low=0.0, high=100.0),
                                    "selected_piece": box(2, low=0.0, high=100.0),
                                    "cutting_mask": box(2, low=0.0, high=1.0)}),
    }
    act = {
        "selection": gym.spaces.Dict({"piece_idx": gym.spaces.Discrete(n)}),
        "cutting": gym.spaces.Dict({"cut_rotation": gym.spaces.Discrete(2), "cut_order": gym.spaces.Discrete(2)}),
    }
    return obs, act


def real_cutting2d_env() -> Any | None:
    """The example env of maze_lab.examples.cutting2d, where it is installed (None otherwise)."""
    try:
        from maze_lab.examples.cutting2d import make_masked_env
    except Exception:  # noqa: BLE001 - the example is optional for these tests
        return None
    return make_masked_env(max_pieces_in_inventory=N_INVENTORY, raw_piece_size=(4, 3),
                           static_demand=[(1, 2), (2, 2), (1, 1)])


def dense(units: list[int], non_lin: str = "torch.nn.ReLU") -> dict:
    """A DenseBlock modality config."""
    return {"block_type": "maze_lab.perception.blocks.DenseBlock", "block_params": {"hidden_units": units,
                                                                                    "non_lin": non_lin}}


def builder_config(mapping: dict[str, str], hidden: dict | None = None, recurrence: dict | None = None,
                   **modalities: dict) -> dict:
    """A ConcatModelBuilder config with a 'feature' dense modality by default."""
    modality_config = {"feature": dense([32, 32]), **modalities, "hidden": hidden or {},
                       "recurrence": recurrence or {}}
    return {"_target_": "maze_lab.perception.builders.ConcatModelBuilder",
            "observation_modality_mapping": mapping, "modality_config": modality_config}


def cartpole_builder() -> dict:
    """The seed's single-observation CartPole template."""
    return builder_config({"observation": "feature"})


def image_vector_builder() -> dict:
    """Dense features, a VGG image modality and a dense hidden block."""
    return builder_config(
        {"observation_inventory": "feature", "observation_screen": "image"},
        hidden=dense([64]),
        image={"block_type": "VGGConvolutionDenseBlock",
               "block_params": {"hidden_channels": [4, 8], "hidden_units": [32], "non_lin": "torch.nn.ReLU"}},
    )


def cutting2d_builder() -> dict:
    """Template for the masked cutting env: masks are only used for masking."""
    return builder_config(
        {"inventory": "inventory", "inventory_size": "feature", "ordered_piece": "feature",
         "selected_piece": "feature", "inventory_mask": "mask", "cutting_mask": "mask"},
        hidden=dense([32]),
        inventory={"block_type": "FlattenDenseBlock",
                   "block_params": {"num_flatten_dims": 2, "hidden_units": [32], "non_lin": "torch.nn.ReLU"}},
    )


CUTTING_MASKS = {"piece_idx": "inventory_mask", "cut_rotation": "cutting_mask"}


def random_obs(space: gym.spaces.Dict, *batch: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A random observation tensor dict with the given leading batch dims."""
    rng = np.random.default_rng(seed)
    out = {}
    for key, sub in space.spaces.items():
        out[key] = torch.as_tensor(rng.uniform(0.0, 1.0, size=(*batch, *sub.shape)).astype(F32))
    return out
