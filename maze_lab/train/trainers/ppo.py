"""PPO: several epochs of minibatch updates per rollout on the clipped surrogate objective."""

from __future__ import annotations

import math

import torch

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.utils.yielding import give_way
from maze_lab.train.trainers.common.actor_critic import ActorCriticTrainer, KeyBatch, LossMeans
from maze_lab.train.trainers.common.config import PPOAlgorithmConfig
from maze_lab.train.trainers.common.events import ActorCriticEvents
from maze_lab.train.trainers.common.schedules import as_schedule

__all__ = ["PPO", "PPOAlgorithmConfig", "MultiStepPPO"]


class PPO(ActorCriticTrainer):
    """Proximal policy optimization on flat and structured envs."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.clip_schedule = as_schedule(self.config.clip_range)

    def update(self, batches: dict[StepKey, KeyBatch]) -> None:
        """For each optimization epoch, shuffle every key's samples into minibatches; one gradient step per
        minibatch index sums the losses of all policy keys."""
        cfg = self.config
        clip = self.clip_schedule.value(self._progress())
        policy_coef = 0.0 if self.critic_burn_in else cfg.policy_loss_coef
        n_minibatches = max(math.ceil(len(b) / cfg.batch_size) for b in batches.values())
        n_steps = cfg.n_optimization_epochs * n_minibatches
        means = LossMeans()
        for epoch in range(cfg.n_optimization_epochs):
            # one shuffled copy per epoch; its minibatches are then cheap contiguous views
            shuffled = {k: b.select(torch.randperm(len(b), generator=self._generator)) for k, b in batches.items()}
            for m in range(n_minibatches):
                give_way()  # a background run in a kernel makes room for a running cell
                loss = 0.0
                for key, batch in shuffled.items():
                    if m * cfg.batch_size >= len(batch):
                        continue
                    mb = batch.select(slice(m * cfg.batch_size, (m + 1) * cfg.batch_size))
                    log_prob, entropy, values = self._log_prob_entropy_values(key, mb)
                    adv = mb.advantages
                    if cfg.normalize_advantages and len(adv) > 1:
                        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                    log_ratio = log_prob - mb.old_log_prob
                    ratio = log_ratio.exp()
                    policy_loss = -torch.min(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv).mean()
                    value_loss = (mb.returns - values).pow(2).mean()
                    with torch.no_grad():  # the statistics of the step, in one line; NaN or inf loss terms: diverged
                        means.add(self, key, policy_loss, entropy, value_loss, values.mean(),
                                  approx_kl=((ratio - 1) - log_ratio).mean(),
                                  clip_fraction=((ratio - 1.0).abs() > clip).float().mean())
                    loss = loss + policy_coef * policy_loss + cfg.value_loss_coef * value_loss \
                        - cfg.entropy_coef * entropy
                give_way()
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                give_way()
                if epoch == cfg.n_optimization_epochs - 1 and m == n_minibatches - 1:
                    self._record_grad_norms()  # of the last step, before clipping: the norms the loss produced
                if cfg.max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(self.parameters, cfg.max_grad_norm)
                self.optimizer.step()
        means.record(self, n_steps)
        self._record(ActorCriticEvents.clip_range, clip)
        self._record(ActorCriticEvents.approx_kl, means.extra_sum("approx_kl") / (n_steps * len(batches)))
        self._record(ActorCriticEvents.clip_fraction, means.extra_sum("clip_fraction") / (n_steps * len(batches)))


MultiStepPPO = PPO
