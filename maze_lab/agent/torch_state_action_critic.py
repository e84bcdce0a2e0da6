"""State-action critics Q(s, a) (e.g. for SAC): several Q networks with target copies, shared or per step."""

from __future__ import annotations

import copy
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from maze_lab.agent.torch_model import TorchModel, float_observation
from maze_lab.core.env.structured_env import StepKey
from maze_lab.perception.perception_utils import merge_spaces

TensorDict = dict[str, torch.Tensor]

Q_VALUES_SUFFIX = "_q_values"
"""Discrete-only steps: networks output ``<head>_q_values`` with one value per option."""

Q_VALUE_KEY = "q_value"
"""Steps with continuous actions: networks take observations and actions and output ``q_value`` (1,)."""


def only_discrete(action_space: gym.spaces.Dict) -> bool:
    """Whether all action heads are Discrete (Q(s) gives all action values at once)."""
    return all(isinstance(s, gym.spaces.Discrete) for s in action_space.spaces.values())


def state_action_input_space(observation_space: gym.spaces.Dict, action_space: gym.spaces.Dict) -> gym.spaces.Dict:
    """The input space of a Q(s, a) network: observations plus actions (Discrete heads one-hot as Box)."""
    actions = {}
    for key, space in action_space.spaces.items():
        if isinstance(space, gym.spaces.Discrete):
            actions[key] = gym.spaces.Box(0.0, 1.0, shape=(int(space.n),))
        elif isinstance(space, gym.spaces.Box):
            actions[key] = space
        else:
            raise TypeError(f"state-action critics support Discrete and Box action heads; '{key}' is {space}")
    clash = set(actions) & set(observation_space.spaces)
    if clash:
        raise ValueError(f"action heads {sorted(clash)} clash with observation keys of the same name")
    return gym.spaces.Dict({**observation_space.spaces, **actions})


class TorchStateActionCritic(TorchModel):
    """Base of the state-action critics.

    :param networks: Per critic key, a list of ``num_q_networks`` Q networks (a list of lists means keys 0, 1, ...).
    :param obs_spaces_dict: Observation space per policy key.
    :param action_spaces_dict: Action space per policy key.
    :param device: Device of the networks.
    """

    def __init__(self, networks: Mapping[StepKey, Sequence[nn.Module]] | Sequence[Sequence[nn.Module]],
                 obs_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                 action_spaces_dict: Mapping[StepKey, gym.spaces.Dict], device: str | torch.device = "cpu"):
        nets = dict(networks) if isinstance(networks, Mapping) else dict(enumerate(networks))
        if not nets:
            raise ValueError("a state-action critic needs at least one list of Q networks")
        self.networks: dict[StepKey, list[nn.Module]] = {k: list(v) for k, v in nets.items()}
        counts = {len(v) for v in self.networks.values()}
        if len(counts) != 1:
            raise ValueError(f"every critic key needs the same number of Q networks, got {counts}")
        self.num_q_networks = counts.pop()
        self.target_networks = {k: [copy.deepcopy(n) for n in v] for k, v in self.networks.items()}
        for nets_ in self.target_networks.values():
            for n in nets_:
                n.requires_grad_(False)
        self.obs_spaces_dict = dict(obs_spaces_dict)
        self.action_spaces_dict = dict(action_spaces_dict)
        self.only_discrete_spaces = {k: only_discrete(s) for k, s in self.action_spaces_dict.items()}
        super().__init__(device)
        self.to(device)

    @abstractmethod
    def predict_q_values(self, observations: Mapping[StepKey, Mapping[str, torch.Tensor]],
                         actions: Mapping[StepKey, Mapping[str, torch.Tensor]],
                         gather_output: bool = True) -> dict[StepKey, list[Any]]:
        """Q values of every Q network per policy key.

        Discrete-only steps give per network a dict ``head -> Q`` (gathered at the taken action if
        ``gather_output``, else all options); other steps give per network a batch-shaped tensor Q(s, a).
        """

    @abstractmethod
    def predict_next_q_values(self, next_observations: Mapping[StepKey, Mapping[str, torch.Tensor]],
                              next_actions: Mapping[StepKey, Mapping[str, torch.Tensor]],
                              gather_output: bool = True) -> dict[StepKey, list[Any]]:
        """Like :meth:`predict_q_values`, with the target networks (no gradients)."""

    def _evaluate(self, nets: list[nn.Module], obs: Mapping[str, torch.Tensor], actions: Mapping[str, torch.Tensor],
                  action_space: gym.spaces.Dict, gather: bool) -> list[Any]:
        obs = float_observation(obs)
        if only_discrete(action_space):
            results = []
            for net in nets:
                out = net(obs)
                per_head = {}
                for head in action_space.spaces:
                    q = out[head + Q_VALUES_SUFFIX]
                    per_head[head] = q.gather(-1, actions[head].long().unsqueeze(-1)).squeeze(-1) if gather else q
                results.append(per_head)
            return results
        inputs = dict(obs)
        for head, space in action_space.spaces.items():
            a = actions[head]
            inputs[head] = F.one_hot(a.long(), int(space.n)).float() if isinstance(space, gym.spaces.Discrete) else a
        return [net(inputs)[Q_VALUE_KEY].squeeze(-1) for net in nets]

    @torch.no_grad()
    def update_target_weights(self, tau: float) -> None:
        """Polyak update: ``target = (1 - tau) * target + tau * online`` (tau=1 copies)."""
        for key, nets in self.networks.items():
            for net, target in zip(nets, self.target_networks[key], strict=True):
                for p, tp in zip(net.parameters(), target.parameters(), strict=True):
                    tp.mul_(1.0 - tau).add_(p, alpha=tau)

    def _modules(self) -> dict[str, nn.Module]:
        mods: dict[str, nn.Module] = {}
        for key, nets in self.networks.items():
            for i, net in enumerate(nets):
                mods[f"critic_{key}_{i}"] = net
                mods[f"critic_target_{key}_{i}"] = self.target_networks[key][i]
        return mods

    def parameters(self) -> list[nn.Parameter]:
        """Trainable parameters of the online Q networks (targets excluded)."""
        return [p for nets in self.networks.values() for net in nets for p in net.parameters()]


