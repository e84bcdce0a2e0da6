"""Algorithm configuration of evolution strategies (defaults as in Maze's es.yaml and es-dev.yaml; device cpu)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from maze_lab.train.trainers.common.config import AlgorithmConfigFields

DEFAULT_NOISE_TABLE_SIZE = 10_000_000
"""Floats in the shared noise table: 40 MB of float32 in every process (the main one and each worker). Maze's
100 million (400 MB a process) does not fit a laptop with a few workers; ten million still gives every
perturbation of a policy with up to a few hundred thousand parameters its own, nearly independent slice."""


@dataclass
class ESAlgorithmConfig(AlgorithmConfigFields):
    """Parameters of evolution strategies.

    An *update* is one ES iteration: antithetic pairs of episodes (the policy's parameters plus and minus a
    perturbation) until at least ``n_rollouts_per_update`` episodes and ``n_timesteps_per_update`` agent actions
    are done, then one Adam step on the flat parameters. An epoch is ``epoch_length`` updates (Maze: one).
    """

    n_epochs: int = 0
    """Number of epochs to train (0: until stopped or early-stopped)."""
    epoch_length: int = 1
    """ES iterations (updates) per epoch; Maze counts each iteration as an epoch."""
    patience: int = 0
    """Stop after this many epochs without a new best evaluation reward (0: never, as in Maze's ES)."""
    deterministic_eval: bool = True
    """Evaluate with the most likely action (the mean of a Gaussian, the argmax of a categorical)."""
    eval_repeats: int = 10
    """Episodes per evaluation (Maze's ``n_eval_rollouts``)."""
    n_rollouts_per_update: int = 10
    """Minimum number of episodes per update (rounded up to whole antithetic pairs)."""
    n_timesteps_per_update: int = 0
    """Minimum number of agent actions per update; the update ends when both minimums are reached."""
    max_steps: int = 0
    """Cut every training episode after this many agent actions (0: let the env end it)."""
    step_size: float = 0.01
    """Adam's step size on the flat parameters."""
    l2_penalty: float = 0.005
    """Weight decay: this multiple of the parameters is added to the (negated) gradient estimate."""
    noise_stddev: float = 0.02
    """sigma: the scale of the parameter perturbations."""
    shared_noise_table_size: int = DEFAULT_NOISE_TABLE_SIZE
    """Floats in the deterministic noise table every process builds from the seed (see
    :data:`DEFAULT_NOISE_TABLE_SIZE`; Maze's default is 100 million)."""
    deterministic_rollouts: bool = True
    """Training episodes act with the most likely action: the perturbations alone explore, so the two episodes
    of a pair differ only by the sign of the perturbation."""
    device: str = "cpu"
    """Where the main process keeps the flat parameters and Adam (the workers act on the cpu)."""
    seed: int | None = None
    """Seeds the noise table, the perturbations and the training episodes' env seeds (None: a random seed)."""
    extra: dict[str, Any] | None = None
    """Free-form settings stored with the run but not used by the trainer."""

    def __post_init__(self) -> None:
        problems = []
        for name in ("epoch_length", "eval_repeats", "shared_noise_table_size"):
            if int(getattr(self, name)) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("n_epochs", "patience", "n_rollouts_per_update", "n_timesteps_per_update", "max_steps"):
            if int(getattr(self, name)) < 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if int(self.n_rollouts_per_update) < 1 and int(self.n_timesteps_per_update) < 1:
            problems.append("n_rollouts_per_update or n_timesteps_per_update must be >= 1 (an update needs at least "
                            f"one episode), got {self.n_rollouts_per_update} and {self.n_timesteps_per_update}")
        for name in ("step_size", "noise_stddev"):
            if not float(getattr(self, name)) > 0.0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if float(self.l2_penalty) < 0:
            problems.append(f"l2_penalty must be >= 0, got {self.l2_penalty}")
        if problems:
            raise ValueError(f"{type(self).__name__}: " + "; ".join(problems))
