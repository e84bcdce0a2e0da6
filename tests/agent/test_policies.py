"""Policies (torch, random, heuristic), critics and the actor-critic: acting, batched training methods, weights."""

from __future__ import annotations

import io

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest_perception import (
    CUTTING_MASKS,
    cartpole_builder,
    cartpole_spaces,
    cutting2d_builder,
    cutting2d_masked_spaces,
    pendulum_spaces,
    random_obs,
)

from maze_lab.agent import (
    DummyCartPolePolicy,
    HeuristicPolicy,
    Policy,
    RandomPolicy,
    TorchActorCritic,
    TorchDeltaStateCritic,
    TorchPolicy,
    TorchSharedStateCritic,
    TorchStepStateCritic,
)
from maze_lab.agent.composers import TemplateModelComposer
from maze_lab.core.env.structured_env import ActorID
from maze_lab.distributions import DistributionMapper
from maze_lab.perception.blocks import DenseBlock, InferenceBlock, LinearOutputBlock, TorchModelBlock
from maze_lab.perception.models.built_in import FlattenConcatPolicyNet, FlattenConcatStateValueNet


def cartpole_model(critic: str = "SharedStateCriticComposer") -> TemplateModelComposer:
    obs, act = cartpole_spaces()
    return TemplateModelComposer(act, obs, model_builder=cartpole_builder(),
                                 policy={"_target_": "ProbabilisticPolicyComposer"}, critic={"_target_": critic})


def cutting_model(critic: str = "StepStateCriticComposer") -> TemplateModelComposer:
    obs, act = cutting2d_masked_spaces()
    return TemplateModelComposer(act, obs, model_builder=cutting2d_builder(),
                                 policy={"_target_": "ProbabilisticPolicyComposer"}, critic={"_target_": critic},
                                 action_masks=CUTTING_MASKS)


def test_compute_action_single_and_batched() -> None:
    policy = cartpole_model().policy
    obs_space = cartpole_spaces()[0][0]
    single = policy.compute_action({"observation": np.zeros(4, np.float32)})
    assert set(single) == {"action"} and gym.spaces.Discrete(2).contains(single["action"])
    assert policy.compute_action({"observation": np.zeros(4, np.float64)}, actor_id=ActorID(0, 0))["action"] in (0, 1)
    batch = policy.compute_action({k: v.numpy() for k, v in random_obs(obs_space, 64).items()}, actor_id=0)
    assert batch["action"].shape == (64,) and batch["action"].dtype == np.int64
    nested = policy.compute_action(random_obs(obs_space, 2, 8))
    assert nested["action"].shape == (2, 8)


def test_deterministic_action_is_argmax() -> None:
    policy = cartpole_model().policy
    obs = random_obs(cartpole_spaces()[0][0], 32)
    logits = policy.compute_logits_dict(obs)["action"]
    assert np.array_equal(policy.compute_action(obs, deterministic=True)["action"], logits.argmax(-1).numpy())


def test_batched_training_methods() -> None:
    policy = cutting_model().policy
    obs_spaces, _ = cutting2d_masked_spaces()
    obs = random_obs(obs_spaces["cutting"], 10)
    logits = policy.compute_logits_dict(obs, "cutting")
    assert set(logits) == {"cut_rotation", "cut_order"} and logits["cut_order"].requires_grad
    dist = policy.logits_dict_to_distribution(logits, temperature=0.5)
    actions = dist.sample()
    log_prob, entropy = policy.compute_log_probs_and_entropy(obs, actions, "cutting", temperature=0.5)
    assert log_prob.shape == (10,) and entropy.shape == (10,)
    torch.testing.assert_close(log_prob, dist.joint_log_prob(actions))
    out = policy.compute_substep_policy_output(obs, ActorID("cutting", 0))
    assert out.actor_id == ActorID("cutting", 0) and out.embedding_logits is None
    (-out.log_prob(actions).mean() - out.entropy.mean()).backward()
    assert all(p.grad is not None for p in policy.networks["cutting"].parameters() if p.requires_grad)
    with pytest.raises(ValueError, match="actor_id is required.*'selection', 'cutting'"):
        policy.compute_logits_dict(obs)
    with pytest.raises(KeyError, match="unknown policy key 'cuting'; valid keys"):
        policy.compute_logits_dict(obs, "cuting")


