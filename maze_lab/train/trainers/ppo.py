"""PPO: several epochs of minibatch updates per rollout on the clipped surrogate objective."""

from __future__ import annotations

import math

import torch

from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.utils.yielding import give_way
from maze_lab.train.trainers.common.actor_critic import ActorCriticTrainer, KeyBatch
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
        self._record(ActorCriticEvents.clip_range, clip)
        n_minibatches = max(math.ceil(len(b) / cfg.batch_size) for b in batches.values())
        policy_coef = 0.0 if self.critic_burn_in else cfg.policy_loss_coef
        sums: dict[tuple[str, StepKey], float] = {}
        n_steps = 0
        kl_sum, clipped_sum = 0.0, 0.0
        for _ in range(cfg.n_optimization_epochs):
            # one shuffled copy per epoch; its minibatches are then cheap contiguous views
            shuffled = {k: b.select(torch.randperm(len(b), generator=self._generator)) for k, b in batches.items()}
            for m in range(n_minibatches):
                give_way()  # a background run in a kernel makes room for a running cell
                total = 0.0
                for key, batch in shuffled.items():
                    if m * cfg.batch_size >= len(batch):
                        continue
                    mb = batch.select(slice(m * cfg.batch_size, (m + 1) * cfg.batch_size))
                    log_prob, entropy, adv, values = self._forward(key, mb)
                    log_ratio = log_prob - mb.old_log_prob
                    ratio = log_ratio.exp()
                    policy_loss = -torch.min(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv).mean()
                    value_loss = (mb.returns - values).pow(2).mean()
                    self._check_finite({"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy})
                    total = total + policy_coef * policy_loss + cfg.value_loss_coef * value_loss \
                        - cfg.entropy_coef * entropy
                    with torch.no_grad():
                        kl_sum += float(((ratio - 1) - log_ratio).mean())
                        clipped_sum += float(((ratio - 1.0).abs() > clip).float().mean())
                    for name, t in (("policy_loss", policy_loss), ("entropy", entropy), ("value_loss", value_loss),
                                    ("value", values.mean())):
                        sums[(name, key)] = sums.get((name, key), 0.0) + float(t.detach())
                n_steps += 1
                last = n_steps == cfg.n_optimization_epochs * n_minibatches
                self._step(total, record_grad_norms=last)
        events = {"policy_loss": ActorCriticEvents.policy_loss, "entropy": ActorCriticEvents.policy_entropy,
                  "value_loss": ActorCriticEvents.critic_value_loss, "value": ActorCriticEvents.critic_value}
        for (name, key), total_value in sums.items():
            self._record(events[name], total_value / n_steps, key)
        n_terms = n_steps * len(batches)
        self._record(ActorCriticEvents.approx_kl, kl_sum / n_terms)
        self._record(ActorCriticEvents.clip_fraction, clipped_sum / n_terms)


MultiStepPPO = PPO
