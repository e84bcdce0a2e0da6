"""Notebook dashboards and viewers (ipywidgets + plotly); installed as ``maze_lab.widgets``."""

# Imported here, in the thread that uses the widgets, before any plotly code runs: plotly looks pandas up in
# sys.modules without importing it, and a background run's statistics thread imports pandas (through pyarrow)
# while the kernel builds its widgets. A plain ``import`` waits for an import another thread has begun, so the
# widgets never see a half-initialised pandas ("partially initialized module 'pandas' has no attribute 'Series'").
import pandas  # noqa: F401
