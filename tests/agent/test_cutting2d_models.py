"""The Cutting-2D models: the engineered slot model and the Maze-like model (raw inputs, learned comparison) score
every inventory slot alike and respect the masks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cutting2d_training import masked_env_factory
from omegaconf import OmegaConf

from maze_lab.agent.composers import build_model_composer
from maze_lab.examples.cutting2d import CONF_DIR
from maze_lab.examples.cutting2d.models import (
    MazeLikeCuttingNet,
    MazeLikeSelectionNet,
    MazeLikeValueNet,
    PieceSelectionNet,
)


def test_slot_model_acts_within_the_masks():
    torch.manual_seed(0)
    env = masked_env_factory()
    cfg = OmegaConf.to_container(OmegaConf.load(f"{CONF_DIR}/model/cutting2d_struct_masked_slots.yaml"))
    policy = build_model_composer(cfg, env.action_spaces_dict, env.observation_spaces_dict,
                                  env.agent_counts_dict).policy
    obs, _ = env.reset(seed=0)
    for _ in range(40):
        key = env.actor_id().step_key
        action = policy.compute_action(obs, actor_id=key)
        if key == 0:
            assert obs["inventory_mask"][action["piece_idx"]] == 1
        else:
            assert obs["cutting_mask"][action["cut_rotation"]] == 1
        obs, *_ = env.step(action)


def test_slot_scores_do_not_depend_on_the_slot_position():
    net = PieceSelectionNet({"inventory": (4, 2), "ordered_piece": (2,), "inventory_mask": (4,)},
                            {"piece_idx": (4,)})
    inv = torch.tensor([[3.0, 4.0], [1.0, 2.0], [2.0, 2.0], [0.0, 0.0]])
    obs = {"inventory": inv, "ordered_piece": torch.tensor([1.0, 2.0]), "inventory_mask": torch.tensor([1.0, 1, 1, 0])}
    logits = net(obs)["piece_idx"]
    swapped = net({**obs, "inventory": inv[[1, 0, 2, 3]]})["piece_idx"]
    assert torch.allclose(logits[[1, 0, 2]], swapped[:3])
    assert logits[3] < -1e8  # masked slot
    with pytest.raises(ValueError, match=r"piece_idx logits \(5,\) must match the inventory slots \(4,\)"):
        PieceSelectionNet({"inventory": (4, 2)}, {"piece_idx": (5,)})
    assert np.isfinite(logits[:3].detach().numpy()).all()


# ---- the Maze-like model: raw inputs, dot-product slot scores ------------------------------------------------

_SEL_SHAPES = {"inventory": (4, 2), "inventory_size": (1,), "ordered_piece": (2,), "inventory_mask": (4,)}


def _selection_obs() -> dict[str, torch.Tensor]:
    return {"inventory": torch.tensor([[3.0, 4.0], [1.0, 2.0], [2.0, 2.0], [0.0, 0.0]]),
            "inventory_size": torch.tensor([3.0]), "ordered_piece": torch.tensor([1.0, 2.0]),
            "inventory_mask": torch.tensor([1.0, 1, 1, 0])}


@pytest.mark.parametrize("comparison", ["dot", "mlp"])
def test_maze_like_selection_scores_slots_alike_and_masks(comparison):
    torch.manual_seed(0)
    net = MazeLikeSelectionNet(_SEL_SHAPES, {"piece_idx": (4,)}, comparison=comparison)
    obs = _selection_obs()
    logits = net(obs)["piece_idx"]
    swapped = net({**obs, "inventory": obs["inventory"][[1, 0, 2, 3]]})["piece_idx"]
    assert torch.allclose(logits[[1, 0, 2]], swapped[:3])
    assert logits[3] < -1e8  # masked slot
    # small output layers: the untrained policy is close to uniform over the allowed slots
    assert logits[:3].abs().max() < 0.05
    # a batch of observations gives the logits of each
    batch = {k: torch.stack([v, v]) for k, v in obs.items()}
    assert torch.allclose(net(batch)["piece_idx"], torch.stack([logits, logits]))


def test_maze_like_selection_sees_only_raw_rows_order_and_mask():
    torch.manual_seed(0)
    net = MazeLikeSelectionNet(_SEL_SHAPES, {"piece_idx": (4,)})
    obs = _selection_obs()
    logits = net(obs)["piece_idx"]
    # inventory_size is not an input
    assert torch.equal(net({**obs, "inventory_size": torch.tensor([7.0])})["piece_idx"], logits)
    # the network reads the raw sizes: a slot's logit depends on (w, h) themselves, not on the area alone
    same_area = net({**obs, "inventory": torch.tensor([[3.0, 4.0], [2.0, 1.0], [2.0, 2.0], [0.0, 0.0]])})
    assert not torch.equal(same_area["piece_idx"][1], logits[1])
    with pytest.raises(ValueError, match=r"piece_idx logits \(5,\) must match the inventory slots \(4,\)"):
        MazeLikeSelectionNet(_SEL_SHAPES, {"piece_idx": (5,)})
    with pytest.raises(ValueError, match="comparison must be 'dot' or 'mlp', got 'cosine'"):
        MazeLikeSelectionNet(_SEL_SHAPES, {"piece_idx": (4,)}, comparison="cosine")


def test_maze_like_cutting_net_masks_rotation():
    torch.manual_seed(0)
    shapes = {"selected_piece": (2,), "ordered_piece": (2,), "cutting_mask": (2,)}
    net = MazeLikeCuttingNet(shapes, {"cut_rotation": (2,), "cut_order": (2,)})
    out = net({"selected_piece": torch.tensor([[2.0, 1.0]]), "ordered_piece": torch.tensor([[1.0, 2.0]]),
               "cutting_mask": torch.tensor([[0.0, 1.0]])})
    assert out["cut_rotation"].shape == out["cut_order"].shape == (1, 2)
    assert out["cut_rotation"][0, 0] < -1e8 and out["cut_rotation"][0, 1].abs() < 0.05


def test_maze_like_value_net_for_both_sub_steps():
    torch.manual_seed(0)
    sel = MazeLikeValueNet(_SEL_SHAPES)
    obs = {k: torch.stack([v, v, v]) for k, v in _selection_obs().items()}
    assert sel(obs)["value"].shape == (3, 1)
    cut = MazeLikeValueNet({"selected_piece": (2,), "ordered_piece": (2,), "cutting_mask": (2,)})
    assert cut({"selected_piece": torch.ones(5, 2), "ordered_piece": torch.ones(5, 2),
                "cutting_mask": torch.ones(5, 2)})["value"].shape == (5, 1)
    with pytest.raises(ValueError, match="MazeLikeValueNet needs one of"):
        MazeLikeValueNet({"cutting_mask": (2,)})
    with pytest.raises(ValueError, match="inventory_pooling must be 'flatten' or 'sum', got 'max'"):
        MazeLikeValueNet(_SEL_SHAPES, inventory_pooling="max")


def test_summed_inventory_value_does_not_depend_on_the_slot_order():
    torch.manual_seed(0)
    obs = _selection_obs()
    shuffled = {**obs, "inventory": obs["inventory"][[2, 0, 1, 3]]}
    summed = MazeLikeValueNet(_SEL_SHAPES, inventory_pooling="sum")
    assert torch.allclose(summed(obs)["value"], summed(shuffled)["value"])
    assert summed({k: torch.stack([v, v]) for k, v in obs.items()})["value"].shape == (2, 1)
    flat = MazeLikeValueNet(_SEL_SHAPES, inventory_pooling="flatten")
    assert not torch.allclose(flat(obs)["value"], flat(shuffled)["value"])


def test_maze_like_config_builds_and_acts_within_the_masks():
    torch.manual_seed(0)
    env = masked_env_factory()
    cfg = OmegaConf.to_container(OmegaConf.load(f"{CONF_DIR}/model/cutting2d_struct_masked_maze.yaml"))
    composer = build_model_composer(cfg, env.action_spaces_dict, env.observation_spaces_dict, env.agent_counts_dict)
    policy, critic = composer.policy, composer.critic
    assert isinstance(policy.networks[0], MazeLikeSelectionNet)
    assert isinstance(policy.networks[1], MazeLikeCuttingNet)
    obs, _ = env.reset(seed=0)
    for _ in range(40):
        key = env.actor_id().step_key
        action = policy.compute_action(obs, actor_id=key)
        if key == 0:
            assert obs["inventory_mask"][action["piece_idx"]] == 1
        else:
            assert obs["cutting_mask"][action["cut_rotation"]] == 1
        values = critic.predict_values({key: {k: torch.as_tensor(v)[None] for k, v in obs.items()}})
        assert values[key].numel() == 1
        obs, *_ = env.step(action)
