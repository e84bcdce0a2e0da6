"""Divergence that stays finite: a policy whose entropy collapsed while its critic's value loss exploded.

The rule, checked per policy key after every epoch of an actor-critic trainer:

* the policy collapsed: the epoch's mean policy entropy lost at least 90% of the first epoch's magnitude, i.e.
  ``entropy <= start - 0.9 * abs(start)`` (for a categorical policy: below a tenth of its start value), and
* the value loss exploded: the epoch's mean critic value loss is more than 100 times the median of the value
  losses of the first 3 epochs (checked from epoch 4 on).

Both must hold: a policy may rightly become near-deterministic, and a value loss may grow with the returns of a
learning agent; a near-deterministic policy whose critic no longer predicts its returns has diverged. The
baseline is taken by each trainer object from the epochs it trained itself (a resumed run takes a new one).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

ENTROPY_DROP = 0.9
"""The share of the first epoch's entropy magnitude a policy must lose to count as collapsed."""

VALUE_LOSS_FACTOR = 100.0
"""How many times the baseline value loss counts as exploded."""

BASELINE_EPOCHS = 3
"""The first epochs whose median value loss is the baseline."""


@dataclass
class DivergenceMonitor:
    """Applies the rule of this module to the per-epoch entropies and value losses of each policy key."""

    entropy_start: dict[Any, float] = field(default_factory=dict)
    baseline_losses: dict[Any, list[float]] = field(default_factory=dict)
    warned: set = field(default_factory=set)

    def check(self, epoch: int, entropies: dict[Any, float], value_losses: dict[Any, float]) -> dict[Any, str]:
        """The policy keys that diverged in ``epoch``, each with a message saying why and what to try.

        :param entropies: policy key -> mean policy entropy of the epoch.
        :param value_losses: policy key -> mean critic value loss of the epoch.
        """
        diverged: dict[Any, str] = {}
        for key, entropy in entropies.items():
            start = self.entropy_start.setdefault(key, entropy)
            loss = value_losses.get(key)
            if loss is None:
                continue
            baseline = self.baseline_losses.setdefault(key, [])
            if len(baseline) < BASELINE_EPOCHS:
                baseline.append(loss)
                continue
            reference = statistics.median(baseline)
            collapsed = entropy <= start - ENTROPY_DROP * abs(start)
            exploded = loss > VALUE_LOSS_FACTOR * max(reference, 1e-12)
            if collapsed and exploded:
                diverged[key] = (
                    f"epoch {epoch}, policy key {key!r}: the policy collapsed (entropy {entropy:.4g}, first epoch "
                    f"{start:.4g}) while the value loss exploded ({loss:.4g}, over {VALUE_LOSS_FACTOR:g}x the median "
                    f"{reference:.4g} of epochs 1-{BASELINE_EPOCHS}); the run has diverged though its losses are "
                    f"finite: lower the learning rate, scale or normalize the rewards, or raise entropy_coef"
                )
        return diverged