def test_top_action_candidates() -> None:
    policy = cutting_model().policy
    obs = {k: v.numpy() for k, v in random_obs(cutting2d_masked_spaces()[0]["cutting"]).items()}
    obs["cutting_mask"] = np.array([1.0, 0.0], np.float32)
    candidates, probs = policy.compute_top_action_candidates(obs, 3, actor_id="cutting")
    assert len(candidates) == 2  # the masked rotation leaves two joint actions with non-zero probability
    assert probs == sorted(probs, reverse=True) and abs(sum(probs) - 1.0) < 1e-5
    assert all(c["cut_rotation"] == 0 for c in candidates)
    cand, p = policy.compute_top_action_candidates(obs, None, actor_id="cutting")
    assert len(cand) == 2 and min(p) > 0.0


def test_random_and_heuristic_policies() -> None:
    _, act = cutting2d_masked_spaces()
    random_policy = RandomPolicy(act, seed=3)
    a = random_policy.compute_action({}, actor_id="selection")
    assert act["selection"].contains(a)
    again = RandomPolicy(act, seed=3).compute_action({}, actor_id="selection")
    assert a == again
    with pytest.raises(ValueError, match="actor_id is required"):
        random_policy.compute_action({})
    heuristic = DummyCartPolePolicy()
    assert isinstance(heuristic, HeuristicPolicy) and isinstance(heuristic, Policy)
    assert heuristic.compute_action({"observation": np.array([0, 0, 0.1, 0.0])})["action"] == 1
    assert heuristic.compute_action({"observation": np.array([0, 0, -0.1, 0.0])})["action"] == 0
    cands, scores = heuristic.compute_top_action_candidates({"observation": np.array([0, 0, 0.1, 0])}, 3)
    assert cands == [{"action": 1}] and scores == [1.0]
    assert not heuristic.needs_state() and not random_policy.needs_env()


def test_state_dict_roundtrip_through_torch_save() -> None:
    model = cutting_model().actor_critic()
    state = model.state_dict()
    assert set(state) == {"policy_selection", "policy_cutting", "critic_selection", "critic_cutting"}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    other = cutting_model().actor_critic()
    obs = random_obs(cutting2d_masked_spaces()[0]["selection"], 5)
    before = other.policy.compute_logits_dict(obs, "selection")["piece_idx"]
    other.load_state_dict(loaded)
    after = other.policy.compute_logits_dict(obs, "selection")["piece_idx"]
    expected = model.policy.compute_logits_dict(obs, "selection")["piece_idx"]
    torch.testing.assert_close(after, expected)
    assert not torch.allclose(before, after)
    with pytest.raises(KeyError, match="no weights for \\['critic_cutting'\\]"):
        other.load_state_dict({k: v for k, v in loaded.items() if k != "critic_cutting"})
    other.policy.load_state_dict(loaded)  # extra critic entries are ignored by the policy


def test_train_eval_and_device() -> None:
    model = cartpole_model().actor_critic()
    model.eval()
    assert not any(n.training for n in model.policy.networks.values())
    model.train()
    assert all(n.training for n in model.critic.networks.values())
    model.to("cpu")
    assert model.device == torch.device("cpu")
    assert all(p.device.type == "cpu" for p in model.parameters())
    n_policy = sum(p.numel() for p in model.policy.parameters())
    assert model.num_parameters() == n_policy + sum(p.numel() for p in model.critic.parameters())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_actor_critic_on_cuda() -> None:
    model = cutting_model().actor_critic(device="cuda")
    obs_spaces, _ = cutting2d_masked_spaces()
    obs = {k: v.numpy() for k, v in random_obs(obs_spaces["selection"], 8).items()}
    assert model.compute_action(obs, actor_id="selection")["piece_idx"].shape == (8,)
    out = model.compute_actor_critic_output({k: {kk: vv.cuda() for kk, vv in random_obs(obs_spaces[k], 3).items()}
                                             for k in obs_spaces})
    assert out.values["cutting"].device.type == "cuda"
    cpu = cutting_model().actor_critic()
    cpu.load_state_dict({k: {kk: vv.cpu() for kk, vv in v.items()} for k, v in model.state_dict().items()})


