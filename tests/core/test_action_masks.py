"""Action masks by default: the default (flatten-concat) and template models apply observation masks they can match
to an action head, draw the masking in the model graph, and warn about mask observations they cannot match."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from maze_lab.agent.composers import TemplateModelComposer, build_model_composer
from maze_lab.core.env.core_env import CoreEnv
from maze_lab.core.env.interfaces import ActionConversionInterface, ObservationConversionInterface
from maze_lab.core.env.maze_env import MazeEnv
from maze_lab.perception.action_masks import UnmatchedActionMaskWarning
from maze_lab.perception.blocks import ActionMaskingBlock
from maze_lab.perception.models.built_in import FlattenConcatMaskedPolicyNet, FlattenConcatPolicyNet
from maze_lab.run.run_context import RunContext

N_ORDERS = 5
DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "maze_lab" / "conf" / "model" / "flatten_concat.yaml"


# ---- a custom env written as the seed's tutorial shows: core env, MazeState, conversion interfaces ----------------
class OrderState:
    """Which of the orders may be taken now, and a feature vector."""

    def __init__(self, allowed: np.ndarray, demand: np.ndarray):
        self.allowed = allowed
        self.demand = demand


class OrderCoreEnv(CoreEnv):
    """Each step allows one or two of five orders; taking an allowed one gives +1, a masked one -1."""

    def __init__(self, extra_mask: bool = False):
        super().__init__()
        self.extra_mask = extra_mask
        self.rng = np.random.default_rng(0)
        self.state = self._draw()
        self.t = 0

    def _draw(self) -> OrderState:
        allowed = np.zeros(N_ORDERS, dtype=bool)
        allowed[self.rng.choice(N_ORDERS, size=int(self.rng.integers(1, 3)), replace=False)] = True
        return OrderState(allowed, self.rng.uniform(0, 1, size=3).astype(np.float32))

    def step(self, maze_action: int) -> tuple[OrderState, float, bool, bool, dict]:
        """Reward the order and draw the next state."""
        reward = 1.0 if self.state.allowed[maze_action] else -1.0
        self.t += 1
        self.state = self._draw()
        return self.state, reward, False, self.t >= 20, {}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> OrderState:
        """A fresh state."""
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.state = self._draw()
        return self.state

    def get_maze_state(self) -> OrderState:
        """The current state."""
        return self.state


class OrderObservation(ObservationConversionInterface):
    """``demand`` features and ``order_mask`` (1 = the order may be taken)."""

    def __init__(self, extra_mask: bool = False, mask_key: str = "order_mask"):
        self.extra_mask = extra_mask
        self.mask_key = mask_key

    def maze_to_space(self, maze_state: OrderState) -> dict:
        """The observation dict."""
        obs = {"demand": maze_state.demand, self.mask_key: maze_state.allowed.astype(np.float32)}
        if self.extra_mask:
            obs["foo_mask"] = np.ones(3, dtype=np.float32)
        return obs

    def space(self) -> gym.spaces.Dict:
        """Features and the mask."""
        spaces = {"demand": gym.spaces.Box(0, 1, (3,), np.float32),
                  self.mask_key: gym.spaces.Box(0, 1, (N_ORDERS,), np.float32)}
        if self.extra_mask:
            spaces["foo_mask"] = gym.spaces.Box(0, 1, (3,), np.float32)
        return gym.spaces.Dict(spaces)


class OrderAction(ActionConversionInterface):
    """One Discrete head ``order``."""

    def space_to_maze(self, action: dict, maze_state: OrderState) -> int:
        """The order index."""
        return int(action["order"])

    def space(self) -> gym.spaces.Dict:
        """Discrete(5)."""
        return gym.spaces.Dict({"order": gym.spaces.Discrete(N_ORDERS)})


def order_env(extra_mask: bool = False, mask_key: str = "order_mask") -> MazeEnv:
    """The order env as a MazeEnv."""
    return MazeEnv(OrderCoreEnv(extra_mask), {0: OrderAction()}, {0: OrderObservation(extra_mask, mask_key)})


def observations(env: MazeEnv, n: int = 400) -> dict[str, torch.Tensor]:
    """A batch of ``n`` observations collected by stepping the env with allowed actions."""
    obs, _ = env.reset(seed=1)
    batch = []
    for _ in range(n):
        batch.append(obs)
        obs, _, terminated, truncated, _ = env.step({"order": int(np.flatnonzero(obs["order_mask"])[0])})
        if terminated or truncated:
            obs, _ = env.reset()
    return {k: torch.as_tensor(np.stack([o[k] for o in batch])) for k in batch[0]}


def masked_share(policy: Any, obs: dict[str, torch.Tensor], repeats: int = 10) -> float:
    """Share of sampled actions that the mask forbids."""
    masked = 0
    for _ in range(repeats):
        action = torch.as_tensor(policy.compute_action(obs)["order"])
        masked += int((obs["order_mask"].gather(1, action.long().unsqueeze(1)) == 0).sum())
    return masked / (repeats * len(obs["order_mask"]))


def default_composer(env: MazeEnv) -> Any:
    """The model a user gets without choosing one: maze_lab/conf/model/flatten_concat.yaml."""
    config = yaml.safe_load(DEFAULT_MODEL.read_text())
    return build_model_composer(config, env.action_spaces_dict, env.observation_spaces_dict, env.agent_counts_dict)


def template_composer(env: MazeEnv, **kwargs: Any) -> TemplateModelComposer:
    """A template model whose builder maps only the features (the mask is left to the composer)."""
    builder = {"_target_": "ConcatModelBuilder",
               "modality_config": {"feature": {"block_type": "DenseBlock",
                                               "block_params": {"hidden_units": [16], "non_lin": "torch.nn.Tanh"}},
                                   "hidden": {}, "recurrence": {}},
               "observation_modality_mapping": {"demand": "feature"}}
    return TemplateModelComposer(env.action_spaces_dict, env.observation_spaces_dict, model_builder=builder,
                                 critic={"_target_": "SharedStateCriticComposer"}, **kwargs)


# ---- the default model -------------------------------------------------------------------------------------------
def test_default_model_never_samples_a_masked_action() -> None:
    torch.manual_seed(0)
    env = order_env()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a matched mask gives no warning
        comp = default_composer(env)
    net = comp.policy.networks[0]
    assert isinstance(net, FlattenConcatPolicyNet) and net.action_masks == {"order": "order_mask"}
    obs = observations(env)
    assert masked_share(comp.policy, obs) == 0.0
    # the mask stays an input feature as well
    assert "order_mask" in net.perception_net.perception_dict["concat"].in_keys


def test_default_model_graph_shows_the_masking() -> None:
    svg = default_composer(order_env()).graph().to_svg()
    assert "ActionMaskingBlock" in svg and "masked by order_mask (0 = not allowed)" in svg
    assert "order_logits" in svg


def test_unmasked_policy_would_choose_masked_actions() -> None:
    """The env is a fair check: with the mask under a name that matches no head (so only an input feature, as the
    default model treated every mask before), the untrained policy often picks forbidden orders."""
    torch.manual_seed(0)
    env = order_env()
    obs = observations(env)
    renamed = {"demand": obs["demand"], "allowed": obs["order_mask"]}
    spaces = dict(env.observation_spaces_dict[0].spaces)
    spaces["allowed"] = spaces.pop("order_mask")
    config = yaml.safe_load(DEFAULT_MODEL.read_text())
    comp = build_model_composer(config, env.action_spaces_dict, {0: gym.spaces.Dict(spaces)})
    assert comp.policy.networks[0].action_masks == {}
    action = torch.as_tensor(np.stack([comp.policy.compute_action(renamed)["order"] for _ in range(10)]))
    assert float((obs["order_mask"].gather(1, action.long().T) == 0).float().mean()) > 0.4


def test_unmatched_mask_warns_with_its_name() -> None:
    env = order_env(extra_mask=True)
    with pytest.warns(UnmatchedActionMaskWarning, match=r"FlattenConcatPolicyNet: observation 'foo_mask' .*not "
                                                        r"applied: no action head is named 'foo'.*action_masks"):
        comp = default_composer(env)
    assert comp.policy.networks[0].action_masks == {"order": "order_mask"}
    with pytest.warns(UnmatchedActionMaskWarning, match=r"TemplateModelComposer policy 0: observation 'foo_mask'"):
        template_composer(env)


# ---- the template model ------------------------------------------------------------------------------------------
def test_template_model_never_samples_a_masked_action_and_draws_the_mask() -> None:
    torch.manual_seed(0)
    env = order_env()
    with warnings.catch_warnings():
        # neither "not used by the model" (the builder does not map the mask) nor "not applied"
        warnings.simplefilter("error")
        comp = template_composer(env)
    net = comp.policy.networks[0]
    assert isinstance(net.perception_dict["order"], ActionMaskingBlock)
    assert net.perception_dict["order"].in_keys == ["order_logits", "order_mask"]
    assert masked_share(comp.policy, observations(env)) == 0.0
    svg = comp.graph().to_svg()
    assert "ActionMaskingBlock" in svg and "masked by order_mask (0 = not allowed)" in svg


# ---- the matching rule -------------------------------------------------------------------------------------------
def _spaces(obs: dict[str, gym.spaces.Space], act: dict[str, gym.spaces.Space]) -> tuple[dict, dict]:
    return {0: gym.spaces.Dict(obs)}, {0: gym.spaces.Dict(act)}


def _template(obs_spaces: dict, act_spaces: dict) -> TemplateModelComposer:
    builder = {"_target_": "ConcatModelBuilder",
               "modality_config": {"feature": {"block_type": "DenseBlock", "block_params": {"hidden_units": [8]}},
                                   "hidden": {}, "recurrence": {}},
               "observation_modality_mapping": {"x": "feature"}}
    return TemplateModelComposer(act_spaces, obs_spaces, model_builder=builder, critic=None)


def _custom(obs_spaces: dict, act_spaces: dict, net: str = "FlattenConcatPolicyNet") -> Any:
    config = {"_target_": "CustomModelComposer",
              "policy": {"_target_": "ProbabilisticPolicyComposer", "networks": [{"_target_": net,
                                                                                  "hidden_units": [8]}]}}
    return build_model_composer(config, act_spaces, obs_spaces)


def test_action_mask_masks_the_single_discrete_head() -> None:
    """``action_mask`` (Gymnasium's common name) masks the one Discrete head even beside a Box head."""
    obs_spaces, act_spaces = _spaces({"x": gym.spaces.Box(-1, 1, (2,)), "action_mask": gym.spaces.MultiBinary(4)},
                                     {"pick": gym.spaces.Discrete(4), "amount": gym.spaces.Box(-1, 1, (1,))})
    mask = torch.tensor([[0, 1, 0, 0], [1, 0, 0, 1]], dtype=torch.int8).repeat(200, 1)  # MultiBinary: 1 = allowed
    obs = {"x": torch.zeros(400, 2), "action_mask": mask}
    for comp in (_template(obs_spaces, act_spaces), _custom(obs_spaces, act_spaces),
                 _custom(obs_spaces, act_spaces, "FlattenConcatMaskedPolicyNet")):
        pick = torch.as_tensor(comp.policy.compute_action(obs)["pick"]).long()
        assert bool((mask.gather(1, pick.unsqueeze(1)) == 1).all())
    assert isinstance(_custom(obs_spaces, act_spaces, "FlattenConcatMaskedPolicyNet").policy.networks[0],
                      FlattenConcatMaskedPolicyNet)


def test_action_mask_with_two_discrete_heads_warns() -> None:
    obs_spaces, act_spaces = _spaces({"x": gym.spaces.Box(-1, 1, (2,)), "action_mask": gym.spaces.MultiBinary(3)},
                                     {"a": gym.spaces.Discrete(3), "b": gym.spaces.Discrete(3)})
    with pytest.warns(UnmatchedActionMaskWarning, match=r"'action_mask' .*2 Discrete action heads \(a, b\)"):
        _custom(obs_spaces, act_spaces)
    with pytest.warns(UnmatchedActionMaskWarning, match=r"'action_mask' .*2 Discrete action heads \(a, b\)"):
        _template(obs_spaces, act_spaces)


def test_head_mask_with_the_wrong_shape_warns_and_is_not_applied() -> None:
    obs_spaces, act_spaces = _spaces({"x": gym.spaces.Box(-1, 1, (2,)), "a_mask": gym.spaces.MultiBinary(4)},
                                     {"a": gym.spaces.Discrete(3)})
    with pytest.warns(UnmatchedActionMaskWarning, match=r"'a_mask' .*shape \(4,\) but action head 'a' has logits "
                                                        r"of shape \(3,\)"):
        comp = _custom(obs_spaces, act_spaces)
    assert comp.policy.networks[0].action_masks == {}


def test_explicit_action_masks_on_the_flatten_concat_net() -> None:
    net = FlattenConcatPolicyNet({"x": (2,), "allowed": (3,)}, {"a": (3,)}, hidden_units=[8],
                                 action_masks={"a": "allowed"})
    allowed = torch.tensor([[0, 0, 1]], dtype=torch.float32)
    with torch.no_grad():
        out = net({"x": torch.zeros(1, 2), "allowed": allowed})["a"]
    assert int(out.argmax()) == 2 and float(out[0, 0]) == torch.finfo(torch.float32).min


def test_default_model_masks_while_training(tmp_path: Path) -> None:
    """Through RunContext with the default config: the trained policy of a short run respects the mask."""
    torch.manual_seed(0)
    rc = RunContext(env=order_env, overrides={"n_epochs": 1, "algorithm.epoch_length": 2,
                                              "algorithm.n_rollout_steps": 16, "runner.concurrency": 2,
                                              "algorithm.eval_repeats": 1, "log_base_dir": str(tmp_path)},
                    silent=True)
    rc.train()
    assert masked_share(rc.policy, observations(order_env())) == 0.0
    graphs = list(rc.run_dir.joinpath("model_graphs").glob("*.svg"))
    assert any("masked by order_mask" in g.read_text() for g in graphs)
    rc.close()


def test_default_model_maps_a_differently_named_mask_by_override(tmp_path: Path) -> None:
    """A mask whose name matches no head warns; mapping it in the config applies it."""
    def env() -> MazeEnv:
        return order_env(mask_key="valid_mask")

    overrides = {"n_epochs": 1, "log_base_dir": str(tmp_path)}
    with pytest.warns(UnmatchedActionMaskWarning, match=r"'valid_mask' .*no action head is named 'valid'.*"
                                                        r"action_masks: \{<head>: valid_mask\}"):
        assert RunContext(env=env, overrides=overrides, silent=True).policy.networks[0].action_masks == {}
    rc = RunContext(env=env, overrides={**overrides, "model.policy.networks.action_masks": {"order": "valid_mask"}},
                    silent=True)
    assert rc.policy.networks[0].action_masks == {"order": "valid_mask"}
    obs = observations(order_env())
    allowed = obs.pop("order_mask")
    actions = torch.as_tensor(rc.compute_action({**obs, "valid_mask": allowed})["order"]).long()
    assert bool((allowed.gather(1, actions.unsqueeze(1)) == 1).all())
    rc.close()
