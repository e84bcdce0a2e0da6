"""Event topics of the Cutting-2D env; the decorators say how each event becomes a statistic."""

from __future__ import annotations

from abc import ABC

import numpy as np

from maze_lab.core.log_stats.event_decorators import define_episode_stats, define_epoch_stats, define_step_stats


class CuttingEvents(ABC):
    """What happened to the cutting request of a step (exactly one of these per full step)."""

    @define_epoch_stats(np.mean, output_name="mean_episode_total")
    @define_episode_stats(sum)
    @define_step_stats(len)
    def invalid_piece_selected(self, piece_id: int, inventory_size: int):
        """The selected piece id does not point to a piece in the inventory."""

    @define_epoch_stats(np.mean, output_name="mean_episode_total")
    @define_episode_stats(sum)
    @define_step_stats(len)
    def valid_cut(self, current_demand: tuple[int, int], piece_to_cut: tuple[int, int],
                  raw_piece_size: tuple[int, int], cutting_area: float):
        """The order was cut from the selected piece (``cutting_area``: area of the delivered order)."""

    @define_epoch_stats(np.mean, output_name="mean_episode_total")
    @define_episode_stats(sum)
    @define_step_stats(len)
    def invalid_cut(self, current_demand: tuple[int, int], piece_to_cut: tuple[int, int],
                    raw_piece_size: tuple[int, int]):
        """The order does not fit into the selected piece in the requested orientation."""


class InventoryEvents(ABC):
    """Inventory management: discards, replenishments and the fill level."""

    @define_epoch_stats(np.mean, output_name="mean_episode_total")
    @define_episode_stats(sum)
    @define_step_stats(len)
    def piece_discarded(self, piece: tuple[int, int]):
        """The inventory was full; its oldest piece (``piece``) was thrown away to make room."""

    @define_epoch_stats(np.mean, input_name="step_mean", output_name="step_mean")
    @define_epoch_stats(max, input_name="step_max", output_name="step_max")
    @define_episode_stats(np.mean, output_name="step_mean")
    @define_episode_stats(max, output_name="step_max")
    @define_step_stats(None)
    def pieces_in_inventory(self, value: int):
        """Number of pieces in the inventory at the end of a step."""

    @define_epoch_stats(np.mean, output_name="mean_episode_total")
    @define_episode_stats(sum)
    @define_step_stats(len)
    def piece_replenished(self):
        """A fresh raw piece was put into the inventory (one raw piece used up)."""
