"""Algorithm configuration of Soft Actor-Critic (defaults as in Maze's sac.yaml; device cpu)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from maze_lab.train.trainers.common.config import AlgorithmConfigFields


@dataclass
class SACAlgorithmConfig(AlgorithmConfigFields):
    """Parameters of SAC and SAC from demonstrations.

    An *update* collects ``n_rollout_steps`` agent actions in every training env into the replay buffer, then takes
    ``num_batches_per_iter`` gradient steps on batches sampled from it; an epoch is ``epoch_length`` updates.
    """

    n_epochs: int = 0
    """Number of epochs to train (0: until stopped or early-stopped)."""
    epoch_length: int = 100
    """Updates per epoch."""
    patience: int = 50
    """Stop after this many epochs without a new best evaluation reward (0: never)."""
    deterministic_eval: bool = True
    """Evaluate with the most likely action (the mean of a Gaussian, the argmax of a categorical)."""
    eval_repeats: int = 8
    """Episodes per evaluation."""
    n_rollout_steps: int = 1
    """Agent actions per training env collected in each update."""
    lr: float = 0.001
    """Learning rate of the policy and the Q networks."""
    entropy_coef: float = 0.2
    """The entropy coefficient alpha (its start value where ``entropy_tuning`` learns it)."""
    gamma: float = 0.99
    """Discount factor."""
    max_grad_norm: float = 0.0
    """Clip each network's global gradient norm to this value (0: no clipping)."""
    batch_size: int = 100
    """Transitions per gradient step."""
    num_batches_per_iter: int = 1
    """Gradient steps per update."""
    tau: float = 0.005
    """Weight of the online Q networks in the soft (Polyak) update of the target networks."""
    target_update_interval: int = 1
    """Gradient steps between two target updates."""
    device: str = "cpu"
    """``cpu`` or ``cuda``."""
    entropy_tuning: bool = True
    """Learn alpha so that the policy's entropy tracks the target entropy."""
    target_entropy_multiplier: float = 1.0
    """Scales the target entropy: -dim(A) for Box actions scaled to [-1, 1] (expressed in the env's action units),
    0.98 log|A| per Discrete head (the maximum is log|A|)."""
    entropy_coef_lr: float = 0.0007
    """Learning rate of alpha."""
    replay_buffer_size: int = 1_000_000
    """Transitions the replay buffer holds; the oldest are overwritten."""
    initial_buffer_size: int = 10_000
    """Transitions collected before the first gradient step, with uniformly random actions (SAC) or loaded from
    ``demonstrations`` (SACfD)."""
    demonstrations: str | None = None
    """SACfD: a directory of recorded episodes (``*.trajectory.zip``) whose transitions start the replay buffer."""
    from_demonstrations: bool = False
    """SACfD: ``demonstrations`` must be given (``algorithm=sacfd`` sets this)."""
    checkpoint_replay_buffer: bool = False
    """Keep the replay buffer in ``state_dict_last.pt`` (its size grows the file: about 40 bytes per transition for
    Pendulum), so that a resumed run goes on with the same transitions instead of refilling
    ``initial_buffer_size`` with the resumed policy's actions."""
    seed: int | None = None
    """Seeds torch, the replay sampling and the random initial actions (None: unseeded)."""
    extra: dict[str, Any] | None = None
    """Free-form settings stored with the run but not used by the trainer."""

    def __post_init__(self) -> None:
        if self.from_demonstrations and not self.demonstrations:
            raise ValueError("SAC from demonstrations (algorithm=sacfd) needs the directory of recorded episodes: "
                             "algorithm.demonstrations=<dir with *.trajectory.zip>, e.g. a run's trajectories/")
        problems = []
        for name in ("epoch_length", "n_rollout_steps", "batch_size", "num_batches_per_iter",
                     "target_update_interval", "replay_buffer_size", "eval_repeats"):
            if int(getattr(self, name)) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if int(self.n_epochs) < 0:
            problems.append(f"n_epochs must be >= 0 (0: until stopped), got {self.n_epochs}")
        if int(self.initial_buffer_size) < 0:
            problems.append(f"initial_buffer_size must be >= 0, got {self.initial_buffer_size}")
        elif int(self.initial_buffer_size) > int(self.replay_buffer_size):
            problems.append(f"initial_buffer_size ({self.initial_buffer_size}) must not exceed replay_buffer_size "
                            f"({self.replay_buffer_size})")
        if not 0.0 <= self.gamma <= 1.0:
            problems.append(f"gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            problems.append(f"tau must be in (0, 1], got {self.tau}")
        for name in ("lr", "entropy_coef_lr"):
            if not float(getattr(self, name)) > 0.0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if float(self.entropy_coef) < 0:
            problems.append(f"entropy_coef must be >= 0, got {self.entropy_coef}")
        if self.max_grad_norm < 0:
            problems.append(f"max_grad_norm must be >= 0 (0 disables clipping), got {self.max_grad_norm}")
        if problems:
            raise ValueError(f"{type(self).__name__}: " + "; ".join(problems))
