"""``maze-lab run``: a parameterised notebook executed with papermill into a run directory (or a batch of them)."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from maze_lab.cli.train import _read_summary, _rewards_line
from maze_lab.run.commands import BadInput, one_line


# ---- run (papermill) -----------------------------------------------------------------------------------------
def _own_command() -> str:
    """How to call this ``maze-lab`` again: the bare name where PATH finds this same script, else its path.

    The set-up installs into ``.venv/``, which is not on PATH unless the environment is activated.
    """
    import shutil

    here = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if here is None or here.name != "maze-lab":
        here = Path(sys.executable).parent / "maze-lab"
    found = shutil.which("maze-lab")
    if found is not None and here.exists() and Path(found).resolve() == here.resolve():
        return "maze-lab"
    return shlex.quote(_shown(here)) if here.exists() else "maze-lab"


def _shown(path: Path) -> str:
    """A path relative to the working directory where it lies below it, else absolute."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def running_lab_url(path: Path) -> str | None:
    """The URL that opens ``path`` in a JupyterLab server of this user that is running and serves it, if any."""
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return None
    path = Path(path).resolve()
    try:
        servers = list(list_running_servers())
    except Exception:  # noqa: BLE001 - a stale or unreadable server file must not spoil the report
        return None
    for server in servers:
        root = Path(server.get("root_dir") or server.get("notebook_dir") or "/").resolve()
        if path.is_relative_to(root):
            rel = path.relative_to(root).as_posix()
            return f"{server['url'].rstrip('/')}/lab/tree/{rel}"
    return None


def _run(args: argparse.Namespace) -> int:
    from maze_lab.cli.shipped_notebooks import find_notebook
    from maze_lab.run.notebook_batch import is_batch_command, run_batch_command
    from maze_lab.run.papermill_run import NotebookRunError, parse_parameter, run_notebook
    from maze_lab.run.progress import is_terminal

    notebook = find_notebook(args.notebook)  # a file of the user's, else a notebook that ships of that name
    if notebook != Path(args.notebook):
        print(f"maze-lab run: {args.notebook} is the notebook that ships with maze-lab: {notebook}", flush=True)
        args.notebook = str(notebook)
    if is_batch_command(args):  # -p key a,b,c, --jobs or --ray: one execution per combination
        return run_batch_command(args)

    # a value becomes a plain Python literal or is refused (papermill writes it into the notebook as source)
    params = {key: parse_parameter(key, value) for key, value in (args.parameters or [])}
    given = " ".join(f"-p {key} {value}" for key, value in (args.parameters or []))
    print(f"maze-lab run: executing {args.notebook}{' ' + given if given else ''} with papermill "
          f"(the notebook's output goes into the executed copy) ...", flush=True)
    print(f"maze-lab run: parameters {_parameters_line(args.notebook, args.parameters or [])}", flush=True)
    started = time.monotonic()
    try:
        # papermill's bar over the cells where a terminal watches
        run_dir, executed = run_notebook(args.notebook, params, log_base_dir=args.log_base_dir,
                                         kernel_name=args.kernel, progress_bar=is_terminal(sys.stderr))
    except FileNotFoundError as err:
        raise BadInput(str(err)) from err
    except NotebookRunError as err:
        if err.ename in ("ConfigurationError", "NotARunDirectoryError"):
            raise BadInput(f"{err.ename}: {one_line(Exception(err.evalue))} (executed notebook: "
                           f"{err.executed_notebook})") from None
        print(f"maze-lab run: {err}", file=sys.stderr)
        return 1
    summary = _read_summary(run_dir)
    trained = "" if summary.get("epoch") is None else \
        f": {summary['epoch']} epochs, {summary.get('env_steps', 0):,} env steps"
    print(f"maze-lab run: {Path(args.notebook).name} {summary.get('status', 'done')} in "
          f"{time.monotonic() - started:.0f} s{trained}")
    print(_rewards_line(summary))
    print(f"run directory: {_shown(run_dir)}")
    print(f"executed notebook: {_shown(executed)}")
    lab = _own_command()
    print(f"open it in JupyterLab: {lab} jupyter {shlex.quote(_shown(executed))}  "
          f"(the run: {lab} jupyter {shlex.quote(_shown(run_dir))})")
    url = running_lab_url(executed)
    if url is not None:
        print(f"or in the JupyterLab that is running: {url}")
    return 0


def _parameters_line(notebook: str, given: list[tuple[str, str]]) -> str:
    """The notebook's parameters as the execution gets them: the values given, the notebook's defaults for the rest
    (``run_dir`` and ``log_base_dir`` are chosen by the run)."""
    from maze_lab.run.papermill_run import notebook_parameters

    try:
        values = dict(notebook_parameters(notebook))
    except Exception:  # noqa: BLE001 - a notebook that cannot be read is reported by the execution itself
        return ", ".join(f"{k}={v}" for k, v in given) or "(none given)"
    values.update(dict(given))
    return ", ".join(f"{k}={v}" for k, v in values.items() if k not in ("run_dir", "log_base_dir"))

