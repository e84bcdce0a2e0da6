"""Notebook dashboards and viewers (ipywidgets + plotly); installed as ``maze_lab.widgets``.

``maze_lab.widgets.FigureWidget`` is plotly's FigureWidget made to come up with its current data after a browser
reload and in voila (:mod:`maze_lab.widgets.plotly_widgets`); importing the widgets changes nothing of plotly's.
"""

import importlib.util
from typing import Any

_MISSING = [name for name in ("ipywidgets", "plotly", "anywidget") if importlib.util.find_spec(name) is None]
if _MISSING:  # the engine works without them; the widgets do not
    raise ImportError(f"maze_lab.widgets needs the notebook extra, and {', '.join(_MISSING)} "
                      f"{'is' if len(_MISSING) == 1 else 'are'} not installed: pip install \"maze-lab[notebook]\"")

# Imported here, in the thread that uses the widgets, before any plotly code runs: plotly looks pandas up in
# sys.modules without importing it, and a background run's statistics thread imports pandas (through pyarrow)
# while the kernel builds its widgets. A plain ``import`` waits for an import another thread has begun, so the
# widgets never see a half-initialised pandas ("partially initialized module 'pandas' has no attribute 'Series'").
import pandas  # noqa: E402, F401


def __getattr__(name: str) -> Any:
    """``FigureWidget``, ``EnvPlayground`` and ``write_report`` on first use (PEP 562): importing the widgets does not
    import plotly."""
    if name == "FigureWidget":
        from maze_lab.widgets.plotly_widgets import FigureWidget

        return FigureWidget
    if name == "EnvPlayground":  # the env playground: step an env by hand or let a policy act
        from maze_lab.widgets.playground import EnvPlayground

        return EnvPlayground
    if name == "write_report":  # a shareable HTML report of runs (maze_lab.widgets.report)
        from maze_lab.widgets.report import write_report

        return write_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
