"""The options of maze-lab's config groups as the error messages list them (sorted, comma-separated): tests that
check those messages stay true when a group gains an option."""

from __future__ import annotations

from pathlib import Path

import maze_lab.conf

CONF_DIR = Path(maze_lab.conf.__file__).parent


def listed_options(group: str) -> str:
    """``a2c, bc, ppo, ...``: the yaml files of a config group, sorted, as "valid options: ..." lists them."""
    return ", ".join(sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")))
