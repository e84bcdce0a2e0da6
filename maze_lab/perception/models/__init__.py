"""Ready-made networks (``built_in``) under their Maze-style path."""
