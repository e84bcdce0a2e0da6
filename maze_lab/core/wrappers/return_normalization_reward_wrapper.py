"""ReturnNormalizationRewardWrapper: divides rewards by the running standard deviation of the discounted return."""

from __future__ import annotations

import math
from typing import Any

from maze_lab.core.wrappers.wrapper import RewardWrapper


class ReturnNormalizationRewardWrapper(RewardWrapper):
    """Scales each reward by ``1 / sqrt(var(G) + epsilon)``, where ``G_t = gamma * G_{t-1} + r_t``.

    ``var`` is the population variance of every discounted return seen so far (over all episodes, including
    the current step's); ``G`` restarts at 0 with every reset. This keeps value targets at a similar scale
    whatever the reward magnitude (as in PPO implementations).

    :param gamma: the discount factor of the return.
    :param epsilon: added to the variance for numerical stability.
    """

    def __init__(self, env: Any, gamma: float = 0.99, epsilon: float = 1e-8):
        super().__init__(env)
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        self.gamma = float(gamma)
        self.epsilon = float(epsilon)
        self.discounted_return = 0.0
        # Welford's running mean and sum of squared deviations of the discounted returns
        self.count = 0
        self.mean = 0.0
        self._m2 = 0.0

    @property
    def var(self) -> float:
        """Population variance of the discounted returns seen so far."""
        return self._m2 / self.count if self.count else 0.0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Reset the env and restart the discounted return."""
        self.discounted_return = 0.0
        return self.env.reset(seed=seed, options=options)

    def reward(self, reward: Any) -> float:
        """Update the return statistics and return the normalised reward."""
        reward = float(reward)
        self.discounted_return = self.gamma * self.discounted_return + reward
        self.count += 1
        delta = self.discounted_return - self.mean
        self.mean += delta / self.count
        self._m2 += delta * (self.discounted_return - self.mean)
        return reward / math.sqrt(self.var + self.epsilon)
