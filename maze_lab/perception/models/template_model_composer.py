"""Maze-style import path of the TemplateModelComposer."""

from maze_lab.perception.composers.template import TemplateModelComposer

__all__ = ["TemplateModelComposer"]
