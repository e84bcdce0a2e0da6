"""The TorchModel interface shared by torch policies, critics and actor-critics."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn


def float_observation(observation: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An observation tensor dict as the networks take it: every entry float32, whatever numeric dtype the env gave
    (uint8 images, integer counts, bool masks, float64). Values are not rescaled: an image stays in 0..255 unless a
    wrapper of the env scales it."""
    return {k: v if v.dtype == torch.float32 else v.float() for k, v in observation.items()}


class TorchModel(ABC):
    """Device placement, train/eval modes, parameters and state dicts of a set of torch modules."""

    def __init__(self, device: str | torch.device = "cpu"):
        self._device = torch.device(device)
        self._is_cpu = self._device.type == "cpu"

    @abstractmethod
    def _modules(self) -> dict[str, nn.Module]:
        """All modules by state-dict name."""

    @property
    def device(self) -> torch.device:
        """The device the modules live on."""
        return self._device

    def to(self, device: str | torch.device) -> TorchModel:
        """Move all modules to ``device``."""
        self._device = torch.device(device)
        self._is_cpu = self._device.type == "cpu"
        for module in self._modules().values():
            module.to(self._device)
        return self

    def train(self) -> None:
        """Set all modules to training mode."""
        for module in self._modules().values():
            module.train()

    def eval(self) -> None:
        """Set all modules to evaluation mode."""
        for module in self._modules().values():
            module.eval()

    def parameters(self) -> list[nn.Parameter]:
        """All parameters (shared modules counted once)."""
        seen: set[int] = set()
        params = []
        for module in self._modules().values():
            for p in module.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    params.append(p)
        return params

    def num_parameters(self) -> int:
        """Number of parameters (shared ones counted once)."""
        return sum(p.numel() for p in self.parameters())

    def state_dict(self) -> dict[str, Any]:
        """All weights: one module state dict per module name (``policy_<key>``, ``critic_<key>``...)."""
        return {name: net.state_dict() for name, net in self._modules().items()}

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Load weights saved by :meth:`state_dict`; entries of other models (e.g. a critic's) are ignored."""
        modules = self._modules()
        check_state_dict_keys(state_dict, modules, type(self).__name__, strict=strict)
        for name, net in modules.items():
            if name in state_dict:
                net.load_state_dict(state_dict[name])


def check_state_dict_keys(state_dict: Mapping[str, Any], modules: Mapping[str, nn.Module], owner: str,
                          strict: bool = True) -> None:
    """Raise if modules have no entry in the state dict (strict: also for missing ones of any module)."""
    missing = [k for k in modules if k not in state_dict]
    if missing and strict:
        raise KeyError(f"{owner}.load_state_dict: no weights for {missing}; the state dict has "
                       f"{sorted(state_dict)}")
