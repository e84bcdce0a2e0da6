"""The ``maze-lab`` command: demo, train, run (papermill), sweep, runs, rollout, lab.

Bad input (an unknown config group, option or key, a value of the wrong type, a directory that is not a run)
ends with one line on stderr naming what is wrong and exit code 2; a failure while training shows its traceback
and exits with 1.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXIT_BAD_INPUT = 2


class BadInput(Exception):
    """Input the command cannot use; reported as one line with exit code 2."""


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _bad_input_types() -> tuple[type[BaseException], ...]:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from maze_lab.core.utils.factory import ConfigurationError
    from maze_lab.run.run_dir import NotARunDirectoryError

    return BadInput, ConfigurationError, NotARunDirectoryError, HydraException, OmegaConfBaseException


# ---- demo ----------------------------------------------------------------------------------------------------
def _demo(args: argparse.Namespace) -> int:
    from maze_lab.demo import run_demo

    run_demo(args.env, n_epochs=args.epochs, episodes_per_epoch=args.episodes, seed=args.seed)
    return 0


# ---- train ---------------------------------------------------------------------------------------------------
def _split_overrides(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """Components, dotted overrides and the experiment from the command line's ``key=value`` words."""
    from maze_lab.run.config import parse_cli_overrides

    components, overrides = parse_cli_overrides(args.overrides)
    experiment = components.pop("experiment", None)
    if experiment and args.experiment and experiment != args.experiment:
        raise BadInput(f"two experiments given: --experiment {args.experiment} and experiment={experiment}")
    return components, overrides, args.experiment or experiment


def _train(args: argparse.Namespace) -> int:
    import torch

    from maze_lab.run.run_context import RunContext

    torch.set_num_threads(args.threads)
    components, overrides, experiment = _split_overrides(args)
    rc = RunContext(**components, overrides=overrides, experiment=experiment, config_module=args.config_module,
                    silent=args.silent)
    try:
        try:
            rc.trainer  # noqa: B018 - build envs and model first: errors here are errors of the configuration
        except ValueError as err:
            from maze_lab.run.run_dir import RunDirectory

            RunDirectory(rc.run_dir).write_summary(status="failed", error=f"{type(err).__name__}: {err}")
            raise BadInput(f"{_one_line(err)} (run directory: {rc.run_dir})") from err
        print(f"maze-lab train: run directory {rc.run_dir}", flush=True)
        try:
            rc.train()
        except KeyboardInterrupt:
            print(f"\nmaze-lab train: interrupted; run directory: {rc.run_dir}", file=sys.stderr)
            return 130
    finally:
        rc.close()
    print(f"run directory: {rc.run_dir}")
    return 0


# ---- run (papermill) -----------------------------------------------------------------------------------------
def _run(args: argparse.Namespace) -> int:
    from maze_lab.run.config import parse_override_value
    from maze_lab.run.papermill_run import NotebookRunError, run_notebook

    params = {key: parse_override_value(value) for key, value in (args.parameters or [])}
    try:
        run_dir, executed = run_notebook(args.notebook, params, log_base_dir=args.log_base_dir,
                                         kernel_name=args.kernel)
    except FileNotFoundError as err:
        raise BadInput(str(err)) from err
    except NotebookRunError as err:
        if err.ename in ("ConfigurationError", "NotARunDirectoryError"):
            raise BadInput(f"{err.ename}: {_one_line(Exception(err.evalue))} (executed notebook: "
                           f"{err.executed_notebook})") from None
        print(f"maze-lab run: {err}", file=sys.stderr)
        return 1
    print(f"run directory: {run_dir}")
    print(f"executed notebook: {executed}")
    return 0


# ---- sweep ---------------------------------------------------------------------------------------------------
def split_values(text: str) -> list[str]:
    """Split ``a,b,c`` at commas outside brackets, braces and quotes (``[64,64],[32,32]`` is two values)."""
    values, depth, quote, current = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            values.append("".join(current))
            current = []
            continue
        current.append(ch)
    values.append("".join(current))
    return values