def test_critics_predict_values() -> None:
    obs_spaces, _ = cutting2d_masked_spaces()
    obs = {k: random_obs(obs_spaces[k], 6) for k in obs_spaces}
    step = cutting_model("StepStateCriticComposer").critic
    assert isinstance(step, TorchStepStateCritic)
    values = step.predict_values(obs)
    assert {k: v.shape for k, v in values.items()} == {"selection": (6,), "cutting": (6,)}
    torch.testing.assert_close(step.predict_value(obs["cutting"], "cutting"), values["cutting"])

    delta = cutting_model("DeltaStateCriticComposer").critic
    assert isinstance(delta, TorchDeltaStateCritic)
    values = delta.predict_values(obs)
    delta_only = delta.networks["cutting"]({**obs["cutting"], "prev_value": values["selection"].unsqueeze(-1)})
    torch.testing.assert_close(values["cutting"], values["selection"] + delta_only["value"].squeeze(-1))
    torch.testing.assert_close(delta.predict_value(obs["cutting"], "cutting", prev_value=values["selection"]),
                               values["cutting"])


def test_actor_critic_output() -> None:
    obs_spaces, _ = cutting2d_masked_spaces()
    model = cutting_model().actor_critic()
    obs = {k: random_obs(obs_spaces[k], 4) for k in obs_spaces}
    out = model.compute_actor_critic_output(obs)
    assert set(out.policy_outputs) == {"selection", "cutting"}
    assert out.values["selection"].shape == (4,)
    action = model.compute_action({k: v.numpy() for k, v in obs["selection"].items()}, actor_id="selection")
    assert action["piece_idx"].shape == (4,)


def test_plain_python_setup_like_the_seed() -> None:
    """TorchPolicy / shared critic / actor-critic from hand-built networks, wrapped in TorchModelBlocks."""
    obs, act = cartpole_spaces()

    class PolicyNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 2)

        def forward(self, x):
            return {"action": self.lin(x["observation"])}

    class ValueNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def forward(self, x):
            return {"value": self.lin(x["observation"])}

    policy_net = TorchModelBlock("observation", "action", (4,), in_num_dims=[2], out_num_dims=2, net=PolicyNet())
    value_net = TorchModelBlock("observation", "value", (4,), in_num_dims=[2], out_num_dims=2, net=ValueNet())
    policy = TorchPolicy({0: policy_net}, DistributionMapper(act[0], [{"action_space": gym.spaces.Discrete,
                                                                      "distribution": "categorical"}]), device="cpu")
    critic = TorchSharedStateCritic({0: value_net}, obs, device="cpu", stack_observations=False)
    model = TorchActorCritic(policy, critic, device="cpu")
    assert model.compute_action({"observation": np.ones(4, np.float32)})["action"] in (0, 1)
    assert critic.predict_values({0: random_obs(obs[0], 3)})[0].shape == (3,)
    assert len(model.parameters()) == 4


def test_flatten_concat_nets_and_policy_from_lists() -> None:
    obs, act = pendulum_spaces()
    mapper = DistributionMapper(act[0], [{"action_head": "action", "distribution": "squashed_gaussian"}])
    policy = TorchPolicy([FlattenConcatPolicyNet({"observation": (3,)}, {"action": (2,)}, hidden_units=[8])], mapper)
    critic = TorchSharedStateCritic([FlattenConcatStateValueNet({"observation": (3,)}, hidden_units=[8])])
    a = policy.compute_action({"observation": np.zeros(3, np.float32)})["action"]
    assert a.shape == (1,) and np.all(np.abs(a) <= 2.0)
    assert critic.predict_value(random_obs(obs[0], 2), 0).shape == (2,)


def test_policy_without_declared_out_keys_splits_embeddings() -> None:
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = InferenceBlock("observation", ["action", "latent"], (4,), {
                "latent": DenseBlock("observation", "latent", (4,), hidden_units=[8]),
                "action": LinearOutputBlock("latent", "action", (8,), output_units=2)})

        def forward(self, x):
            return self.body(x)

    _, act = cartpole_spaces()
    policy = TorchPolicy({0: Net()}, DistributionMapper(act[0]))
    out = policy.compute_substep_policy_output(random_obs(cartpole_spaces()[0][0], 3))
    assert set(out.action_logits) == {"action"} and set(out.embedding_logits) == {"latent"}


def test_models_deepcopy_and_pickle() -> None:
    import copy
    import pickle

    model = cutting_model().actor_critic()
    obs = random_obs(cutting2d_masked_spaces()[0]["selection"], 3)
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        torch.testing.assert_close(clone.policy.compute_logits_dict(obs, "selection")["piece_idx"],
                                   model.policy.compute_logits_dict(obs, "selection")["piece_idx"])
        assert clone.policy.network_for("selection") is clone.policy.networks["selection"]
