"""Model composers under their Maze-style paths, and ready-made networks (``built_in``)."""
