"""Algorithm configuration of IMPALA (defaults as in Maze's impala.yaml; device cpu)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from maze_lab.train.trainers.common.config import AlgorithmConfigFields

REWARD_CLIPPINGS = ("None", "abs_one", "soft_asymmetric")
"""The values of ``reward_clipping``."""


@dataclass
class ImpalaAlgorithmConfig(AlgorithmConfigFields):
    """Parameters of IMPALA.

    Each *actor* is one env stepped with a copy of the policy in an actor process; an actor's rollout of
    ``n_rollout_steps`` agent actions is one trajectory. An *update* of the learner takes ``actors_batch_size``
    trajectories from the queue, computes their V-trace targets and takes one gradient step; an epoch is
    ``epoch_length`` updates.
    """

    n_epochs: int = 0
    """Number of epochs to train (0: until stopped or early-stopped)."""
    epoch_length: int = 25
    """Updates per epoch."""
    deterministic_eval: bool = False
    """Evaluate with the most likely action instead of sampling."""
    eval_repeats: int = 2
    """Episodes per evaluation."""
    patience: int = 15
    """Stop after this many epochs without a new best evaluation reward (0: never)."""
    queue_out_of_sync_factor: float = 1.0
    """The trajectory queue holds ``queue_out_of_sync_factor * actors_batch_size`` trajectories; actors wait while
    it is full. A larger queue keeps the actors busier but lets trajectories of older policies reach the learner."""
    n_rollout_steps: int = 100
    """Agent actions (sub-steps) in one actor's trajectory."""
    actors_batch_size: int = 8
    """Trajectories in one learner update."""
    num_actors: int = 8
    """Number of actors (envs); the run layer builds one env per actor."""
    actor_processes: int = 0
    """Processes the actors run in, the actors split evenly between them (0: one process per actor, as Maze does).
    Fewer processes than actors suit machines with few cores: an actor process steps its envs side by side."""
    lr: float = 0.0002
    """Learning rate."""
    gamma: float = 0.98
    """Discount factor."""
    policy_loss_coef: float = 1.0
    """Weight of the policy-gradient loss."""
    value_loss_coef: float = 0.5
    """Weight of the value loss."""
    entropy_coef: float = 0.00025
    """Weight of the entropy bonus."""
    max_grad_norm: float = 0.0
    """Clip the global gradient norm to this value (0: no clipping)."""
    vtrace_clip_rho_threshold: float | None = 1.0
    """rho-bar of the paper: the importance weights of the value targets are clipped to it (None: not clipped)."""
    vtrace_clip_pg_rho_threshold: float | None = 1.0
    """The clipping of the importance weights of the policy-gradient advantages (None: not clipped)."""
    reward_clipping: str = "None"
    """``None`` (rewards as they are), ``abs_one`` (clipped to [-1, 1]) or ``soft_asymmetric`` (squashed by tanh,
    negative rewards weighted less; the paper's Atari setting)."""
    device: str = "cpu"
    """Device of the learner (``cpu`` or ``cuda``); the actors always act on the CPU."""
    actor_start_timeout: float = 300.0
    """Seconds the learner waits for the first trajectory of a freshly started actor process (spawning a process
    imports torch and builds the envs), and for any further one, before it reports the actors as stuck."""
    seed: int | None = None
    """Seeds torch and the envs of the actors (actor i's envs with ``seed + i``); None: unseeded. The actors run
    asynchronously, so a seeded run is not reproducible step by step."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form settings stored with the run but not used by the trainer."""

    def __post_init__(self) -> None:
        problems = []
        for name in ("epoch_length", "n_rollout_steps", "actors_batch_size", "num_actors", "eval_repeats"):
            if int(getattr(self, name)) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if int(self.n_epochs) < 0:
            problems.append(f"n_epochs must be >= 0 (0: until stopped), got {self.n_epochs}")
        if int(self.actor_processes) < 0:
            problems.append(f"actor_processes must be >= 0 (0: one per actor), got {self.actor_processes}")
        if not float(self.queue_out_of_sync_factor) > 0:
            problems.append(f"queue_out_of_sync_factor must be > 0, got {self.queue_out_of_sync_factor}")
        if not 0.0 <= self.gamma <= 1.0:
            problems.append(f"gamma must be in [0, 1], got {self.gamma}")
        if not float(self.lr) > 0.0:
            problems.append(f"lr must be > 0, got {self.lr}")
        if self.max_grad_norm < 0:
            problems.append(f"max_grad_norm must be >= 0 (0 disables clipping), got {self.max_grad_norm}")
        for name in ("vtrace_clip_rho_threshold", "vtrace_clip_pg_rho_threshold"):
            value = getattr(self, name)
            if value is not None and not float(value) > 0:
                problems.append(f"{name} must be > 0 or None (no clipping), got {value}")
        if str(self.reward_clipping) not in REWARD_CLIPPINGS:
            problems.append(f"reward_clipping must be one of {list(REWARD_CLIPPINGS)}, got {self.reward_clipping!r}")
        if not float(self.actor_start_timeout) > 0:
            problems.append(f"actor_start_timeout must be > 0 seconds, got {self.actor_start_timeout}")
        if problems:
            raise ValueError(f"{type(self).__name__}: " + "; ".join(problems))

    @property
    def queue_size(self) -> int:
        """Trajectories the queue holds: ``queue_out_of_sync_factor * actors_batch_size``, at least 1."""
        return max(1, round(float(self.queue_out_of_sync_factor) * int(self.actors_batch_size)))
