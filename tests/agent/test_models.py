"""Template and custom model composers: networks for CartPole, Pendulum, image+vector and masked Cutting-2D."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest_perception import (
    CUTTING_MASKS,
    builder_config,
    cartpole_builder,
    cartpole_spaces,
    cutting2d_builder,
    cutting2d_masked_spaces,
    dense,
    image_vector_builder,
    image_vector_spaces,
    pendulum_spaces,
    random_obs,
    real_cutting2d_env,
)
from torch import nn

from maze_lab.agent import (
    TorchDeltaStateCritic,
    TorchSharedStateActionCritic,
    TorchSharedStateCritic,
    TorchStepStateActionCritic,
    TorchStepStateCritic,
)
from maze_lab.agent.composers import CustomModelComposer, TemplateModelComposer, build_model_composer
from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.distributions import BernoulliProbabilityDistribution, BetaProbabilityDistribution
from maze_lab.perception.blocks import ActionMaskingBlock, InferenceBlock, LSTMLastStepBlock
from maze_lab.perception.models.built_in import FlattenConcatPolicyNet, FlattenConcatStateValueNet

SHARED = {"_target_": "maze_lab.agent.composers.critics.SharedStateCriticComposer"}
STEP = {"_target_": "StepStateCriticComposer"}
POLICY = {"_target_": "maze_lab.agent.composers.policies.ProbabilisticPolicyComposer"}


def template(spaces: tuple[dict, dict], builder: dict, critic: dict | None = SHARED, **kw) -> TemplateModelComposer:
    obs, act = spaces
    return TemplateModelComposer(act, obs, distribution_mapper_config=kw.pop("distribution_mapper_config", []),
                                 model_builder=builder, policy=POLICY, critic=critic, **kw)


def test_cartpole_template_matches_seed_structure() -> None:
    comp = template(cartpole_spaces(), cartpole_builder())
    net = comp.policy.networks[0]
    assert isinstance(net, InferenceBlock)
    assert net.in_keys == ["observation"] and net.out_keys == ["action"]
    assert set(net.perception_dict) == {"observation_DenseBlock", "latent", "action"}
    assert net.tensor_shapes()["latent"] == (32,)
    n_params = sum(p.numel() for p in net.parameters())
    assert n_params == 4 * 32 + 32 + 32 * 32 + 32 + 32 * 2 + 2
    assert isinstance(comp.critic, TorchSharedStateCritic)
    for lead in [(), (5,), (2, 5), (2, 3, 5)]:
        obs = random_obs(cartpole_spaces()[0][0], *lead)
        out = comp.policy.compute_substep_policy_output(obs)
        assert out.action_logits["action"].shape == (*lead, 2)
        assert out.prob_dist.sample()["action"].shape == lead
        assert comp.critic.predict_values({0: obs})[0].shape == lead


def test_pendulum_template_uses_configured_distribution() -> None:
    comp = template(pendulum_spaces(), cartpole_builder(),
                    distribution_mapper_config=[{"action_space": "gym.spaces.Box", "distribution": "beta"}])
    assert comp.distribution_mapper.distribution_class("action") is BetaProbabilityDistribution
    assert comp.policy.networks[0].tensor_shapes()["action"] == (2,)
    obs = random_obs(pendulum_spaces()[0][0], 16)
    action = comp.policy.compute_action({k: v.numpy() for k, v in obs.items()})["action"]
    assert action.shape == (16, 1) and np.all(np.abs(action) <= 2.0)


def test_image_and_vector_template() -> None:
    spaces = image_vector_spaces()
    comp = template(spaces, image_vector_builder())
    net = comp.policy.networks[0]
    assert net.tensor_shapes()["concat"] == (64,)
    assert net.tensor_shapes()["latent"] == (64,)
    assert comp.distribution_mapper.distribution_class("action_use") is BernoulliProbabilityDistribution
    obs = random_obs(spaces[0][0], 2, 3)
    out = net(obs)
    assert out["action_move"].shape == (2, 3, 4) and out["action_use"].shape == (2, 3, 16)
    assert comp.critic.predict_values({0: obs})[0].shape == (2, 3)
    with pytest.raises(Exception, match="observation_screen"):
        net({**obs, "observation_screen": torch.rand(2, 3, 16, 16, 3)})


def test_recurrent_template_over_stacked_observations() -> None:
    obs = {0: gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (4, 6), np.float32)})}  # 4 stacked steps
    act = {0: gym.spaces.Dict({"action": gym.spaces.Discrete(3)})}
    recurrence = {"block_type": "maze.perception.blocks.LSTMLastStepBlock",
                  "block_params": {"hidden_size": 8, "num_layers": 1, "bidirectional": False,
                                   "non_lin": "torch.nn.SELU"}}
    comp = template((obs, act), builder_config({"observation": "feature"}, hidden=dense([16]),
                                               recurrence=recurrence))
    net = comp.policy.networks[0]
    assert isinstance(net.perception_dict["latent"], LSTMLastStepBlock)
    assert net.tensor_shapes()["hidden"] == (4, 16)
    assert net({"observation": torch.rand(7, 4, 6)})["action"].shape == (7, 3)


def _check_masks_respected(comp: TemplateModelComposer, obs_spaces: dict, keys: list) -> None:
    sel, cut = keys
    sel_obs = random_obs(obs_spaces[sel], 200, seed=1)
    sel_obs["inventory_mask"] = (torch.rand(200, sel_obs["inventory_mask"].shape[-1]) > 0.6).float()
    sel_obs["inventory_mask"][:, 0] = 1.0
    actions = comp.policy.compute_action(sel_obs, actor_id=sel)["piece_idx"]
    assert np.all(sel_obs["inventory_mask"].numpy()[np.arange(200), actions] == 1.0)
    cut_obs = random_obs(obs_spaces[cut], 200, seed=2)
    cut_obs["cutting_mask"] = torch.tensor([[0.0, 1.0]]).repeat(200, 1)
    out = comp.policy.compute_action(cut_obs, actor_id=cut)
    assert np.all(out["cut_rotation"] == 1) and set(np.unique(out["cut_order"])) <= {0, 1}


def test_cutting2d_masked_structured_template() -> None:
    obs_spaces, act_spaces = cutting2d_masked_spaces()
    comp = template((obs_spaces, act_spaces), cutting2d_builder(), critic=STEP, action_masks=CUTTING_MASKS)
    sel_net, cut_net = comp.policy.networks["selection"], comp.policy.networks["cutting"]
    assert isinstance(sel_net.perception_dict["piece_idx"], ActionMaskingBlock)
    assert isinstance(cut_net.perception_dict["cut_rotation"], ActionMaskingBlock)
    assert not isinstance(cut_net.perception_dict["cut_order"], ActionMaskingBlock)
    assert "inventory_mask" in sel_net.in_keys and "inventory_mask_DenseBlock" not in sel_net.perception_dict
    assert isinstance(comp.critic, TorchStepStateCritic) and set(comp.critic.networks) == {"selection", "cutting"}
    _check_masks_respected(comp, obs_spaces, ["selection", "cutting"])


def test_cutting2d_mask_by_naming_convention() -> None:
    obs_spaces, act_spaces = cutting2d_masked_spaces()
    obs_spaces["selection"] = gym.spaces.Dict({**obs_spaces["selection"].spaces,
                                               "piece_idx_mask": obs_spaces["selection"]["inventory_mask"]})
    builder = cutting2d_builder()
    builder["observation_modality_mapping"]["piece_idx_mask"] = "mask"
    comp = template((obs_spaces, act_spaces), builder, critic=None)
    assert comp.policy.networks["selection"].perception_dict["piece_idx"].in_keys == ["piece_idx_logits",
                                                                                      "piece_idx_mask"]
    assert comp.critic is None


def test_real_cutting2d_env_spaces() -> None:
    env = real_cutting2d_env()
    if env is None:
        pytest.skip("maze_lab.examples.cutting2d is not available")
    comp = TemplateModelComposer(env.action_spaces_dict, env.observation_spaces_dict, env.agent_counts_dict,
                                 model_builder=cutting2d_builder(), policy=POLICY, critic=STEP,
                                 action_masks=CUTTING_MASKS)
    keys = list(env.action_spaces_dict)
    _check_masks_respected(comp, env.observation_spaces_dict, keys)
    obs, _ = env.reset(seed=3)
    for _ in range(20):
        actor = env.actor_id()
        action = comp.policy.compute_action(obs, actor_id=actor)
        if "inventory_mask" in obs:
            assert obs["inventory_mask"][action["piece_idx"]] == 1.0
        if "cutting_mask" in obs:
            assert obs["cutting_mask"][action["cut_rotation"]] == 1.0
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset()


def test_shared_embedding_between_actor_and_critic() -> None:
    spaces = image_vector_spaces()
    comp = template(spaces, image_vector_builder(), critic=STEP, shared_embedding_keys=["latent"])
    policy_net, critic_net = comp.policy.networks[0], comp.critic.networks[0]
    assert "latent" in policy_net.out_keys
    assert critic_net.in_keys == ["latent"] and list(critic_net.perception_dict) == ["value"]
    obs = random_obs(spaces[0][0], 4)
    out = comp.policy.compute_substep_policy_output(obs, 0)
    assert set(out.action_logits) == {"action_move", "action_use"} and set(out.embedding_logits) == {"latent"}
    ac = comp.actor_critic().compute_actor_critic_output({0: obs})
    assert ac.values[0].shape == (4,)
    ac.values[0].sum().backward()
    assert policy_net.perception_dict["latent"].net[0].weight.grad is not None  # value loss reaches shared layers

    comp2 = template(spaces, image_vector_builder(), critic=STEP, shared_embedding_keys=["concat"])
    assert list(comp2.critic.networks[0].perception_dict) == ["latent", "value"]
    with pytest.raises(ConfigurationError, match="shared_embedding_keys \\['nope'\\].*available"):
        template(spaces, image_vector_builder(), critic=STEP, shared_embedding_keys=["nope"])


def test_structured_critics_from_template() -> None:
    obs_spaces, act_spaces = cutting2d_masked_spaces()
    stacked = template((obs_spaces, act_spaces), cutting2d_builder(),
                       critic={"_target_": "SharedStateCriticComposer", "stack_observations": True})
    assert isinstance(stacked.critic, TorchSharedStateCritic)
    merged = stacked.critic.networks[0].in_keys
    assert {"inventory", "selected_piece"} <= set(merged)
    obs = {k: random_obs(obs_spaces[k], 3) for k in obs_spaces}
    values = stacked.critic.predict_values(obs)
    torch.testing.assert_close(values["selection"], values["cutting"])

    delta = template((obs_spaces, act_spaces), cutting2d_builder(), critic={"_target_": "DeltaStateCriticComposer"})
    assert isinstance(delta.critic, TorchDeltaStateCritic)
    assert "prev_value" in delta.critic.networks["cutting"].in_keys
    values = delta.critic.predict_values(obs)
    assert values["cutting"].shape == (3,)

    with pytest.raises(ConfigurationError, match="stack_observations"):
        template((obs_spaces, act_spaces), cutting2d_builder(), critic=SHARED)


def test_state_action_critics_from_template() -> None:
    comp = template(pendulum_spaces(), cartpole_builder(), critic={"_target_": "SharedStateActionCriticComposer"})
    critic = comp.critic
    assert isinstance(critic, TorchSharedStateActionCritic) and critic.num_q_networks == 2
    obs = random_obs(pendulum_spaces()[0][0], 5)
    q = critic.predict_q_values({0: obs}, {0: {"action": torch.rand(5, 1)}})
    assert len(q[0]) == 2 and q[0][0].shape == (5,)
    critic.update_target_weights(tau=1.0)
    q_next = critic.predict_next_q_values({0: obs}, {0: {"action": torch.rand(5, 1)}})
    assert q_next[0][0].shape == (5,) and not q_next[0][0].requires_grad

    discrete = template(cartpole_spaces(), cartpole_builder(), critic={"_target_": "StepStateActionCriticComposer",
                                                                        "num_q_networks": 3})
    assert isinstance(discrete.critic, TorchStepStateActionCritic)
    obs = random_obs(cartpole_spaces()[0][0], 5)
    all_q = discrete.critic.predict_q_values({0: obs}, {0: {}}, gather_output=False)[0]
    assert len(all_q) == 3 and all_q[0]["action"].shape == (5, 2)
    taken = torch.tensor([0, 1, 1, 0, 1])
    gathered = discrete.critic.predict_q_values({0: obs}, {0: {"action": taken}})[0][0]["action"]
    torch.testing.assert_close(gathered, all_q[0]["action"][torch.arange(5), taken])


class PlainPolicyNet(nn.Module):
    """A plain torch policy network with the custom-network signature."""

    def __init__(self, obs_shapes: dict, action_logits_shapes: dict, hidden: int):
        super().__init__()
        self.obs_key, self.act_key = next(iter(obs_shapes)), next(iter(action_logits_shapes))
        self.net = nn.Sequential(nn.Linear(obs_shapes[self.obs_key][0], hidden), nn.Tanh(),
                                 nn.Linear(hidden, action_logits_shapes[self.act_key][0]))

    def forward(self, x: dict) -> dict:
        return {self.act_key: self.net(x[self.obs_key])}


class PlainValueNet(nn.Module):
    """A plain torch value network."""

    def __init__(self, obs_shapes: dict, hidden: int):
        super().__init__()
        self.obs_key = next(iter(obs_shapes))
        self.net = nn.Sequential(nn.Linear(obs_shapes[self.obs_key][0], hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, x: dict) -> dict:
        return {"value": self.net(x[self.obs_key])}


def test_custom_composer_with_built_in_and_plain_networks() -> None:
    obs, act = cartpole_spaces()
    comp = CustomModelComposer(
        act, obs, distribution_mapper_config=[],
        policy={"_target_": "maze.perception.models.policies.ProbabilisticPolicyComposer",
                "networks": [{"_target_": "maze.perception.models.built_in.flatten_concat.FlattenConcatPolicyNet",
                              "non_lin": "torch.nn.Tanh", "hidden_units": [16, 16]}],
                "substeps_with_separate_agent_nets": []},
        critic={"_target_": "maze.perception.models.critics.StateCriticComposer",
                "networks": [{"_target_": f"{__name__}.PlainValueNet", "hidden": 8}]})
    assert isinstance(comp.policy.networks[0], FlattenConcatPolicyNet)
    assert isinstance(comp.critic.networks[0], PlainValueNet)
    x = random_obs(obs[0], 6)
    assert comp.policy.compute_logits_dict(x)["action"].shape == (6, 2)
    assert comp.critic.predict_value(x, 0).shape == (6,)

    plain = CustomModelComposer(act, obs, policy={"_target_": "ProbabilisticPolicyComposer",
                                                  "networks": [{"_target_": PlainPolicyNet, "hidden": 8}]},
                                critic={"_target_": "StepStateCriticComposer",
                                        "networks": {0: {"_target_": FlattenConcatStateValueNet,
                                                         "hidden_units": [8]}}})
    assert plain.policy.compute_action({"observation": np.zeros(4, np.float32)})["action"] in (0, 1)


def test_custom_composer_structured_with_separate_agent_nets() -> None:
    obs_spaces, act_spaces = cutting2d_masked_spaces()
    comp = CustomModelComposer(
        act_spaces, obs_spaces, agent_counts_dict={"selection": 1, "cutting": 2},
        policy={"_target_": "ProbabilisticPolicyComposer",
                "networks": [{"_target_": "FlattenConcatMaskedPolicyNet", "hidden_units": [16],
                              "action_masks": CUTTING_MASKS}],
                "substeps_with_separate_agent_nets": ["cutting"]},
        critic={"_target_": "StepStateCriticComposer",
                "networks": [{"_target_": "FlattenConcatStateValueNet", "hidden_units": [16]}]})
    assert set(comp.policy.networks) == {"selection", ("cutting", 0), ("cutting", 1)}
    assert comp.policy.network_for(("cutting", 1)) is comp.policy.networks[("cutting", 1)]
    assert comp.policy.network_for(("cutting", 0)) is not comp.policy.network_for(("cutting", 1))
    out = comp.policy.compute_action(random_obs(obs_spaces["cutting"], 4), actor_id=("cutting", 1))
    assert set(out) == {"cut_rotation", "cut_order"} and out["cut_order"].shape == (4,)
    with pytest.raises(KeyError, match=r"no policy network for ActorID\(step_key='cutting', agent_id=2\)"):
        comp.policy.compute_action(random_obs(obs_spaces["cutting"], 4), actor_id=("cutting", 2))


@pytest.mark.filterwarnings("ignore:ConcatModelBuilder")
def test_composer_config_errors() -> None:
    obs, act = cartpole_spaces()
    with pytest.raises(ConfigurationError, match="unknown modality 'vector'.*feature"):
        template((obs, act), builder_config({"observation": "vector"}))
    with pytest.raises(ConfigurationError, match="unknown perception block 'Dense'"):
        template((obs, act), builder_config({"observation": "feature"},
                                            feature={"block_type": "Dense", "block_params": {}}))
    with pytest.raises(ConfigurationError, match="remove 'networks'"):
        TemplateModelComposer(act, obs, model_builder=cartpole_builder(),
                              policy={**POLICY, "networks": []}, critic=None)
    with pytest.raises(ConfigurationError, match="critic.*built-in choices:.*StepStateCriticComposer"):
        template((obs, act), cartpole_builder(), critic={"_target_": "no.such.Critic"})
    with pytest.raises(ConfigurationError, match="2 networks for 1 keys"):
        CustomModelComposer(act, obs, policy={"_target_": "ProbabilisticPolicyComposer",
                                              "networks": [PlainPolicyNet, PlainPolicyNet]})
    with pytest.raises(ValueError, match="same policy keys"):
        TemplateModelComposer({1: act[0]}, obs, model_builder=cartpole_builder())
    obs_spaces, act_spaces = cutting2d_masked_spaces()
    with pytest.raises(ConfigurationError, match="mask 'cutting_mask' for action 'piece_idx' is not an observation"):
        template((obs_spaces, act_spaces), cutting2d_builder(), critic=None, action_masks={"piece_idx": "cutting_mask"})
    with pytest.raises(ConfigurationError, match=r"mask 'inventory_mask' has shape \(8,\).*'cut_rotation'.*\(2,\)"):
        bad = {"selection": obs_spaces["selection"],
               "cutting": gym.spaces.Dict({**obs_spaces["cutting"].spaces,
                                           "inventory_mask": obs_spaces["selection"]["inventory_mask"]})}
        template((bad, act_spaces), cutting2d_builder(), critic=None, action_masks={"cut_rotation": "inventory_mask"})
    with pytest.raises(ConfigurationError, match=r"action_masks: \['piece_id'\] are not action heads.*piece_idx"):
        template((obs_spaces, act_spaces), cutting2d_builder(), critic=None, action_masks={"piece_id": "x"})
    obs_spaces["selection"] = gym.spaces.Dict({**obs_spaces["selection"].spaces,
                                               "piece_idx_mask": gym.spaces.Box(0, 1, (3,), np.float32)})
    # a mask matched by name only is not applied when its shape differs from the logits: a warning names it
    with pytest.warns(UserWarning, match=r"'piece_idx_mask'.*not applied.*shape \(3,\).*'piece_idx'.*\(8,\)"):
        comp = template((obs_spaces, act_spaces), cutting2d_builder(), critic=None)
    assert not isinstance(comp.policy.networks["selection"].perception_dict["piece_idx"], ActionMaskingBlock)
    with pytest.warns(UserWarning, match=r"'piece_idx_mask'.*not applied.*already masked by 'inventory_mask'"):
        comp = template((obs_spaces, act_spaces), cutting2d_builder(), critic=None, action_masks=CUTTING_MASKS)
    assert comp.policy.networks["selection"].perception_dict["piece_idx"].in_keys == ["piece_idx_logits",
                                                                                      "inventory_mask"]


def test_build_model_composer_from_config() -> None:
    obs, act = cartpole_spaces()
    config = {"_target_": "maze.perception.models.template_model_composer.TemplateModelComposer",
              "distribution_mapper_config": [], "model_builder": {**cartpole_builder(), "shared_embedding_keys": None},
              "policy": POLICY, "critic": SHARED}
    comp = build_model_composer(config, act, obs)
    assert isinstance(comp, TemplateModelComposer) and isinstance(comp.critic, TorchSharedStateCritic)
    assert build_model_composer(comp, act, obs) is comp


def test_build_model_composer_from_the_cutting2d_example_configs() -> None:
    env = real_cutting2d_env()
    if env is None:
        pytest.skip("maze_lab.examples.cutting2d is not available")
    yaml = pytest.importorskip("yaml")
    from maze_lab.examples.cutting2d import CONF_DIR

    config = yaml.safe_load((CONF_DIR / "model" / "cutting2d_struct_masked.yaml").read_text())
    comp = build_model_composer(config, env.action_spaces_dict, env.observation_spaces_dict, env.agent_counts_dict)
    _check_masks_respected(comp, env.observation_spaces_dict, list(env.action_spaces_dict))
