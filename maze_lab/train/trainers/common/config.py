"""Algorithm configurations of the actor-critic trainers (defaults as in Maze's a2c.yaml / ppo.yaml)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from maze_lab.train.trainers.common.schedules import Schedule

BOUNDED_BOX_KEYS = ("epoch_length", "critic_burn_in_epochs", "n_rollout_steps", "lr", "gamma", "gae_lambda",
                    "policy_loss_coef", "value_loss_coef", "entropy_coef", "max_grad_norm", "normalize_advantages",
                    "batch_size", "n_optimization_epochs", "clip_range")
"""The parameters a ``bounded_box`` block may set (evaluation, stopping and seeding stay as configured)."""

PPO_BOUNDED_BOX_DEFAULTS: dict[str, Any] = {
    "gamma": 0.9, "gae_lambda": 0.95, "lr": 0.002, "entropy_coef": 0.0, "max_grad_norm": 0.5,
    "n_rollout_steps": 1024, "batch_size": 64, "n_optimization_epochs": 10, "epoch_length": 2,
}
"""PPO's values for continuous control with bounded Box actions: the RL Zoo's Pendulum-v1 settings without gSDE,
with twice the learning rate (the default runner's 2 envs give half the Zoo's 4,096 samples per update)."""


class AlgorithmConfigFields:
    """What every algorithm config (a dataclass) offers the run layer: its parameter names, and building it from a
    dict that names only valid ones."""

    @classmethod
    def field_names(cls) -> list[str]:
        """Names of all parameters."""
        return [f.name for f in fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Any:
        """Build from a dict; unknown keys raise an error listing the valid ones."""
        unknown = sorted(set(values) - set(cls.field_names()))
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown parameter(s) {unknown}; valid: {cls.field_names()}")
        return cls(**values)


@dataclass
class ActorCriticAlgorithmConfig(AlgorithmConfigFields):
    """Parameters shared by A2C and PPO."""

    n_epochs: int = 0
    """Number of epochs to train (0: until stopped or early-stopped)."""
    epoch_length: int = 25
    """Updates per epoch."""
    deterministic_eval: bool = False
    """Evaluate with the most likely action instead of sampling."""
    eval_repeats: int = 2
    """Episodes per evaluation (when the trainer builds its own evaluator)."""
    patience: int = 15
    """Stop after this many epochs without a new best evaluation reward."""
    critic_burn_in_epochs: int = 0
    """Epochs in which only the critic is trained."""
    n_rollout_steps: int = 100
    """Agent actions (sub-steps) per env in each rollout."""
    lr: float | Schedule = 0.0005
    """Learning rate, or a schedule over training progress."""
    gamma: float = 0.98
    """Discount factor."""
    gae_lambda: float = 1.0
    """Bias/variance trade-off of the generalized advantage estimator."""
    policy_loss_coef: float = 1.0
    """Weight of the policy loss."""
    value_loss_coef: float = 0.5
    """Weight of the value loss."""
    entropy_coef: float = 0.00025
    """Weight of the entropy bonus."""
    max_grad_norm: float = 0.0
    """Clip the global gradient norm to this value (0: no clipping)."""
    device: str = "cpu"
    """``cpu`` or ``cuda``."""
    rollout_evaluator: Any = None
    """An evaluator (e.g. RolloutEvaluator) run after each epoch; None for no evaluation."""
    normalize_advantages: bool = False
    """Normalize advantages per (mini)batch to zero mean and unit std."""
    seed: int | None = None
    """Seed of torch's generator for action sampling and minibatch order (None: leave unseeded)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form settings that are stored with the run but not used by the trainer."""
    bounded_box: dict[str, Any] | None = field(default_factory=dict)
    """Values that replace the generic defaults above when every action head of the env is a bounded Box
    (continuous control such as Pendulum-v1); a parameter set to anything but its generic default keeps your value.
    Empty or None: the values above for every action space."""

    def __post_init__(self) -> None:
        problems = []
        for name in ("epoch_length", "n_rollout_steps"):
            if int(getattr(self, name)) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.gamma <= 1.0:
            problems.append(f"gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 <= self.gae_lambda <= 1.0:
            problems.append(f"gae_lambda must be in [0, 1], got {self.gae_lambda}")
        if self.max_grad_norm < 0:
            problems.append(f"max_grad_norm must be >= 0 (0 disables clipping), got {self.max_grad_norm}")
        if self.bounded_box is not None and not isinstance(self.bounded_box, Mapping):
            problems.append(f"bounded_box must be a dict of parameters (or None), got {self.bounded_box!r}")
        elif self.bounded_box:
            unknown = sorted(set(self.bounded_box) - set(self._bounded_box_keys()))
            if unknown:
                problems.append(f"bounded_box: unknown parameter(s) {unknown}; valid: {list(self._bounded_box_keys())}")
        if problems:
            raise ValueError(f"{type(self).__name__}: " + "; ".join(problems))
        if self.bounded_box:
            try:  # the values themselves must make a valid config
                dataclasses.replace(self, **self.bounded_box, bounded_box=None)
            except (TypeError, ValueError) as err:
                raise ValueError(f"{type(self).__name__}.bounded_box: {err}") from err

    @classmethod
    def _bounded_box_keys(cls) -> tuple[str, ...]:
        names = set(cls.field_names())
        return tuple(k for k in BOUNDED_BOX_KEYS if k in names)

    def for_bounded_box_actions(self) -> tuple[ActorCriticAlgorithmConfig, dict[str, Any]]:
        """This config with the ``bounded_box`` values applied, and the parameters that changed (name -> value).

        A parameter keeps its value where it differs from the class's generic default: it was set on purpose (by
        you, an experiment file or the algorithm file) and wins over the bounded-Box value.
        """
        defaults = {f.name: f.default for f in fields(self) if f.default is not dataclasses.MISSING}
        changes = {k: v for k, v in (self.bounded_box or {}).items()
                   if k in defaults and _same(getattr(self, k), defaults[k]) and not _same(v, defaults[k])}
        if not changes:
            return self, {}
        return dataclasses.replace(self, **changes), changes



def _same(a: Any, b: Any) -> bool:
    """Equal values of the same kind (1e-3 and 0.001 are the same, True and 1 are not)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


@dataclass
class A2CAlgorithmConfig(ActorCriticAlgorithmConfig):
    """A2C: one gradient step per rollout."""


@dataclass
class PPOAlgorithmConfig(ActorCriticAlgorithmConfig):
    """PPO: several epochs of minibatch updates per rollout on the clipped surrogate objective."""

    lr: float | Schedule = 0.00025
    """Learning rate, or a schedule."""
    batch_size: int = 100
    """Minibatch size (samples per policy key)."""
    n_optimization_epochs: int = 4
    """Passes over each rollout."""
    clip_range: float | Schedule = 0.2
    """Clipping parameter of the surrogate loss, or a schedule."""
    normalize_advantages: bool = True
    """Normalize advantages per minibatch."""
    bounded_box: dict[str, Any] | None = field(default_factory=lambda: dict(PPO_BOUNDED_BOX_DEFAULTS))
    """Values that replace the generic defaults above when every action head of the env is a bounded Box
    (continuous control such as Pendulum-v1): :data:`PPO_BOUNDED_BOX_DEFAULTS`. A parameter set to anything but its
    generic default keeps your value. Empty or None: the values above for every action space."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size < 1 or self.n_optimization_epochs < 1:
            raise ValueError(f"PPOAlgorithmConfig: batch_size and n_optimization_epochs must be >= 1, got "
                             f"{self.batch_size} and {self.n_optimization_epochs}")
