"""The ``maze-lab`` command: demo, train, run (papermill, batches), sweep, optimize (Optuna), runs, rollout, lab (the
voila app), jupyter (JupyterLab); and ``maze-run``, which understands the command lines of the Maze framework and runs
their maze-lab equivalent.

Bad input (an unknown config group, option or key, a value of the wrong type, a directory that is not a run, a
damaged run, a refused checkpoint or configuration) ends with one line on stderr naming what is wrong and exit code
2; ``--debug`` adds the traceback. A run whose build fails for any other reason is marked ``failed`` and reported in
one line with exit code 1; so is a fault of what a run stands on (a full disk, a worker process that died), with
the run directory and the episodes or epochs saved before intact; any other failure while training shows its
traceback and exits with 1. The configuration is composed and checked before torch or matplotlib are imported, so
that bad input is reported within about a second.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any

from maze_lab.cli.errors import EXIT_BAD_INPUT, _bad_input_types, _report
from maze_lab.cli.lab import (
    LAB_DEFAULT_PORT,
    _jupyter,
    _lab,
    lab_app_command,
    lab_command,
    lab_notebook,
    lab_target,
    split_lab_args,
)
from maze_lab.cli.maze_run import maze_run_main, translate_maze_run
from maze_lab.cli.notebook import _run, running_lab_url
from maze_lab.cli.runs import _control, _rollout, _runs
from maze_lab.cli.train import _demo, _sweep, _train, parse_sweep
from maze_lab.run.commands import BadInput
from maze_lab.run.config import split_values

__all__ = ["BadInput", "EXIT_BAD_INPUT", "LAB_DEFAULT_PORT", "build_parser", "lab_app_command",
           "lab_command", "lab_notebook", "lab_target", "main", "maze_run_main", "parse_sweep", "running_lab_url",
           "split_lab_args", "split_values", "translate_maze_run"]


# ---- parser --------------------------------------------------------------------------------------------------
_OVERRIDES_HELP = ("Hydra-style overrides: group=option (env=gym_env, algorithm=a2c, runner=local, "
                   "experiment=cartpole_ppo) and dotted.key=value (env.name=Acrobot-v1, algorithm.lr=0.001, "
                   "n_epochs=5)")


_TRUST_HELP = ("a module (my_project) or dotted name of your own that the run's config.yaml may instantiate; "
               "repeatable. Without it a run from disk instantiates only maze-lab's own classes and env factories, "
               "torch.nn modules and Gymnasium env ids")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-command per task."""
    parser = argparse.ArgumentParser(prog="maze-lab", description="maze-lab: a Jupyter-first RL workbench")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", parents=[common],
                          help="random episodes through the full wrapper stack, statistics printed")
    demo.add_argument("--env", default="CartPole-v1", help="Gymnasium env id")
    demo.add_argument("--epochs", type=int, default=2)
    demo.add_argument("--episodes", type=int, default=5, help="episodes per epoch")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_demo)

    train = sub.add_parser("train", parents=[common],
                           help="train headless from the config groups; prints the run directory",
                           description="Train headless. " + _OVERRIDES_HELP + ".")
    train.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="group=option or dotted.key=value")
    train.add_argument("--experiment", help="experiment file (config group 'experiment')")
    train.add_argument("--config-module", action="append", help="importable package with your own config groups")
    train.add_argument("--silent", action="store_true", help="nothing on the console while training (no epoch "
                                                                "lines, no progress bar)")
    train.add_argument("--verbose", "-v", action="store_true",
                       help="the full statistics tables of every epoch besides the epoch lines")
    train.add_argument("--threads", type=int, default=None,
                       help="torch threads while training (default: the config's torch_threads, 1)")
    train.add_argument("--trust", action="append", metavar="MODULE",
                       help="with input_dir=RUN_DIR: " + _TRUST_HELP)
    train.add_argument("--detach", action="store_true",
                       help="train in a process of its own that outlives this terminal; prints the run directory "
                            "and returns at once (follow it with `maze-lab runs`, stop it with `maze-lab stop`)")
    train.add_argument("-cn", "--config-name", help=argparse.SUPPRESS)  # Maze's `-cn conf_train`
    train.set_defaults(func=_train)

    run = sub.add_parser("run", parents=[common],
                         help="execute a parameterised notebook with papermill into a run directory",
                         description="Execute NOTEBOOK with papermill into a new run directory; the executed "
                                     "notebook is saved there.")
    run.add_argument("notebook", help="notebook with a cell tagged 'parameters': a path, or the name of a notebook "
                                      "that ships with maze-lab (train.ipynb; `maze-lab notebooks` lists and copies "
                                      "them)")
    run.add_argument("-p", "--parameter", dest="parameters", nargs=2, action="append", metavar=("NAME", "VALUE"),
                     help="a parameter; VALUE is read as YAML (3, 0.001, true, '{algorithm.lr: 0.001}') and "
                          "must be a plain literal (text, number, bool, null, lists and mappings of those; no YAML "
                          "tags); a,b,c: a batch, one execution per value (quote a comma that belongs to a value)")
    run.add_argument("--log-base-dir", default=None,
                     help="base of the run directory (default: $MAZE_LAB_OUTPUTS, else <project root>/outputs)")
    run.add_argument("--kernel", help="Jupyter kernel name (default: the notebook's)")
    run.add_argument("--jobs", "-j", type=int, default=None,
                     help="a batch: executions at the same time (-p NAME a,b,c runs one execution per value)")
    run.add_argument("--ray", action="store_true", help="a batch: each execution a Ray task (a local Ray by default)")
    run.add_argument("--address", help="with --ray: join this Ray cluster (auto, HOST:6379 or ray://HOST:10001)")
    run.add_argument("--batch-name", help="a batch: its name (default: the notebook's name)")
    run.set_defaults(func=_run)

    sweep = sub.add_parser("sweep", parents=[common],
                           help="grid over comma-separated values; prints a comparison table",
                           description="Train one run per combination of the comma-separated values "
                                       "(algorithm.lr=0.001,0.0005 algorithm=ppo,a2c); other overrides apply "
                                       "to every run.")
    sweep.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="key=a,b,c or key=value")
    sweep.add_argument("--jobs", "-j", type=int, default=1, help="runs in parallel worker processes")
    sweep.add_argument("--ray", action="store_true", help="each run a Ray task (--jobs of them at a time)")
    sweep.add_argument("--address", help="with --ray: join this Ray cluster (auto, HOST:6379 or ray://HOST:10001)")
    sweep.add_argument("--experiment", help="experiment file (config group 'experiment')")
    sweep.add_argument("--config-module", action="append", help="importable package with your own config groups")
    sweep.add_argument("-cn", "--config-name", help=argparse.SUPPRESS)  # Maze's `-cn conf_train`
    sweep.set_defaults(func=_sweep)

    runs = sub.add_parser("runs", parents=[common],
                          help="list the run directories under a base directory",
                          description="List runs. Every run goes to one place unless told otherwise: "
                                      "$MAZE_LAB_OUTPUTS where set, else <project root>/outputs, where the project "
                                      "root is the nearest directory at or above the working directory with a .git, "
                                      "pyproject.toml, setup.py, setup.cfg or notebooks/ (else ./outputs).")
    runs.add_argument("--base", default=None, help="base directory (default: the default location of runs)")
    runs.add_argument("--group", default=None,
                      help="only the runs of one group: a sweep, notebook batch or Optuna study (the id from the "
                           "group column, e.g. sweep:sweep-20261124-071500-ab12)")
    runs.set_defaults(func=_runs)

    for action, what in (("stop", "stop a live run after its current update, with a checkpoint"),
                         ("pause", "pause a live run between two updates"),
                         ("resume", "resume a paused run"),
                         ("checkpoint", "have a live run write a checkpoint now")):
        control = sub.add_parser(action, parents=[common], help=what,
                                 description=f"{what[0].upper()}{what[1:]}, wherever it was started (a notebook, "
                                             f"another shell, the Lab app, a detached run); exits 0 once the run "
                                             f"acknowledged it (a stop: once the run has ended).")
        control.add_argument("run_dir", metavar="RUN_DIR", help="the run directory")
        control.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the run (default 60)")
        control.set_defaults(func=_control)

    rollout = sub.add_parser("rollout", parents=[common],
                             help="roll out a run's trained policy and record its episodes")
    rollout.add_argument("run_dir", help="a run directory (outputs/<experiment_name>/<timestamp>)")
    rollout.add_argument("--episodes", type=int, default=1, help="number of episodes (default 1)")
    rollout.add_argument("--which", choices=["best", "last"], default="best", help="checkpoint to use")
    rollout.add_argument("--sample", action="store_true", help="sample actions instead of the most likely ones")
    rollout.add_argument("--seed", type=int, default=None, help="seed of the episodes")
    rollout.add_argument("--no-record", action="store_true", help="do not record trajectories")
    rollout.add_argument("--workers", type=int, default=1, metavar="N",
                         help="split the episodes into N parts, each run by a local process (with --ray: by Ray "
                              "workers, at most one per CPU of the cluster); default 1")
    rollout.add_argument("--ray", action="store_true", help="run the --workers on Ray (a local Ray, or --address)")
    rollout.add_argument("--address", default=None,
                         help="with --ray: the Ray cluster to join ('auto', 'host:6379', 'ray://host:10001')")
    rollout.add_argument("--trust", action="append", metavar="MODULE", help=_TRUST_HELP)
    rollout.set_defaults(func=_rollout)

    lab = sub.add_parser("lab", parents=[common],
                         help="the Lab app in the browser: start, watch, stop and compare runs",
                         description="Serve the Lab app (notebooks/lab.ipynb) with voila: a form that starts runs from "
                                     "the config groups, the cockpit of the current run, the runs of the output "
                                     "directory with comparison, trajectories and model graphs. No code is shown. "
                                     "voila's own options go after --. For JupyterLab use `maze-lab jupyter`.")
    lab.add_argument("--port", type=int, help=f"port (default: {LAB_DEFAULT_PORT}, or the next free one)")
    lab.add_argument("--no-browser", action="store_true", help="do not open a browser")
    lab.add_argument("--base", default=None, help="directory of the runs (default: $MAZE_LAB_OUTPUTS, else "
                                                  "<project root>/outputs)")
    lab.add_argument("--print-command", "--dry-run", dest="dry_run", action="store_true",
                     help="print the command instead of running it")
    lab.set_defaults(func=_lab)

    jupyter = sub.add_parser("jupyter", help="start JupyterLab on the project; other options go to JupyterLab",
                             description="Start JupyterLab on the project root (notebooks/ and outputs/), or open a "
                                         "notebook or run directory. Options not listed here go to JupyterLab "
                                         "unchanged (--allow-root, --ip=0.0.0.0, --ServerApp.token=...); so does "
                                         "everything after --.")
    jupyter.add_argument("path", nargs="?", help="a notebook or a run directory to open")
    jupyter.add_argument("--port", type=int, help="port (default: JupyterLab's)")
    jupyter.add_argument("--no-browser", action="store_true", help="do not open a browser")
    jupyter.add_argument("--notebook-dir", help="directory to serve (default: the project root)")
    jupyter.add_argument("--print-command", "--dry-run", dest="dry_run", action="store_true",
                         help="print the command instead of running it")
    jupyter.set_defaults(func=_jupyter)
    from maze_lab.run.optimize import add_optimize_parser  # Optuna search (own module, imports no torch)

    add_optimize_parser(sub, common)
    from maze_lab.cli.report import add_report_parser  # one HTML file of runs (imports the widgets when it runs)

    add_report_parser(sub, common)
    from maze_lab.cli.shipped_notebooks import add_notebooks_parser  # copies the notebooks that ship

    add_notebooks_parser(sub, common)
    return parser


