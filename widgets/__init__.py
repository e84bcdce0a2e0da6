"""Notebook dashboards and viewers (ipywidgets + plotly); installed as ``maze_lab.widgets``."""
