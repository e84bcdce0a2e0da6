"""The shared noise table of evolution strategies: one long vector of standard normal floats, generated from a
seed. Every process builds the same table from the same seed, so a perturbation travels between processes as one
integer (its offset into the table) instead of a vector as long as the policy."""

from __future__ import annotations

import numpy as np


class NoiseTable:
    """``size`` float32 draws of N(0, 1), the same in every process for the same ``seed``.

    :param seed: the seed of the generator (PCG64; numpy guarantees its stream across platforms).
    :param size: number of floats (4 bytes each).
    """

    def __init__(self, seed: int, size: int):
        if size < 1:
            raise ValueError(f"the noise table needs at least one float, got size={size}")
        self.seed = int(seed)
        self.size = int(size)
        self.noise = np.random.Generator(np.random.PCG64(self.seed)).standard_normal(self.size, dtype=np.float32)
        self.noise.flags.writeable = False  # a slice handed out must never change the table for later readers

    def get(self, offset: int, dim: int) -> np.ndarray:
        """The ``dim`` floats from ``offset`` on (a read-only view, no copy)."""
        if not 0 <= offset <= self.size - dim:
            raise IndexError(f"noise slice [{offset}, {offset + dim}) is outside the table of {self.size} floats")
        return self.noise[offset:offset + dim]

    def sample_offsets(self, rng: np.random.Generator, dim: int, n: int) -> np.ndarray:
        """``n`` random offsets of slices of length ``dim``."""
        self.check_fits(dim)
        return rng.integers(0, self.size - dim + 1, size=n)

    def check_fits(self, dim: int) -> None:
        """Raise if a perturbation of ``dim`` parameters does not fit into the table."""
        check_fits(dim, self.size)


def check_fits(dim: int, size: int) -> None:
    """Raise if a perturbation of ``dim`` parameters does not fit into a table of ``size`` floats."""
    if dim > size:
        raise ValueError(f"the policy has {dim} parameters but the shared noise table only {size} floats; set "
                         f"algorithm.shared_noise_table_size to at least {10 * dim} (ten times the parameter count "
                         "keeps the perturbations nearly independent)")
