"""A2C: one gradient step on policy-gradient, value and entropy losses per rollout."""

from __future__ import annotations

from maze_lab.core.env.structured_env import StepKey
from maze_lab.train.trainers.common.actor_critic import ActorCriticTrainer, KeyBatch
from maze_lab.train.trainers.common.config import A2CAlgorithmConfig
from maze_lab.train.trainers.common.events import ActorCriticEvents

__all__ = ["A2C", "A2CAlgorithmConfig", "MultiStepA2C"]


class A2C(ActorCriticTrainer):
    """Synchronous advantage actor-critic on flat and structured envs."""

    def update(self, batches: dict[StepKey, KeyBatch]) -> None:
        """loss = policy_coef * -(log_prob * advantage) + value_coef * (return - value)^2 - entropy_coef * H."""
        cfg = self.config
        total = 0.0
        for key, batch in batches.items():
            log_prob, entropy, adv, values = self._forward(key, batch)
            policy_loss = -(log_prob * adv).mean()
            value_loss = (batch.returns - values).pow(2).mean()
            self._check_finite({"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy})
            policy_coef = 0.0 if self.critic_burn_in else cfg.policy_loss_coef
            total = total + policy_coef * policy_loss + cfg.value_loss_coef * value_loss - cfg.entropy_coef * entropy
            self._record(ActorCriticEvents.policy_loss, policy_loss.item(), key)
            self._record(ActorCriticEvents.policy_entropy, entropy.item(), key)
            self._record(ActorCriticEvents.critic_value, values.mean().item(), key)
            self._record(ActorCriticEvents.critic_value_loss, value_loss.item(), key)
        self._step(total, record_grad_norms=True)


MultiStepA2C = A2C
