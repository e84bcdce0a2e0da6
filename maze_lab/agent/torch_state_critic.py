"""State critics V(s) for structured envs: shared, per-step and delta critics."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence

import gymnasium as gym
import torch
from torch import nn

from maze_lab.agent.torch_model import TorchModel, float_observation
from maze_lab.core.env.structured_env import StepKey

TensorDict = dict[str, torch.Tensor]

PREV_VALUE_KEY = "prev_value"
"""Extra input of the delta critic's networks after the first sub-step: the previous sub-step's value, (1,)."""


def _as_network_dict(networks: Mapping[StepKey, nn.Module] | Sequence[nn.Module]) -> dict[StepKey, nn.Module]:
    nets = dict(networks) if isinstance(networks, Mapping) else dict(enumerate(networks))
    if not nets:
        raise ValueError("a critic needs at least one network")
    return nets


def _value(out: Mapping[str, torch.Tensor], owner: str) -> torch.Tensor:
    try:
        v = out["value"]
    except KeyError:
        raise KeyError(f"{owner}: value networks must return a dict with key 'value'; got {sorted(out)}") from None
    return v.squeeze(-1) if v.dim() > 0 and v.shape[-1] == 1 else v


class TorchStateCritic(TorchModel):
    """Base of the state critics: value networks that map observation (or embedding) dicts to ``{'value': ...}``.

    :param networks: Value networks (keyed by critic key; a list means keys 0, 1, ...).
    :param obs_spaces_dict: Observation space per policy key.
    :param device: Device of the networks.
    """

    def __init__(self, networks: Mapping[StepKey, nn.Module] | Sequence[nn.Module],
                 obs_spaces_dict: Mapping[StepKey, gym.spaces.Dict] | None = None,
                 device: str | torch.device = "cpu"):
        self.networks = _as_network_dict(networks)
        self.obs_spaces_dict = dict(obs_spaces_dict or {})
        super().__init__(device)
        self.to(device)

    @property
    def num_critics(self) -> int:
        """Number of value networks."""
        return len(self.networks)

    @abstractmethod
    def predict_values(self, observations: Mapping[StepKey, Mapping[str, torch.Tensor]]) -> dict[StepKey, torch.Tensor]:
        """Values (batch-shaped) for the observations of the sub-steps of one env step, keyed by policy key.

        :param observations: Per policy key, in sub-step order, a batched observation (or shared embedding) dict.
        """

    def predict_value(self, observation: Mapping[str, torch.Tensor], critic_id: StepKey) -> torch.Tensor:
        """Value of one sub-step's observation batch."""
        return self.predict_values({critic_id: observation})[critic_id]

    def _modules(self) -> dict[str, nn.Module]:
        return {f"critic_{k}": net for k, net in self.networks.items()}


class TorchSharedStateCritic(TorchStateCritic):
    """One value network for all sub-steps (the default for gym-style envs).

    :param stack_observations: If True, the network sees the merged observations of all sub-steps of the env
        step and its single value is used for every sub-step; if False, it is applied to each sub-step's
        observation separately (the sub-steps must then share their observation structure).
    """

    def __init__(self, networks: Mapping[StepKey, nn.Module] | Sequence[nn.Module],
                 obs_spaces_dict: Mapping[StepKey, gym.spaces.Dict] | None = None,
                 device: str | torch.device = "cpu", stack_observations: bool = False):
        super().__init__(networks, obs_spaces_dict, device)
        if len(self.networks) != 1:
            raise ValueError(f"a shared critic has exactly one network, got {len(self.networks)}")
        self.stack_observations = stack_observations
        self.network = next(iter(self.networks.values()))

    def predict_values(self, observations: Mapping[StepKey, Mapping[str, torch.Tensor]]) -> dict[StepKey, torch.Tensor]:
        """One value per sub-step from the shared network."""
        observations = {k: float_observation(obs) for k, obs in observations.items()}
        if self.stack_observations:
            merged: TensorDict = {}
            for obs in observations.values():
                merged.update(obs)
            value = _value(self.network(merged), "TorchSharedStateCritic")
            return dict.fromkeys(observations, value)
        return {k: _value(self.network(obs), "TorchSharedStateCritic") for k, obs in observations.items()}


class TorchStepStateCritic(TorchStateCritic):
    """One value network per policy key."""

    def predict_values(self, observations: Mapping[StepKey, Mapping[str, torch.Tensor]]) -> dict[StepKey, torch.Tensor]:
        """Each sub-step's value from its own network."""
        out = {}
        for key, obs in ((k, float_observation(o)) for k, o in observations.items()):
            if key not in self.networks:
                raise KeyError(f"TorchStepStateCritic: no value network for policy key {key!r}; "
                               f"networks: {list(self.networks)}")
            out[key] = _value(self.networks[key](obs), "TorchStepStateCritic")
        return out


class TorchDeltaStateCritic(TorchStateCritic):
    """The first sub-step gets a regular value; each later sub-step predicts a change to the previous value.

    Networks after the first receive the previous sub-step's (detached) value as extra input ``prev_value`` (1,).
    """

    def predict_values(self, observations: Mapping[StepKey, Mapping[str, torch.Tensor]]) -> dict[StepKey, torch.Tensor]:
        """Values of the sub-steps, in order; the first key must be the first sub-step."""
        out: dict[StepKey, torch.Tensor] = {}
        prev: torch.Tensor | None = None
        for key, obs in ((k, float_observation(o)) for k, o in observations.items()):
            if key not in self.networks:
                raise KeyError(f"TorchDeltaStateCritic: no value network for policy key {key!r}; "
                               f"networks: {list(self.networks)}")
            if prev is None:
                value = _value(self.networks[key](obs), "TorchDeltaStateCritic")
            else:
                inputs = {**obs, PREV_VALUE_KEY: prev.detach().unsqueeze(-1)}
                value = prev + _value(self.networks[key](inputs), "TorchDeltaStateCritic")
            out[key] = value
            prev = value
        return out

    def predict_value(self, observation: Mapping[str, torch.Tensor], critic_id: StepKey,
                      prev_value: torch.Tensor | None = None) -> torch.Tensor:
        """Value of one sub-step; later sub-steps need the previous sub-step's value."""
        observation = float_observation(observation)
        if prev_value is None:
            return _value(self.networks[critic_id](observation), "TorchDeltaStateCritic")
        inputs = {**observation, PREV_VALUE_KEY: prev_value.detach().unsqueeze(-1)}
        return prev_value + _value(self.networks[critic_id](inputs), "TorchDeltaStateCritic")
