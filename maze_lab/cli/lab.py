"""``maze-lab jupyter`` (JupyterLab on the project) and ``maze-lab lab`` (the Lab app, served with voila)."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

from maze_lab.run.commands import BadInput

# ---- jupyter (JupyterLab) ----------------------------------------------------------------------------------------
_LAB_OPTIONS_WITH_VALUE = ("--port", "--notebook-dir")
_LAB_FLAGS = ("--no-browser", "--print-command", "--dry-run", "-h", "--help")


def split_lab_args(words: list[str]) -> tuple[list[str], list[str]]:
    """Split ``maze-lab jupyter`` arguments into its own and JupyterLab's (passed through unchanged).

    Unknown options go to JupyterLab, with the word after one that has no ``=`` as its value unless that word is an
    existing path (``--ip 0.0.0.0`` is one option; ``--allow-root notebooks/train.ipynb`` opens the notebook);
    everything after ``--`` goes to JupyterLab.
    """
    own: list[str] = []
    jupyter: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            jupyter.extend(words[i + 1:])
            break
        if word in _LAB_FLAGS or word.split("=", 1)[0] in _LAB_OPTIONS_WITH_VALUE:
            own.append(word)
            if word in _LAB_OPTIONS_WITH_VALUE and i + 1 < len(words):
                own.append(words[i + 1])
                i += 1
        elif word.startswith("-"):
            jupyter.append(word)
            nxt = words[i + 1] if i + 1 < len(words) else None
            if "=" not in word and nxt is not None and not nxt.startswith("-") and not Path(nxt).exists():
                jupyter.append(nxt)
                i += 1
        else:
            own.append(word)
        i += 1
    return own, jupyter


def lab_target(path: str | None, notebook_dir: str | None) -> tuple[Path, Path | None]:
    """The directory JupyterLab serves and the notebook or folder it opens.

    The served directory is ``notebook_dir`` where given, else the project root of ``path`` (or of the working
    directory; see ``maze_lab.run.run_dir.project_root``; without one the directory itself), so that ``notebooks/``
    and the runs in ``outputs/`` are both in reach. Without ``path`` the project's ``notebooks/`` folder is opened
    where there is one.
    """
    from maze_lab.run.run_dir import project_root

    target = Path(path).resolve() if path else None
    if target is not None and not target.exists():
        raise BadInput(f"{path} is neither a notebook nor a directory; give a notebook or run directory to open "
                       f"(JupyterLab options that take a value: --name=value or after --, e.g. --ip=0.0.0.0)")
    if notebook_dir is not None:
        root = Path(notebook_dir).resolve()
        if not root.is_dir():
            raise BadInput(f"notebook directory {notebook_dir} does not exist")
    elif target is not None:
        start = target if target.is_dir() else target.parent
        root = project_root(start) or start
    else:
        root = project_root() or Path.cwd().resolve()
    if target is None and (root / "notebooks").is_dir():
        target = root / "notebooks"
    if target is not None and not target.is_relative_to(root):
        raise BadInput(f"{target} is not inside the served directory {root}; leave out --notebook-dir or give one "
                       f"that contains it")
    return root, target


def lab_command(root: Path, target: Path | None = None, port: int | None = None, no_browser: bool = False,
                jupyter_args: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The command that starts JupyterLab on ``root``, opening ``target`` (a file, or a folder in the file browser),
    with JupyterLab's own options appended unchanged."""
    cmd = [sys.executable, "-m", "jupyterlab", f"--notebook-dir={root}"]
    if target is not None and target.is_file():
        cmd.append(str(target))
    elif target is not None and target != root:
        cmd.append(f"--LabApp.default_url=/lab/tree/{target.relative_to(root).as_posix()}")
    if port is not None:
        cmd.append(f"--port={port}")
    if no_browser:
        cmd.append("--no-browser")
    return cmd + list(jupyter_args)


def _jupyter(args: argparse.Namespace) -> int:
    import importlib.util

    root, target = lab_target(args.path, args.notebook_dir)
    cmd = lab_command(root, target, args.port, args.no_browser, getattr(args, "jupyter_args", []))
    if args.dry_run:
        print(shlex.join(cmd))
        return 0
    if importlib.util.find_spec("jupyterlab") is None:
        raise BadInput("JupyterLab is not installed; install it with: pip install 'maze-lab[notebook]'")
    return _become(cmd)


