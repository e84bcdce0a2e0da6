"""TorchActorCritic: a TorchPolicy and a critic in one model (for A2C, PPO, IMPALA, SAC)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from maze_lab.agent.torch_model import TorchModel
from maze_lab.agent.torch_policy import PolicySubStepOutput, TorchPolicy
from maze_lab.agent.torch_state_action_critic import TorchStateActionCritic
from maze_lab.agent.torch_state_critic import TorchStateCritic
from maze_lab.core.env.structured_env import ActorID, StepKey
from maze_lab.core.policy import Policy


@dataclass
class ActorCriticOutput:
    """Policy outputs and values for the sub-steps of one (batched) env step."""

    policy_outputs: dict[StepKey, PolicySubStepOutput]
    """Per policy key: logits, distribution and embeddings."""

    values: dict[StepKey, torch.Tensor]
    """Per policy key: the state value (batch-shaped)."""


class TorchActorCritic(Policy, TorchModel):
    """Bundles a policy and a critic: one state dict, one device, one train/eval switch.

    :param policy: The policy.
    :param critic: A state critic or a state-action critic.
    :param device: Device of both.
    """

    def __init__(self, policy: TorchPolicy, critic: TorchStateCritic | TorchStateActionCritic | None,
                 device: str | torch.device = "cpu"):
        self.policy = policy
        self.critic = critic
        TorchModel.__init__(self, device)
        self.to(device)

    def _modules(self) -> dict[str, nn.Module]:
        mods = dict(self.policy._modules())
        if self.critic is not None:
            mods.update(self.critic._modules())
        return mods

    def to(self, device: str | torch.device) -> TorchActorCritic:
        """Move policy and critic to ``device``."""
        TorchModel.to(self, device)
        self.policy.to(device)
        if self.critic is not None:
            self.critic.to(device)
        return self

    def parameters(self) -> list[nn.Parameter]:
        """Policy and critic parameters (shared embedding weights counted once; critic targets excluded)."""
        seen: set[int] = set()
        out = []
        for p in [*self.policy.parameters(), *(self.critic.parameters() if self.critic is not None else [])]:
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
        return out

    def state_dict(self) -> dict[str, Any]:
        """Policy and critic weights in one flat dict (``policy_<key>``, ``critic_<key>``...)."""
        state = self.policy.state_dict()
        if self.critic is not None:
            state.update(self.critic.state_dict())
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Load policy and critic weights."""
        self.policy.load_state_dict(state_dict, strict=strict)
        if self.critic is not None:
            self.critic.load_state_dict(state_dict, strict=strict)

    def compute_action(self, observation: Mapping[str, Any], actor_id: ActorID | StepKey | None = None,
                       maze_state: Any = None, env: Any = None, deterministic: bool = False) -> dict[str, Any]:
        """Act with the policy."""
        return self.policy.compute_action(observation, actor_id, maze_state, env, deterministic)

    def compute_top_action_candidates(self, observation: Mapping[str, Any], num_candidates: int | None,
                                      actor_id: ActorID | StepKey | None = None, maze_state: Any = None,
                                      env: Any = None) -> tuple[list[dict[str, Any]], list[float]]:
        """Delegates to the policy."""
        return self.policy.compute_top_action_candidates(observation, num_candidates, actor_id, maze_state, env)

    def seed(self, seed: int | None) -> None:
        """Seed the policy."""
        self.policy.seed(seed)

    def compute_actor_critic_output(self, observations: Mapping[StepKey | ActorID, Mapping[str, torch.Tensor]],
                                    temperature: float = 1.0) -> ActorCriticOutput:
        """Policy outputs and state values for batched observations of each sub-step (in sub-step order).

        Where the policy networks output shared embeddings, the critic gets those instead of the observations.
        """
        if not isinstance(self.critic, TorchStateCritic):
            raise TypeError("compute_actor_critic_output needs a state critic; use the state-action critic's "
                            "predict_q_values for Q critics")
        outputs: dict[StepKey, PolicySubStepOutput] = {}
        critic_inputs: dict[StepKey, Mapping[str, torch.Tensor]] = {}
        for actor, obs in observations.items():
            out = self.policy.compute_substep_policy_output(obs, actor, temperature)
            step = out.actor_id.step_key
            outputs[step] = out
            critic_inputs[step] = out.embedding_logits if out.embedding_logits else obs
        return ActorCriticOutput(policy_outputs=outputs, values=self.critic.predict_values(critic_inputs))
