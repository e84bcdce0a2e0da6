"""maze-lab: a Jupyter-first workbench for applied reinforcement learning built on the Maze concepts."""

__version__ = "0.1.0"
