"""A2C: one gradient step on policy-gradient, value and entropy losses per rollout."""

from __future__ import annotations

import torch

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.utils.yielding import give_way
from maze_lab.train.trainers.common.actor_critic import ActorCriticTrainer, KeyBatch, LossMeans
from maze_lab.train.trainers.common.config import A2CAlgorithmConfig

__all__ = ["A2C", "A2CAlgorithmConfig", "MultiStepA2C"]


class A2C(ActorCriticTrainer):
    """Synchronous advantage actor-critic on flat and structured envs."""

    def update(self, batches: dict[StepKey, KeyBatch]) -> None:
        """loss = policy_coef * -(log_prob * advantage) + value_coef * (return - value)^2 - entropy_coef * H, summed
        over the policy keys, in one gradient step."""
        cfg = self.config
        policy_coef = 0.0 if self.critic_burn_in else cfg.policy_loss_coef
        means, loss = LossMeans(), 0.0
        for key, batch in batches.items():
            log_prob, entropy, values = self._log_prob_entropy_values(key, batch)
            adv = batch.advantages
            if cfg.normalize_advantages and len(adv) > 1:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            policy_loss = -(log_prob * adv).mean()
            value_loss = (batch.returns - values).pow(2).mean()
            means.add(self, key, policy_loss, entropy, value_loss, values.mean())  # NaN or inf: diverged
            loss = loss + policy_coef * policy_loss + cfg.value_loss_coef * value_loss - cfg.entropy_coef * entropy
        give_way()  # a background run in a kernel makes room for a running cell between the parts of the step
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        give_way()
        self._record_grad_norms()  # before clipping: the norms the loss produced
        if cfg.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.parameters, cfg.max_grad_norm)
        self.optimizer.step()
        means.record(self, n_steps=1)


MultiStepA2C = A2C
