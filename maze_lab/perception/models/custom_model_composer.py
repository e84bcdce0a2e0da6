"""Maze-style import path of the CustomModelComposer."""

from maze_lab.perception.composers.custom import CustomModelComposer

__all__ = ["CustomModelComposer"]
