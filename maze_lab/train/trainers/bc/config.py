"""Algorithm configuration of behavioural cloning (defaults as in Maze's bc.yaml, device cpu)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BCAlgorithmConfig:
    """Parameters of behavioural cloning."""

    n_epochs: int = 1000
    """Passes over the training data (0: until stopped)."""
    eval_every_k_iterations: int | None = 500
    """Also evaluate every k updates (minibatches); None: only at the end of each epoch."""
    n_eval_episodes: int = 10
    """Episodes per evaluation rollout (when the trainer builds its evaluator from ``eval_env_factory``)."""
    optimizer: str = "torch.optim.Adam"
    """Dotted path of the torch optimizer class."""
    lr: float = 0.001
    """Learning rate of the optimizer."""
    device: str = "cpu"
    """Device to train on."""
    batch_size: int = 100
    """Samples per update (per policy key)."""
    n_eval_workers: int = 4
    """Envs of the evaluation vector env (when the trainer builds it)."""
    validation_percentage: float = 20.0
    """Share of the episodes (in percent) held out for validation."""
    seed: int | None = None
    """Seeds the train/validation split, the minibatch order and torch; None: unseeded."""
    deterministic_eval: bool = True
    """Evaluate with the most likely action (the cloned behaviour) instead of sampling."""

    def __post_init__(self) -> None:
        if not isinstance(self.n_epochs, int) or self.n_epochs < 0:
            raise ValueError(f"BCAlgorithmConfig.n_epochs must be an int >= 0, got {self.n_epochs!r}")
        if self.eval_every_k_iterations is not None and self.eval_every_k_iterations < 1:
            raise ValueError("BCAlgorithmConfig.eval_every_k_iterations must be >= 1 or None, "
                             f"got {self.eval_every_k_iterations!r}")
        if self.n_eval_episodes < 1:
            raise ValueError(f"BCAlgorithmConfig.n_eval_episodes must be >= 1, got {self.n_eval_episodes!r}")
        if self.batch_size < 1:
            raise ValueError(f"BCAlgorithmConfig.batch_size must be >= 1, got {self.batch_size!r}")
        if not 0 <= self.validation_percentage < 100:
            raise ValueError("BCAlgorithmConfig.validation_percentage must be in [0, 100), "
                             f"got {self.validation_percentage!r}")
        if not self.lr > 0:
            raise ValueError(f"BCAlgorithmConfig.lr must be > 0, got {self.lr!r}")
