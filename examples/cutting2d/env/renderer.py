"""Cutting2DRenderer: the requested cut on the left, the inventory on the right, as a matplotlib Figure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any
from weakref import WeakSet

import numpy as np
from matplotlib import rcParams
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from maze_lab.core.env.interfaces import Renderer

from .maze_state import Cutting2DMazeAction, Cutting2DMazeState

ORDER_COLOR = "#c0392b"
PIECE_COLOR = "#d5dbe1"
REMAIN_COLORS = ("#a9cce3", "#a3e4d7")
SELECT_COLOR = "#1f6fb2"
OK_COLOR = "#1e8449"
BAD_COLOR = "#c0392b"
_SHOWN_TOPICS = ("CuttingEvents", "InventoryEvents")
_FIGSIZE = (11.0, 5.4)
_TITLE_Y = 1.0
"""Panel titles sit on the axes' top edge, where matplotlib would put them (there are no ticks or labels on top);
giving it saves matplotlib measuring all tick labels to place them on every draw."""
_OWN_FIGURES: WeakSet[Figure] = WeakSet()
"""Figures made by :meth:`Cutting2DRenderer.render`: the ones :meth:`Cutting2DRenderer.redraw` may draw into."""


class Cutting2DRenderer(Renderer):
    """Draws one step: the maze_state is the state in which maze_action was taken (before the cut).

    Left: the selected piece with the order in its lower left corner, the two guillotine cuts (dashed,
    numbered in cutting order) and the remains that go back into the inventory. Right: all inventory
    pieces by (short side, long side) with the region of pieces that can fit the order shaded, the order
    and the selected piece highlighted. Uses no pyplot state, so it is safe in notebooks and threads.
    """

    def render(self, maze_state: Cutting2DMazeState, maze_action: Cutting2DMazeAction | None, events: Any = None,
               **kwargs: Any) -> Figure:
        """A new figure of the step; ``figsize`` and ``title`` are optional keyword arguments."""
        fig = Figure(figsize=kwargs.get("figsize", _FIGSIZE))
        fig.set_layout_engine("constrained", rect=(0.0, 0.05, 1.0, 0.95))  # room for the status line below
        fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.0, 1.1]})
        _OWN_FIGURES.add(fig)
        self._draw_step(fig, maze_state, maze_action, events, kwargs.get("title"))
        return fig

    def redraw(self, fig: Figure | None, maze_state: Cutting2DMazeState, maze_action: Cutting2DMazeAction | None,
               events: Any = None, **kwargs: Any) -> Figure:
        """The step drawn into ``fig``, a figure that :meth:`render` made, in place: the figure, its axes and their
        ticks stay, the step's own artists (pieces, cuts, markers, texts, legends) are replaced; the picture is the
        one :meth:`render` draws. Any other ``fig`` (or a different ``figsize``) gets a new figure.

        The step's artists come back animated (see :meth:`background_key`): ``savefig`` draws them as usual, a
        plain ``canvas.draw()`` leaves them out for the caller to draw on top of a kept background."""
        size = kwargs.get("figsize")
        if (fig is None or fig not in _OWN_FIGURES or len(fig.axes) != 2
                or (size is not None and tuple(fig.get_size_inches()) != tuple(size))):
            fig = self.render(maze_state, maze_action, events, **kwargs)
            self._mark_step_artists(fig)
            return fig
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is not None:
                legend.remove()
            for artist in [*ax.patches, *ax.lines, *ax.texts, *ax.collections]:
                artist.remove()
            # the last step's titles may carry its colour: start from the figure's default text colour
            ax.set_title("", loc="left", y=_TITLE_Y, color=rcParams["text.color"])
            ax.ignore_existing_data_limits = True  # the limits are set per step; forget the last step's data
        self._draw_step(fig, maze_state, maze_action, events, kwargs.get("title"))
        self._mark_step_artists(fig)
        return fig

    def background_key(self, fig: Figure) -> tuple:
        """What the figure's background (all but its animated artists, see :meth:`redraw`) depends on: the
        figure title and the panels' limits (their ticks, tick labels and grids follow from them)."""
        return (fig.get_suptitle(), *((ax.get_xlim(), ax.get_ylim()) for ax in fig.axes))

    @staticmethod
    def _mark_step_artists(fig: Figure) -> None:
        """Mark what changes from step to step animated: a viewer keeps a picture of the rest (figure title,
        axes backgrounds, ticks, labels, grids) and draws only these on top, in matplotlib's blitting way."""
        for ax in fig.axes:
            for artist in ax.get_children():
                # the axes background and the axes' ticks, labels and grids (below everything else) stay
                if artist is not ax.patch and artist is not ax.xaxis and artist is not ax.yaxis:
                    artist.set_animated(True)

    def _draw_step(self, fig: Figure, state: Cutting2DMazeState, action: Cutting2DMazeAction | None, events: Any,
                   title: str | None) -> None:
        """Draw a step into the two (empty) axes of ``fig``, with the title and the status line."""
        ax_cut, ax_inv = fig.axes
        status = self._draw_cut(ax_cut, state, action)
        self._draw_inventory(ax_inv, state, action)
        fig.suptitle(title or "Cutting 2D", fontsize=14, fontweight="bold", x=0.01, ha="left")
        names = self._event_names(events)
        footer = status if not names else f"{status}    events: {', '.join(names)}"
        # placed on the figure but owned by the left axes: matplotlib's savefig draws an axes' animated artists
        # (see redraw), not a figure's; out of the layout, which leaves room for it below
        ax_cut.text(0.01, 0.005, footer, fontsize=9, color="#444444", ha="left", va="bottom",
                    transform=fig.transFigure, in_layout=False)

    # --- left panel ----------------------------------------------------------------------------------
    def _draw_cut(self, ax: Any, state: Cutting2DMazeState, action: Cutting2DMazeAction | None) -> str:
        rx, ry = state.raw_piece_size
        dx, dy = state.current_demand
        n = len(state.inventory)
        pid = -1 if action is None else int(action.piece_id)
        valid_pid = 0 <= pid < n
        # zoom towards the selected piece so that small remains stay readable, but keep some context
        piece_side = int(max(state.inventory[pid])) if valid_pid else max(rx, ry)
        span = max(piece_side, 0.5 * max(rx, ry), dx, dy)
        pad = 0.05 * span
        ax.set_xlim(-pad, span + pad)
        ax.set_ylim(-pad, span + pad)
        ax.set_aspect("equal")
        ax.set_xlabel("x")
        ax.set_ylabel("y")
        self._integer_ticks(ax)
        ax.grid(True, color="#eeeeee", zorder=0)
        ax.set_axisbelow(True)
        if action is None:
            ax.add_patch(Rectangle((0, 0), dx, dy, fc=ORDER_COLOR, ec="black", alpha=0.85, zorder=3,
                                   label=f"order {dx}×{dy}"))
            ax.set_title(f"Order {dx}×{dy}: no action", loc="left", fontsize=12, y=_TITLE_Y)
            self._legend_below(ax)
            return "no action"

        if not valid_pid:
            ax.add_patch(Rectangle((0, 0), dx, dy, fc=ORDER_COLOR, ec="black", alpha=0.85, zorder=3,
                                   label=f"order {dx}×{dy}"))
            held = f"{n} piece" + ("" if n == 1 else "s")
            ax.text(0.5, 0.8, f"piece #{pid} does not exist\n(the inventory holds {held})", transform=ax.transAxes,
                    ha="center", va="center", fontsize=12, color=BAD_COLOR, fontweight="bold", zorder=5,
                    bbox={"boxstyle": "round,pad=0.4", "fc": "white", "ec": BAD_COLOR})
            ax.set_title(f"Order {dx}×{dy} from piece #{pid}: invalid piece", loc="left", fontsize=12, y=_TITLE_Y,
                         color=BAD_COLOR)
            self._legend_below(ax)
            return f"invalid piece selection #{pid}"

        px, py = (int(v) for v in state.inventory[pid])
        ox, oy = (dy, dx) if action.rotate else (dx, dy)
        fits = ox <= px and oy <= py
        ax.add_patch(Rectangle((0, 0), px, py, fc=PIECE_COLOR, ec="#34495e", lw=1.5, zorder=2,
                               label=f"selected piece #{pid}: {px}×{py}"))
        orient = "rotated" if action.rotate else "as ordered"
        if not fits:
            ax.add_patch(Rectangle((0, 0), ox, oy, fc=ORDER_COLOR, ec=BAD_COLOR, lw=2, alpha=0.45, hatch="//",
                                   zorder=3, label=f"order {ox}×{oy} ({orient})"))
            ax.set_title(f"Order {dx}×{dy} does not fit piece #{pid}", loc="left", fontsize=12, y=_TITLE_Y,
                         color=BAD_COLOR)
            self._legend_below(ax)
            return f"invalid cut: order {ox}×{oy} ({orient}) does not fit piece #{pid} {px}×{py}"

        if action.reverse_cutting_order:  # y first: horizontal cut across the piece, then vertical in the bottom strip
            remains = [((0, oy), (px, py - oy)), ((ox, 0), (px - ox, oy))]
            cuts = [((0, px), (oy, oy)), ((ox, ox), (0, oy))]
        else:  # x first: vertical cut over the full height, then horizontal in the left strip
            remains = [((ox, 0), (px - ox, py)), ((0, oy), (ox, py - oy))]
            cuts = [((ox, ox), (0, py)), ((0, ox), (oy, oy))]
        labelled = False
        for i, ((x0, y0), (w, h)) in enumerate(remains):
            if w <= 0 or h <= 0:
                continue
            ax.add_patch(Rectangle((x0, y0), w, h, fc=REMAIN_COLORS[i], ec="#34495e", lw=1.0, zorder=2,
                                   label=None if labelled else "remains (back into the inventory)"))
            labelled = True
            if min(w, h) >= 0.12 * span:
                ax.text(x0 + w / 2, y0 + h / 2, f"{w}×{h}", ha="center", va="center", fontsize=9, color="#1b2631",
                        zorder=4)
        ax.add_patch(Rectangle((0, 0), ox, oy, fc=ORDER_COLOR, ec="black", lw=1.0, alpha=0.9, zorder=3,
                               label=f"order {ox}×{oy} ({orient})"))
        if min(ox, oy) >= 0.12 * span:
            ax.text(ox / 2, oy / 2, f"{ox}×{oy}", ha="center", va="center", fontsize=9, color="white",
                    fontweight="bold", zorder=4)
        k = 0
        for xs, ys in cuts:
            if xs[0] == xs[1] and (xs[0] <= 0 or xs[0] >= px):
                continue  # a cut along the piece border removes nothing
            if ys[0] == ys[1] and (ys[0] <= 0 or ys[0] >= py):
                continue
            k += 1
            ax.plot(xs, ys, color="black", ls="--", lw=2.0, zorder=5)
            # number the cut near its start, away from the size labels in the middle of the regions
            mx, my = xs[0] + 0.12 * (xs[1] - xs[0]), ys[0] + 0.12 * (ys[1] - ys[0])
            ax.annotate(str(k), (mx, my), fontsize=9, fontweight="bold", ha="center", va="center", zorder=6,
                        bbox={"boxstyle": "circle,pad=0.2", "fc": "white", "ec": "black", "lw": 1.0})
        order_txt = "y first" if action.reverse_cutting_order else "x first"
        ax.set_title(f"Cut {dx}×{dy} from piece #{pid} ({orient}, {order_txt})", loc="left", fontsize=12,
                     y=_TITLE_Y)
        self._legend_below(ax)
        raw = (px, py) == (rx, ry)
        return f"valid cut from piece #{pid} {px}×{py}" + (" (a raw piece: a new one is replenished)" if raw else "")

    # --- right panel -----------------------------------------------------------------------------------
    def _draw_inventory(self, ax: Any, state: Cutting2DMazeState, action: Cutting2DMazeAction | None) -> None:
        rx, ry = state.raw_piece_size
        top = max(rx, ry)
        pad = 0.06 * top
        ax.set_xlim(0, top + pad)
        ax.set_ylim(0, top + pad)
        ax.set_aspect("equal")
        ax.set_xlabel("short side")
        ax.set_ylabel("long side")
        self._integer_ticks(ax)
        ax.grid(True, color="#eeeeee", zorder=0)
        ax.set_axisbelow(True)
        ax.plot([0, top + pad], [0, top + pad], color="#dddddd", lw=1, zorder=1)
        d_short, d_long = sorted(state.current_demand)
        ax.add_patch(Rectangle((d_short, d_long), top + pad - d_short, top + pad - d_long, fc=OK_COLOR, alpha=0.08,
                               ec="none", zorder=1, label="pieces that fit the order"))

        inv = np.sort(state.inventory, axis=1) if len(state.inventory) else np.zeros((0, 2), np.int64)
        counts = Counter(map(tuple, inv.tolist()))
        if counts:
            pts = np.array(list(counts.keys()), dtype=float)
            cnt = np.array(list(counts.values()), dtype=float)
            ax.scatter(pts[:, 0], pts[:, 1], s=36 + 24 * np.sqrt(cnt - 1), c="#566573", alpha=0.75, ec="white",
                       lw=0.6, zorder=3, label="inventory pieces")
            for (sx, lx), c in counts.items():
                if c > 1:
                    ax.annotate(f"×{c}", (sx, lx), xytext=(6, 4), textcoords="offset points", fontsize=8,
                                color="#34495e", zorder=4)
        ax.scatter([d_short], [d_long], marker="D", s=70, c=ORDER_COLOR, ec="black", zorder=5, label="order")
        if action is not None and 0 <= int(action.piece_id) < len(inv):
            sx, lx = inv[int(action.piece_id)]
            ax.scatter([sx], [lx], s=220, facecolors="none", edgecolors=SELECT_COLOR, lw=2.2, zorder=6,
                       label=f"selected piece #{int(action.piece_id)}")
        ax.set_title(f"Inventory: {len(inv)} / {state.max_pieces_in_inventory} pieces", loc="left", fontsize=12,
                     y=_TITLE_Y)
        self._legend_below(ax)

    @staticmethod
    def _integer_ticks(ax: Any) -> None:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))

    @staticmethod
    def _legend_below(ax: Any) -> None:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8, frameon=False)

    @staticmethod
    def _event_names(events: Iterable[Any] | None) -> list[str]:
        if not events:
            return []
        names: list[str] = []
        for e in events:
            topic = getattr(getattr(e, "interface_class", None), "__name__", "")
            if topic in _SHOWN_TOPICS and e.interface_method.__name__ != "pieces_in_inventory":
                names.append(e.interface_method.__name__)
        return names
