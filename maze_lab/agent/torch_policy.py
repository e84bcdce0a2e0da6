"""TorchPolicy: policy networks per policy key plus a DistributionMapper, for rollouts and for training."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from maze_lab.agent.torch_model import TorchModel, float_observation
from maze_lab.core.env.structured_env import ActorID, StepKey
from maze_lab.core.policy import Policy, resolve_actor_id
from maze_lab.distributions.categorical import CategoricalProbabilityDistribution
from maze_lab.distributions.dict_distribution import DictProbabilityDistribution
from maze_lab.distributions.distribution_mapper import DistributionMapper

TensorDict = dict[str, torch.Tensor]


@dataclass
class PolicySubStepOutput:
    """What a policy network computes for one sub-step (one policy key) on a batch of observations."""

    action_logits: TensorDict
    """Logits per action head."""

    prob_dist: DictProbabilityDistribution
    """The action distribution built from the logits."""

    embedding_logits: TensorDict | None
    """Further network outputs (shared embeddings for the critic), or None."""

    actor_id: ActorID
    """The actor this output belongs to."""

    @property
    def entropy(self) -> torch.Tensor:
        """Entropy of the joint action."""
        return self.prob_dist.joint_entropy()

    def log_prob(self, actions: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Log-probability of the joint action."""
        return self.prob_dist.joint_log_prob(actions)


def _obs_to_tensor(value: Any) -> torch.Tensor:
    """Observation entry to a float tensor (float32 numpy arrays are shared, not copied)."""
    if isinstance(value, torch.Tensor):
        return value if value.is_floating_point() else value.float()
    if isinstance(value, np.ndarray):
        if value.dtype == np.float32:
            return torch.from_numpy(value)
        return torch.from_numpy(value.astype(np.float32))
    return torch.as_tensor(np.asarray(value, dtype=np.float32))


def _to_numpy(t: torch.Tensor) -> Any:
    arr = t.cpu().numpy()
    return arr[()] if arr.ndim == 0 else arr


