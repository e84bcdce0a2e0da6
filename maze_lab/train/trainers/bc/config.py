"""Algorithm configuration of behavioural cloning (defaults as in Maze's bc.yaml, device cpu)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from maze_lab.train.trainers.common.config import AlgorithmConfigFields


@dataclass
class BCAlgorithmConfig(AlgorithmConfigFields):
    """Parameters of behavioural cloning."""

    n_epochs: int = 1000
    """Passes over the training data (0: until stopped)."""
    eval_every_k_iterations: int | None = 500
    """Also evaluate every k updates (minibatches); None: only at the end of each epoch."""
    n_eval_episodes: int = 10
    """Episodes per evaluation rollout; 0: no rollouts, the best model is the one with the lowest validation loss."""
    optimizer: str = "torch.optim.Adam"
    """Dotted path of the torch optimizer class."""
    lr: float = 0.001
    """Learning rate of the optimizer."""
    device: str = "cpu"
    """Device to train on."""
    batch_size: int = 100
    """Samples per update (per policy key)."""
    n_eval_workers: int = 4
    """Envs of the evaluation vector env where a caller builds one from this config (runs use
    ``runner.eval_concurrency``)."""
    validation_percentage: float = 20.0
    """Share of the episodes (in percent) held out for validation."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus subtracted from the loss (0: plain maximum likelihood)."""
    seed: int | None = None
    """Seeds the train/validation split, the minibatch order and torch; None: unseeded."""
    deterministic_eval: bool = True
    """Evaluate with the most likely action (the cloned behaviour) instead of sampling."""
    dataset: str | None = None
    """Runs (``algorithm=bc``): the recorded episodes to clone, a directory of ``*.trajectory.zip`` files or a run
    directory (its ``trajectories/``, e.g. written by ``maze-lab rollout``). Python callers pass the dataset to
    :class:`~maze_lab.train.trainers.bc.BC` instead."""
    extra: dict[str, Any] | None = None
    """Free-form settings stored with the run but not used by the trainer."""

    @property
    def eval_repeats(self) -> int:
        """Episodes per evaluation under the name the run layer reads for every algorithm (at least one: a run keeps
        an evaluator for ``RunContext.evaluate`` also where the trainer evaluates by validation loss only)."""
        return max(1, self.n_eval_episodes)

    def __post_init__(self) -> None:
        if isinstance(self.n_epochs, bool) or not isinstance(self.n_epochs, int) or self.n_epochs < 0:
            raise ValueError(f"BCAlgorithmConfig.n_epochs must be an int >= 0, got {self.n_epochs!r}")
        if self.eval_every_k_iterations is not None and self.eval_every_k_iterations < 1:
            raise ValueError("BCAlgorithmConfig.eval_every_k_iterations must be >= 1 or None, "
                             f"got {self.eval_every_k_iterations!r}")
        if self.n_eval_episodes < 0:
            raise ValueError("BCAlgorithmConfig.n_eval_episodes must be >= 0 (0: validation loss only), "
                             f"got {self.n_eval_episodes!r}")
        if self.batch_size < 1:
            raise ValueError(f"BCAlgorithmConfig.batch_size must be >= 1, got {self.batch_size!r}")
        if not 0 <= self.validation_percentage < 100:
            raise ValueError("BCAlgorithmConfig.validation_percentage must be in [0, 100), "
                             f"got {self.validation_percentage!r}")
        if not self.lr > 0:
            raise ValueError(f"BCAlgorithmConfig.lr must be > 0, got {self.lr!r}")
        if self.entropy_coef < 0:
            raise ValueError(f"BCAlgorithmConfig.entropy_coef must be >= 0, got {self.entropy_coef!r}")
