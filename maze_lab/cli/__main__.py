"""``python -m maze_lab.cli``: the ``maze-lab`` command."""

import sys

from maze_lab.cli import main

sys.exit(main())