class TorchPolicy(Policy, TorchModel):
    """A probabilistic policy: one network per policy key (or per actor), sharing one DistributionMapper.

    :param networks: Networks keyed by policy key (a list means keys 0, 1, ...); for keys listed in
        ``substeps_with_separate_agent_nets`` the networks are keyed by ``ActorID(step_key, agent_id)``.
        Each maps an observation tensor dict to a dict with one logits tensor per action head (further outputs
        are passed on as embeddings).
    :param distribution_mapper: Maps action heads (of all policy keys) to distributions.
    :param device: Device of the networks.
    :param substeps_with_separate_agent_nets: Policy keys whose agents each have their own network.
    """

    def __init__(self, networks: Mapping[StepKey | ActorID, nn.Module] | Sequence[nn.Module],
                 distribution_mapper: DistributionMapper, device: str | torch.device = "cpu",
                 substeps_with_separate_agent_nets: Sequence[StepKey] | None = None):
        if isinstance(networks, Mapping):
            self.networks: dict[StepKey | ActorID, nn.Module] = dict(networks)
        else:
            self.networks = dict(enumerate(networks))
        if not self.networks:
            raise ValueError("TorchPolicy needs at least one network")
        self.distribution_mapper = distribution_mapper
        self.substeps_with_separate_agent_nets = set(substeps_with_separate_agent_nets or [])
        self.step_keys: list[StepKey] = []
        for key in self.networks:
            step = key.step_key if isinstance(key, ActorID) else key
            if step not in self.step_keys:
                self.step_keys.append(step)
        heads = set(distribution_mapper.action_space.spaces)
        # action heads per network, from the network's out_keys where it declares them (else from its first output)
        self._heads: dict[StepKey | ActorID, list[str] | None] = {
            k: [o for o in net.out_keys if o in heads] if hasattr(net, "out_keys") else None
            for k, net in self.networks.items()
        }
        self._heads_set = heads
        self._net_cache: dict[Any, tuple[nn.Module, StepKey | ActorID]] = {}
        self.temperature = 1.0
        TorchModel.__init__(self, device)
        self.to(device)

    # ---- network lookup -------------------------------------------------------------------------------------

    def _lookup(self, actor_id: ActorID | StepKey | None) -> tuple[nn.Module, StepKey | ActorID]:
        hit = self._net_cache.get(actor_id)
        if hit is not None:
            return hit
        aid = resolve_actor_id(actor_id, self.step_keys)
        key: StepKey | ActorID = aid if aid.step_key in self.substeps_with_separate_agent_nets else aid.step_key
        if key not in self.networks:
            raise KeyError(f"no policy network for {key!r}; networks: {list(self.networks)}")
        hit = (self.networks[key], key)
        try:
            self._net_cache[actor_id] = hit
        except TypeError:  # unhashable actor ids are resolved every time
            pass
        return hit

    def network_for(self, actor_id: ActorID | StepKey | None) -> nn.Module:
        """The network that acts for ``actor_id``."""
        return self._lookup(actor_id)[0]

    def _split_output(self, key: StepKey | ActorID, out: TensorDict) -> tuple[TensorDict, TensorDict | None]:
        heads = self._heads.get(key)
        if heads is None:
            heads = [k for k in out if k in self._heads_set]
            self._heads[key] = heads
        logits = {h: out[h] for h in heads}
        if len(heads) == len(out):
            return logits, None
        return logits, {k: v for k, v in out.items() if k not in logits}

    # ---- batched methods for trainers ----------------------------------------------------------------------

    def compute_logits_dict(self, observation: Mapping[str, torch.Tensor],
                            actor_id: ActorID | StepKey | None = None) -> TensorDict:
        """Action logits per head for a (batched) observation tensor dict, with gradients."""
        net, key = self._lookup(actor_id)
        return self._split_output(key, net(float_observation(observation)))[0]

    def logits_dict_to_distribution(self, logits_dict: Mapping[str, torch.Tensor],
                                    temperature: float = 1.0) -> DictProbabilityDistribution:
        """The action distribution for the logits (logits are divided by / stds scaled by the temperature)."""
        return self.distribution_mapper.logits_dict_to_distribution(logits_dict, temperature)

    def compute_substep_policy_output(self, observation: Mapping[str, torch.Tensor],
                                      actor_id: ActorID | StepKey | None = None,
                                      temperature: float = 1.0) -> PolicySubStepOutput:
        """Logits, distribution and embeddings for a batch of observations of one policy key."""
        net, key = self._lookup(actor_id)
        logits, embedding = self._split_output(key, net(float_observation(observation)))
        return PolicySubStepOutput(action_logits=logits,
                                   prob_dist=self.distribution_mapper.logits_dict_to_distribution(logits, temperature),
                                   embedding_logits=embedding,
                                   actor_id=resolve_actor_id(actor_id, self.step_keys))

    def compute_log_probs_and_entropy(self, observation: Mapping[str, torch.Tensor],
                                      actions: Mapping[str, torch.Tensor],
                                      actor_id: ActorID | StepKey | None = None,
                                      temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """Joint log-probability of ``actions`` and joint entropy (summed over heads), batch-shaped."""
        out = self.compute_substep_policy_output(observation, actor_id, temperature)
        return out.prob_dist.joint_log_prob(actions), out.prob_dist.joint_entropy()

    # ---- acting ---------------------------------------------------------------------------------------------

    def obs_to_torch(self, observation: Mapping[str, Any]) -> TensorDict:
        """Observation (numpy arrays, scalars or tensors) to a float tensor dict on the policy's device."""
        if self._is_cpu:
            return {k: _obs_to_tensor(v) for k, v in observation.items()}
        return {k: _obs_to_tensor(v).to(self._device) for k, v in observation.items()}

    def compute_action(self, observation: Mapping[str, Any], actor_id: ActorID | StepKey | None = None,
                       maze_state: Any = None, env: Any = None, deterministic: bool = False) -> dict[str, Any]:
        """Sample (or pick the most likely) action for an observation; works for single and batched obs."""
        net, key = self._lookup(actor_id)
        with torch.no_grad():
            logits, _ = self._split_output(key, net(self.obs_to_torch(observation)))
            dist = self.distribution_mapper.logits_dict_to_distribution(logits, self.temperature)
            action = dist.deterministic_sample() if deterministic else dist.sample()
        return {k: _to_numpy(v) for k, v in action.items()}

    def compute_action_with_logits(self, observation: Mapping[str, Any], actor_id: ActorID | StepKey | None = None,
                                   deterministic: bool = False) -> tuple[dict[str, Any], TensorDict]:
        """Like :meth:`compute_action`, also returning the logits."""
        net, key = self._lookup(actor_id)
        with torch.no_grad():
            logits, _ = self._split_output(key, net(self.obs_to_torch(observation)))
            dist = self.distribution_mapper.logits_dict_to_distribution(logits, self.temperature)
            action = dist.deterministic_sample() if deterministic else dist.sample()
        return {k: _to_numpy(v) for k, v in action.items()}, logits

    def compute_top_action_candidates(self, observation: Mapping[str, Any], num_candidates: int | None,
                                      actor_id: ActorID | StepKey | None = None, maze_state: Any = None,
                                      env: Any = None) -> tuple[list[dict[str, Any]], list[float]]:
        """The ``num_candidates`` most likely joint actions (categorical heads only, zero-probability actions left
        out) and their probabilities, best first."""
        net, key = self._lookup(actor_id)
        with torch.no_grad():
            logits, _ = self._split_output(key, net(self.obs_to_torch(observation)))
            dist = self.distribution_mapper.logits_dict_to_distribution(logits, self.temperature)
        per_head = []
        for head, d in dist.distribution_dict.items():
            if not isinstance(d, CategoricalProbabilityDistribution):
                raise TypeError(f"top action candidates need categorical heads; '{head}' is {type(d).__name__}")
            if d.probs.dim() != 1:
                raise ValueError(f"top action candidates need a single (unbatched) observation; logits of '{head}' "
                                 f"have shape {tuple(d.probs.shape)}")
            k = d.n if num_candidates is None else min(num_candidates, d.n)
            p, idx = d.probs.topk(k)
            per_head.append([(int(i) + d.start, float(q)) for i, q in zip(idx, p, strict=True)])
        joint = []
        for combo in itertools.product(*per_head):
            prob = float(np.prod([q for _, q in combo]))
            if prob <= 0.0:  # masked (invalid) actions are no candidates
                continue
            joint.append(({h: np.int64(a) for h, (a, _) in zip(dist.keys(), combo, strict=True)}, prob))
        joint.sort(key=lambda c: -c[1])
        if num_candidates is not None:
            joint = joint[:num_candidates]
        return [c for c, _ in joint], [p for _, p in joint]

    def seed(self, seed: int | None) -> None:
        """Seed torch's global generator (used for sampling)."""
        if seed is not None:
            torch.manual_seed(seed)

    # ---- TorchModel ----------------------------------------------------------------------------------------

    def _modules(self) -> dict[str, nn.Module]:
        return {_state_key("policy", k): net for k, net in self.networks.items()}


def _state_key(prefix: str, key: StepKey | ActorID) -> str:
    if isinstance(key, ActorID):
        return f"{prefix}_{key.step_key}_{key.agent_id}"
    return f"{prefix}_{key}"
