"""The notebooks that ship with maze-lab, and ``maze-lab notebooks``, which copies them into a folder of the user.

A wheel carries them as ``maze_lab/notebooks/`` (package data); a checkout or an editable install has them in the
source tree's ``notebooks/`` folder. ``maze-lab run train.ipynb`` finds a shipped notebook by its name where no such
file is at hand, and ``maze-lab lab`` serves the shipped ``lab.ipynb``.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from maze_lab.run.commands import BadInput


def shipped_notebooks() -> Path:
    """The folder of the notebooks that ship with maze-lab: ``maze_lab/notebooks`` of an installed wheel, else the
    ``notebooks/`` folder beside the ``maze_lab`` package of a checkout."""
    import maze_lab

    package = Path(maze_lab.__file__).resolve().parent
    for folder in (package / "notebooks", package.parent / "notebooks"):
        if (folder / "lab.ipynb").is_file():
            return folder
    raise BadInput(f"the notebooks that ship with maze-lab are missing from its install at {package}; reinstall "
                   f"maze-lab from its wheel (pip install --force-reinstall maze_lab-*.whl) or its checkout "
                   f"(bash scripts/setup.sh)")


def names() -> list[str]:
    """The file names of the shipped notebooks, sorted."""
    return sorted(p.name for p in shipped_notebooks().glob("*.ipynb"))


def find_notebook(given: str) -> Path:
    """The notebook ``maze-lab run`` executes: the file ``given`` where it exists, else the shipped notebook of that
    name (``train`` or ``train.ipynb``); refuses with the names that ship where neither is found."""
    path = Path(given)
    if path.exists() or path.parent != Path("."):
        return path  # a path of the user's (one that does not exist is reported by the execution itself)
    name = given if given.endswith(".ipynb") else f"{given}.ipynb"
    shipped = shipped_notebooks() / name
    if shipped.is_file():
        return shipped
    raise BadInput(f"notebook {given} does not exist, and no notebook of that name ships with maze-lab; give a "
                   f"notebook's path or one that ships: {', '.join(names())} (`maze-lab notebooks DIR` copies them "
                   f"into DIR)")


def copy_notebooks(dest: Path) -> tuple[list[Path], list[Path]]:
    """Copy the shipped notebooks into ``dest`` (made where missing); files already there are kept as they are.
    Returns the copied and the kept files."""
    if dest.exists() and not dest.is_dir():
        raise BadInput(f"{dest} is a file; give a folder to copy the notebooks into")
    dest.mkdir(parents=True, exist_ok=True)
    copied, kept = [], []
    for source in sorted(shipped_notebooks().glob("*.ipynb")):
        target = dest / source.name
        if target.exists() or target.is_symlink():
            kept.append(target)
            continue
        shutil.copyfile(source, target)
        copied.append(target)
    return copied, kept


def _notebooks(args: argparse.Namespace) -> int:
    dest = Path(args.dest)
    copied, kept = copy_notebooks(dest)
    print(f"maze-lab notebooks: {len(copied)} notebooks copied into {dest}"
          + (f"; {len(kept)} already there were kept as they are ({', '.join(p.name for p in kept)})" if kept else ""))
    print(f"open them: maze-lab jupyter {dest}    run one: maze-lab run {dest / 'train.ipynb'} -p n_epochs 2")
    return 0


def add_notebooks_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """The ``maze-lab notebooks`` subcommand."""
    cmd = sub.add_parser("notebooks", parents=[common], help="copy the notebooks that ship with maze-lab into a folder",
                         description="Copy the guide's notebooks, the training notebook and the Lab app's notebook "
                                     "that ship with maze-lab into DEST (default ./notebooks); notebooks already "
                                     "there are kept as they are.")
    cmd.add_argument("dest", nargs="?", default="notebooks", metavar="DEST", help="folder (default: ./notebooks)")
    cmd.set_defaults(func=_notebooks)