def parse_sweep(words: list[str]) -> tuple[dict[str, Any], str | None]:
    """Overrides with lists for the swept keys (``key=a,b,c``) and the experiment, from ``key=value`` words."""
    from maze_lab.run.config import parse_override_value

    overrides: dict[str, Any] = {}
    experiment = None
    for word in words:
        if "=" not in word:
            raise BadInput(f"'{word}' must look like key=value or key=a,b,c (e.g. algorithm.lr=0.001,0.0005)")
        key, text = word.split("=", 1)
        key = key.lstrip("+")
        values = [parse_override_value(v) for v in split_values(text)]
        if key == "experiment":
            if len(values) > 1:
                raise BadInput("experiment cannot be swept; run one sweep per experiment")
            experiment = values[0]
        else:
            overrides[key] = values if len(values) > 1 else values[0]
    return overrides, experiment


def _sweep(args: argparse.Namespace) -> int:
    from maze_lab.run.run_context import RunContext

    overrides, experiment = parse_sweep(args.overrides)
    experiment = args.experiment or experiment
    rc = RunContext(overrides=overrides, experiment=experiment, config_module=args.config_module, silent=True,
                    multirun=True, n_jobs=args.jobs)
    grid = " x ".join(f"{k} ({len(overrides[k])} values)" for k in rc.grid_keys) or "no swept keys"
    print(f"maze-lab sweep: {len(rc.configs)} runs over {grid}, {args.jobs} parallel job(s)", flush=True)
    table = rc.train()
    columns = [*rc.grid_keys, "status", "epoch", "env_steps", "best_eval_reward", "last_eval_reward",
               "final_train_reward", "run_dir"]
    print(table[[c for c in columns if c in table.columns]].to_string(index=False))
    return 0


# ---- runs ----------------------------------------------------------------------------------------------------
def _runs(args: argparse.Namespace) -> int:
    from maze_lab.run.runs import list_runs

    base = Path(args.base)
    if not base.is_dir():
        raise BadInput(f"{base} is not a directory; give the base directory of the runs with --base "
                       f"(the log_base_dir of the runs, default 'outputs')")
    df = list_runs(base)
    if df.empty:
        print(f"no runs under {base}")
        return 0
    columns = ["created", "experiment", "status", "algorithm", "env", "epoch", "env_steps", "best_eval_reward",
               "final_train_reward", "run_dir"]
    print(df[columns].to_string(index=False))
    return 0


# ---- rollout -------------------------------------------------------------------------------------------------
def _rollout(args: argparse.Namespace) -> int:
    from maze_lab.run.runs import load_run

    run = load_run(args.run_dir)
    try:
        result = run.rollout(n_episodes=args.episodes, which=args.which, deterministic=not args.sample,
                             seed=args.seed, record_trajectory=not args.no_record)
    except (FileNotFoundError, ValueError) as err:
        raise BadInput(str(err)) from err
    lengths = ", ".join(str(n) for n in result.episode_lengths)
    print(f"{args.episodes} episode(s) of the {args.which} policy: mean reward {result.mean_reward:.3f} "
          f"(lengths {lengths})")
    if not args.no_record:
        print(f"trajectories: {run.directory.trajectory_dir}")
    return 0


# ---- lab -----------------------------------------------------------------------------------------------------
def default_notebook_dir() -> Path:
    """``./notebooks`` where it exists, else the notebooks of the maze-lab checkout, else the current directory."""
    import maze_lab

    for candidate in (Path.cwd() / "notebooks", Path(maze_lab.__file__).resolve().parents[1] / "notebooks"):
        if candidate.is_dir():
            return candidate
    return Path.cwd()


def lab_command(notebook_dir: Path, port: int | None, no_browser: bool) -> list[str]:
    """The command that starts JupyterLab on ``notebook_dir``."""
    cmd = [sys.executable, "-m", "jupyterlab", f"--notebook-dir={notebook_dir}"]
    if port is not None:
        cmd.append(f"--port={port}")
    if no_browser:
        cmd.append("--no-browser")
    return cmd


def _lab(args: argparse.Namespace) -> int:
    import importlib.util

    notebook_dir = Path(args.notebook_dir) if args.notebook_dir else default_notebook_dir()
    if not notebook_dir.is_dir():
        raise BadInput(f"notebook directory {notebook_dir} does not exist")
    cmd = lab_command(notebook_dir.resolve(), args.port, args.no_browser)
    if args.dry_run:
        print(shlex.join(cmd))
        return 0
    if importlib.util.find_spec("jupyterlab") is None:
        raise BadInput("JupyterLab is not installed; install it with: pip install 'maze-lab[notebook]'")
    try:
        return subprocess.call(cmd)
    except KeyboardInterrupt:
        return 130


