"""The views follow the page's theme: JupyterLab's light or dark theme, voila's ``?theme=dark``.

JupyterLab and voila define the theme's colours as CSS variables (``--jp-ui-font-color1``, ``--jp-layout-color0``,
...). The views' own HTML names those variables (with the light colours as fallbacks, for a page without them), and
one stylesheet, added once to every view's top-level box, makes plotly's figures follow them too: the figures are
made with white backgrounds and dark text in Python, and in a themed view their backgrounds are see-through and their
text, grid and axis lines take the theme's colours. The figures' data and layout are not changed: a figure saved or
shown elsewhere keeps its light look.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as w

TEXT = "var(--jp-ui-font-color1, #1b2631)"
"""The theme's main text colour."""
MUTED = "var(--jp-ui-font-color2, #566573)"
"""The theme's colour of secondary text (notes, counts)."""
BACKGROUND = "var(--jp-layout-color0, #ffffff)"
"""The theme's page background."""
PANEL = "var(--jp-layout-color2, #f2f3f4)"
"""The theme's background of a header or a panel set off from the page."""
BORDER = "var(--jp-border-color2, #e5e8e8)"
"""The theme's light border colour."""

THEMED_CLASS = "maze-lab-themed"

_PLOT = f".{THEMED_CLASS} .js-plotly-plot"
THEME_CSS = f"""<style>
.{THEMED_CLASS} {{ color: {TEXT}; }}
{_PLOT} .main-svg {{ background: transparent !important; }}
{_PLOT} .bglayer .bg, {_PLOT} .legend .bg, {_PLOT} .infolayer .legend rect.bg {{ fill: transparent !important; }}
{_PLOT} .gtitle, {_PLOT} .xtick text, {_PLOT} .ytick text, {_PLOT} .g-xtitle text, {_PLOT} .g-ytitle text,
{_PLOT} .xtitle, {_PLOT} .ytitle, {_PLOT} .legendtext, {_PLOT} .legendtitletext, {_PLOT} .cbtitle text,
{_PLOT} .cbaxis text, {_PLOT} .parcoords .axis-title, {_PLOT} .parcoords .tick text,
{_PLOT} .updatemenu-item-text {{ fill: {TEXT} !important; }}
{_PLOT} .parcoords .tick text, {_PLOT} .parcoords .axis-title {{ text-shadow: none !important; }}
{_PLOT} .gridlayer path {{ stroke: var(--jp-border-color2, #e6e9ef) !important; }}
{_PLOT} .xlines-above, {_PLOT} .ylines-above, {_PLOT} .xtick, {_PLOT} .ytick,
{_PLOT} path.xtick, {_PLOT} path.ytick {{ stroke: var(--jp-border-color1, #9aa0a6) !important; }}
{_PLOT} .updatemenu-button rect {{ fill: {PANEL} !important; stroke: {BORDER} !important; }}
</style>"""
"""The stylesheet that makes plotly figures inside a themed box follow the theme (one copy per view; the browser
applies each the same way)."""


def themed(box: Any) -> Any:
    """Mark ``box`` (a view's top-level widget) as following the theme and append the stylesheet to it (hidden, as
    its last child: the children views and tests know keep their places). Returns ``box``."""
    box.add_class(THEMED_CLASS)
    style = w.HTML(THEME_CSS, layout=w.Layout(display="none"))
    style.add_class("maze-lab-theme-css")
    box.children = (*box.children, style)
    return box
