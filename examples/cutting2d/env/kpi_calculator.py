"""KPIs of a Cutting-2D episode, computed from its event log."""

from __future__ import annotations

from typing import Any

from maze_lab.core.env.interfaces import KpiCalculator

from .events import InventoryEvents


class Cutting2DKpiCalculator(KpiCalculator):
    """``raw_piece_usage_per_step``: raw pieces brought into the inventory per env step (lower is better).

    The raw piece put into the inventory at reset counts, so a perfect episode of the simple problem
    (six orders per raw piece, 180 steps) uses 31 raw pieces: 31 / 180 per step.
    """

    def calculate_kpis(self, episode_event_log: Any, last_maze_state: Any) -> dict[str, float]:
        """KPI name -> value for the finished episode."""
        n_steps = len(episode_event_log.step_event_logs)
        used = len(episode_event_log.query_events(InventoryEvents.piece_replenished))
        return {"raw_piece_usage_per_step": used / n_steps if n_steps else 0.0}