# ---- parser --------------------------------------------------------------------------------------------------
_OVERRIDES_HELP = ("Hydra-style overrides: group=option (env=gym_env, algorithm=a2c, runner=local, "
                   "experiment=cartpole_ppo) and dotted.key=value (env.name=Acrobot-v1, algorithm.lr=0.001, "
                   "n_epochs=5)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-command per task."""
    parser = argparse.ArgumentParser(prog="maze-lab", description="maze-lab: a Jupyter-first RL workbench")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="random episodes through the full wrapper stack, statistics printed")
    demo.add_argument("--env", default="CartPole-v1", help="Gymnasium env id")
    demo.add_argument("--epochs", type=int, default=2)
    demo.add_argument("--episodes", type=int, default=5, help="episodes per epoch")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_demo)

    train = sub.add_parser("train", help="train headless from the config groups; prints the run directory",
                           description="Train headless. " + _OVERRIDES_HELP + ".")
    train.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="group=option or dotted.key=value")
    train.add_argument("--experiment", help="experiment file (config group 'experiment')")
    train.add_argument("--config-module", action="append", help="importable package with your own config groups")
    train.add_argument("--silent", action="store_true", help="no console statistics tables")
    train.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    train.set_defaults(func=_train)

    run = sub.add_parser("run", help="execute a parameterised notebook with papermill into a run directory",
                         description="Execute NOTEBOOK with papermill into a new run directory; the executed "
                                     "notebook is saved there.")
    run.add_argument("notebook", help="notebook with a cell tagged 'parameters'")
    run.add_argument("-p", "--parameter", dest="parameters", nargs=2, action="append", metavar=("NAME", "VALUE"),
                     help="a parameter; VALUE is read as YAML (3, 0.001, true, '{algorithm.lr: 0.001}')")
    run.add_argument("--log-base-dir", default="outputs", help="base of the run directory (default outputs)")
    run.add_argument("--kernel", help="Jupyter kernel name (default: the notebook's)")
    run.set_defaults(func=_run)

    sweep = sub.add_parser("sweep", help="grid over comma-separated values; prints a comparison table",
                           description="Train one run per combination of the comma-separated values "
                                       "(algorithm.lr=0.001,0.0005 algorithm=ppo,a2c); other overrides apply "
                                       "to every run.")
    sweep.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="key=a,b,c or key=value")
    sweep.add_argument("--jobs", "-j", type=int, default=1, help="runs in parallel worker processes")
    sweep.add_argument("--experiment", help="experiment file (config group 'experiment')")
    sweep.add_argument("--config-module", action="append", help="importable package with your own config groups")
    sweep.set_defaults(func=_sweep)

    runs = sub.add_parser("runs", help="list the run directories under a base directory")
    runs.add_argument("--base", default="outputs", help="base directory (default outputs)")
    runs.set_defaults(func=_runs)

    rollout = sub.add_parser("rollout", help="roll out a run's trained policy and record its episodes")
    rollout.add_argument("run_dir", help="a run directory (outputs/<experiment>/<timestamp>)")
    rollout.add_argument("--episodes", type=int, default=1, help="number of episodes (default 1)")
    rollout.add_argument("--which", choices=["best", "last"], default="best", help="checkpoint to use")
    rollout.add_argument("--sample", action="store_true", help="sample actions instead of the most likely ones")
    rollout.add_argument("--seed", type=int, default=None, help="seed of the episodes")
    rollout.add_argument("--no-record", action="store_true", help="do not record trajectories")
    rollout.set_defaults(func=_rollout)

    lab = sub.add_parser("lab", help="start JupyterLab on the notebooks")
    lab.add_argument("--port", type=int, help="port (default: JupyterLab's)")
    lab.add_argument("--no-browser", action="store_true", help="do not open a browser")
    lab.add_argument("--notebook-dir", help="directory to serve (default: ./notebooks or maze-lab's notebooks)")
    lab.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    lab.set_defaults(func=_lab)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``maze-lab`` command."""
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except _bad_input_types() as err:
        print(f"maze-lab {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
