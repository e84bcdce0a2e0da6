"""The task-specific Cutting-2D model: one shared network scores every inventory slot; masks are respected."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cutting2d_training import masked_env_factory
from omegaconf import OmegaConf

from maze_lab.examples.cutting2d import CONF_DIR
from maze_lab.examples.cutting2d.models import PieceSelectionNet
from maze_lab.perception.composers import build_model_composer


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