class _ConsoleThatMayClose:
    """The command's standard output, which a reader may close (``maze-lab train ... | head``): from then on what is
    printed goes nowhere, and the command (and the run it trains) goes on. Only the ``maze-lab`` command installs
    it, in its own process."""

    def __init__(self, stream: Any):
        self._stream = stream
        self.closed_by_reader = False

    def _gone(self) -> None:
        self.closed_by_reader = True
        with contextlib.suppress(OSError, ValueError):  # later writes, and the flush at exit, go to /dev/null
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def write(self, text: str) -> int:
        if not self.closed_by_reader:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.closed_by_reader:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _parse(parser: argparse.ArgumentParser, words: list[str]) -> argparse.Namespace:
    """The command line parsed with options and ``key=value`` overrides in any order (``train n_epochs=2 --silent
    log_base_dir=X``): argparse takes the first run of overrides as the positional list and leaves later ones over,
    which are appended in their order; anything else left over is reported as argparse reports it."""
    args, extra = parser.parse_known_args(words)
    if extra and isinstance(getattr(args, "overrides", None), list) \
            and all("=" in word and not word.startswith("-") for word in extra):
        args.overrides = [*args.overrides, *extra]
        return args
    if extra:
        parser.parse_args(words)  # exits with argparse's message naming the unrecognized arguments
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``maze-lab`` command."""
    words = list(sys.argv[1:] if argv is None else argv)
    jupyter_args: list[str] = []
    voila_args: list[str] = []
    if words and words[0] == "jupyter":
        own, jupyter_args = split_lab_args(words[1:])
        words = ["jupyter", *own]
    elif words and words[0] == "lab" and "--" in words:
        cut = words.index("--")
        words, voila_args = words[:cut], words[cut + 1:]
    args = _parse(build_parser(), words)
    if argv is None and not isinstance(sys.stdout, _ConsoleThatMayClose):
        sys.stdout = _ConsoleThatMayClose(sys.stdout)  # the command's own process (the maze-lab script)
    args.jupyter_args = jupyter_args
    args.voila_args = voila_args
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except _bad_input_types() as err:
        _report(args, err)
        return EXIT_BAD_INPUT