class TorchSharedStateActionCritic(TorchStateActionCritic):
    """One set of Q networks for all sub-steps; it sees the merged observations and actions of the env step."""

    def __init__(self, networks: Mapping[StepKey, Sequence[nn.Module]] | Sequence[Sequence[nn.Module]],
                 obs_spaces_dict: Mapping[StepKey, gym.spaces.Dict],
                 action_spaces_dict: Mapping[StepKey, gym.spaces.Dict], device: str | torch.device = "cpu"):
        super().__init__(networks, obs_spaces_dict, action_spaces_dict, device)
        if len(self.networks) != 1:
            raise ValueError(f"a shared state-action critic has one critic key, got {list(self.networks)}")
        self._key = next(iter(self.networks))
        self._merged_actions = merge_spaces(self.action_spaces_dict.values())

    def _predict(self, nets: list[nn.Module], observations: Mapping[StepKey, Mapping[str, torch.Tensor]],
                 actions: Mapping[StepKey, Mapping[str, torch.Tensor]], gather: bool) -> dict[StepKey, list[Any]]:
        obs: TensorDict = {}
        act: TensorDict = {}
        for o in observations.values():
            obs.update(o)
        for a in actions.values():
            act.update(a)
        space = gym.spaces.Dict({k: self._merged_actions.spaces[k] for k in act}) if act else self._merged_actions
        q = self._evaluate(nets, obs, act, space, gather)
        return dict.fromkeys(observations, q)

    def predict_q_values(self, observations: Mapping[StepKey, Mapping[str, torch.Tensor]],
                         actions: Mapping[StepKey, Mapping[str, torch.Tensor]],
                         gather_output: bool = True) -> dict[StepKey, list[Any]]:
        """Q values of the online networks (the same for every sub-step)."""
        return self._predict(self.networks[self._key], observations, actions, gather_output)

    @torch.no_grad()
    def predict_next_q_values(self, next_observations: Mapping[StepKey, Mapping[str, torch.Tensor]],
                              next_actions: Mapping[StepKey, Mapping[str, torch.Tensor]],
                              gather_output: bool = True) -> dict[StepKey, list[Any]]:
        """Q values of the target networks."""
        return self._predict(self.target_networks[self._key], next_observations, next_actions, gather_output)


class TorchStepStateActionCritic(TorchStateActionCritic):
    """Separate Q networks per policy key."""

    def _predict(self, which: dict[StepKey, list[nn.Module]],
                 observations: Mapping[StepKey, Mapping[str, torch.Tensor]],
                 actions: Mapping[StepKey, Mapping[str, torch.Tensor]], gather: bool) -> dict[StepKey, list[Any]]:
        out = {}
        for key, obs in observations.items():
            if key not in which:
                raise KeyError(f"{type(self).__name__}: no Q networks for policy key {key!r}; keys: {list(which)}")
            out[key] = self._evaluate(which[key], obs, actions.get(key, {}), self.action_spaces_dict[key], gather)
        return out

    def predict_q_values(self, observations: Mapping[StepKey, Mapping[str, torch.Tensor]],
                         actions: Mapping[StepKey, Mapping[str, torch.Tensor]],
                         gather_output: bool = True) -> dict[StepKey, list[Any]]:
        """Q values of the online networks per policy key."""
        return self._predict(self.networks, observations, actions, gather_output)

    @torch.no_grad()
    def predict_next_q_values(self, next_observations: Mapping[StepKey, Mapping[str, torch.Tensor]],
                              next_actions: Mapping[StepKey, Mapping[str, torch.Tensor]],
                              gather_output: bool = True) -> dict[StepKey, list[Any]]:
        """Q values of the target networks per policy key."""
        return self._predict(self.target_networks, next_observations, next_actions, gather_output)