def _become(cmd: list[str], env: dict[str, str] | None = None) -> int:
    """Run ``cmd`` in place of this process where the OS allows it, else as a child; returns its exit code."""
    if os.name == "posix":
        # become the server (same pid): a terminal's Ctrl-C, a supervisor's SIGTERM or a test's terminate() reach
        # the server itself, and no orphaned server is left behind when this command is stopped
        sys.stdout.flush()
        sys.stderr.flush()
        if env is None:
            os.execv(cmd[0], cmd)
        os.execve(cmd[0], cmd, env)
    try:
        return subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        return 130


# ---- lab (the voila app) -------------------------------------------------------------------------------------------
LAB_DEFAULT_PORT = 8866


def lab_notebook() -> Path:
    """The notebook of the Lab app: ``lab.ipynb`` of the notebooks that ship with maze-lab (an installed wheel's
    ``maze_lab/notebooks``, a checkout's ``notebooks/``)."""
    from maze_lab.cli.shipped_notebooks import shipped_notebooks

    return shipped_notebooks() / "lab.ipynb"


def _port_is_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def lab_app_command(notebook: Path, port: int, no_browser: bool = False,
                    voila_args: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The command that serves the Lab app's notebook with voila on ``port`` (voila's own options appended; one of
    the server defaults below given there replaces it, e.g. ``-- --LabKernelManager.cull_disconnected_timeout=120``)."""
    cmd = [sys.executable, "-m", "voila", str(notebook), f"--port={port}", "--Voila.port_retries=0",
           "--show_tracebacks=True", "--VoilaConfiguration.strip_sources=True"]
    defaults = {
        # the kernel of a page that is gone (closed, reloaded, its browser killed) is shut down: see
        # maze_lab.widgets.lab_server (LabKernelManager.cull_disconnected_timeout, 600 s by default: how long after)
        "VoilaConfiguration.multi_kernel_manager_class": "maze_lab.widgets.lab_server.LabKernelManager",
        "MappingKernelManager.cull_interval": "60",
    }
    given = {arg[2:].split("=", 1)[0] for arg in voila_args if arg.startswith("--")}
    cmd += [f"--{key}={value}" for key, value in defaults.items() if key not in given]
    if no_browser:
        cmd.append("--no-browser")
    return cmd + list(voila_args)


def _lab(args: argparse.Namespace) -> int:
    import importlib.util

    from maze_lab.run.run_dir import OUTPUTS_ENV, default_outputs_dir

    base = Path(args.base).expanduser().resolve() if args.base is not None else default_outputs_dir()
    if args.base is not None and base.exists() and not base.is_dir():
        raise BadInput(f"--base {args.base} is not a directory; give the directory of the runs")
    port = args.port
    if port is None:
        port = LAB_DEFAULT_PORT
        while not _port_is_free(port) and port < LAB_DEFAULT_PORT + 50:
            port += 1
    elif not 0 < port < 65536:
        raise BadInput(f"--port {port} is not a port number (1-65535)")
    notebook = lab_notebook()
    cmd = lab_app_command(notebook, port, args.no_browser, getattr(args, "voila_args", []))
    if args.dry_run:
        print(f"{OUTPUTS_ENV}={shlex.quote(str(base))} {shlex.join(cmd)}")
        return 0
    if importlib.util.find_spec("voila") is None:
        raise BadInput("voila is not installed; install it with: pip install 'maze-lab[notebook]' (or use "
                       "`maze-lab jupyter` for JupyterLab)")
    env = dict(os.environ)
    env[OUTPUTS_ENV] = str(base)  # the app's kernel runs in the notebook's folder: it must not guess the outputs
    print(f"maze-lab lab: the Lab app at http://localhost:{port}/ (runs in {base}; Ctrl-C stops it; JupyterLab: "
          f"maze-lab jupyter)", flush=True)
    return _become(cmd, env)
