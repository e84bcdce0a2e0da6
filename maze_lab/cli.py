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
import shlex
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from maze_lab.run.commands import BadInput, interrupt_once, one_line, report_interrupted
from maze_lab.run.config import split_values  # noqa: F401 - the sweep syntax, also for callers of the CLI's API

EXIT_BAD_INPUT = 2


def _bad_input_types() -> tuple[type[BaseException], ...]:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from maze_lab.core.utils.factory import ConfigurationError
    from maze_lab.run.run_dir import DamagedRunError, ExistingRunError, NotARunDirectoryError

    types: tuple[type[BaseException], ...] = (BadInput, ConfigurationError, NotARunDirectoryError, DamagedRunError,
                                              ExistingRunError, HydraException, OmegaConfBaseException)
    # a CheckpointError can only have been raised where its module (which imports torch) is loaded
    checkpoints = sys.modules.get("maze_lab.train.trainers.common.checkpoints")
    if checkpoints is not None:
        types += (checkpoints.CheckpointError,)
    return types


def _report(args: argparse.Namespace, err: BaseException, context: str = "") -> None:
    """One line on stderr for ``err`` (the traceback before it with ``--debug``)."""
    if getattr(args, "debug", False):
        traceback.print_exception(err, file=sys.stderr)
    hint = "" if getattr(args, "debug", False) else " (--debug shows the traceback)"
    print(f"maze-lab {args.command}: error: {one_line(err)}{context}{hint if context else ''}", file=sys.stderr)


def _run_fault_types() -> tuple[type[BaseException], ...]:
    """Failures of what a run stands on rather than of its code: the disk (full, gone, no permission) and worker
    processes that died or raised (their message names the worker and carries its traceback)."""
    types: tuple[type[BaseException], ...] = (OSError,)
    for module, name in (("maze_lab.train.ray_rollouts", "RayWorkerError"),
                         ("maze_lab.train.process_rollouts", "ProcessWorkerError"),
                         ("maze_lab.train.vector_env", "VectorEnvWorkerError"),
                         ("maze_lab.train.trainers.es.workers", "ESWorkerError"),
                         ("maze_lab.train.trainers.impala.actors", "ImpalaActorError")):
        loaded = sys.modules.get(module)  # raised only where its module was loaded
        if loaded is not None:
            types += (getattr(loaded, name),)
    return types


def _report_fault(args: argparse.Namespace, err: BaseException, context: str) -> None:
    """One line on stderr for a run fault: the first line of its message (a worker's traceback follows it there),
    ``context``, and where the rest is (the traceback before it with ``--debug``)."""
    if getattr(args, "debug", False):
        traceback.print_exception(err, file=sys.stderr)
    lines = [line for line in str(err).splitlines() if line.strip()]
    first = " ".join(lines[0].split()) if lines else type(err).__name__
    rest = "its whole message and the traceback" if len(lines) > 1 else "the traceback"
    notes = [note for note in (context, "" if getattr(args, "debug", False) else f"--debug shows {rest}") if note]
    where = f" ({'; '.join(notes)})" if notes else ""
    print(f"maze-lab {args.command}: error: {type(err).__name__}: {first}{where}", file=sys.stderr)


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


def _check_config_name(args: argparse.Namespace) -> None:
    """Accept Maze's ``-cn conf_train``; any other root config name is refused with what to use instead."""
    name = getattr(args, "config_name", None)
    if name is None or name == "conf_train":
        return
    if name == "conf_rollout":
        raise BadInput("-cn conf_rollout is Maze's rollout config; maze-lab rolls out a trained run with "
                       "`maze-lab rollout RUN_DIR --episodes N`")
    raise BadInput(f"-cn {name}: maze-lab has one root config, conf_train; add your own config groups with "
                   f"--config-module my_project.conf")


def _train(args: argparse.Namespace) -> int:
    from maze_lab.run.run_context import RunContext  # composes and checks configs without importing torch

    _check_config_name(args)
    components, overrides, experiment = _split_overrides(args)
    if args.threads is not None:
        overrides["torch_threads"] = args.threads
    rc = RunContext(**components, overrides=overrides, experiment=experiment, config_module=args.config_module,
                    silent=args.silent, trust=args.trust)
    print(f"maze-lab train: {rc.training_plan()}", flush=True)
    if args.detach:
        handle = rc.train_async(detach=True)
        print(f"maze-lab train: detached; it trains on in a process of its own (its console: "
              f"{handle.run_dir / 'console.log'}); stop it with: maze-lab stop {handle.run_dir}", flush=True)
        print(f"run directory: {handle.run_dir}")
        return 0
    try:
        try:
            rc.trainer  # noqa: B018 - build envs and model first: errors here are errors of the configuration
        except KeyboardInterrupt:
            print(f"\nmaze-lab train: interrupted while building the run; run directory: {_made_run_dir(rc)}",
                  file=sys.stderr)
            return 130
        except Exception as err:  # noqa: BLE001 - any failed build: one line, the run directory says `failed`
            _report(args, err, f" (the run could not be built; run directory {_made_run_dir(rc)}, marked failed)")
            # a value the run cannot use (a config value, a refused or corrupt checkpoint) is bad input; anything
            # else (an error in the env's own code) is a failure
            return EXIT_BAD_INPUT if isinstance(err, (ValueError, *_bad_input_types())) else 1
        print(f"maze-lab train: run directory {rc.run_dir}", flush=True)
        try:
            with interrupt_once():
                rc.train()
        except KeyboardInterrupt:
            print(f"\nmaze-lab train: interrupted; run directory: {rc.run_dir} (status interrupted, the checkpoint "
                  f"of the last finished epoch kept)", file=sys.stderr)
            return 130
        except _run_fault_types() as err:  # a full disk, a worker that died: its message says all, in one line
            _report_fault(args, err, f"run directory {rc.run_dir}, marked failed")
            return 1
    finally:
        rc.close()
    summary = _read_summary(rc.run_dir)
    if summary.get("stop_reason") not in (None, "done"):
        print(f"maze-lab train: {summary['stop_reason']} (after epoch {summary.get('epoch')})")
    print(_rewards_line(summary))
    print(f"run directory: {rc.run_dir}")
    return 0


def _made_run_dir(rc: Any) -> Path | str:
    """The run directory of ``rc`` where one was made."""
    run = getattr(rc, "_run", None)
    return run.run_directory.path if run is not None else "none made"


def _read_summary(run_dir: Path) -> dict[str, Any]:
    from maze_lab.run.run_dir import RunDirectory

    directory = RunDirectory(run_dir)
    return directory.read_summary() if directory.summary_file.exists() else {}


def _fmt(value: Any) -> str:
    return "none" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def _rewards_line(summary: dict[str, Any]) -> str:
    """``evaluation reward: final X, best Y (epoch N)`` from a run summary."""
    final, best = summary.get("last_eval_reward"), summary.get("best_eval_reward")
    if final is None and best is None:
        return "evaluation reward: none recorded (the run ended before its first evaluation)"
    line = f"evaluation reward: final {_fmt(final)}, best {_fmt(best)}"
    return line + (f" (epoch {summary['best_epoch']})" if summary.get("best_epoch") is not None else "")


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
    from maze_lab.run.notebook_batch import is_batch_command, run_batch_command
    from maze_lab.run.papermill_run import NotebookRunError, parse_parameter, run_notebook

    if is_batch_command(args):  # -p key a,b,c, --jobs or --ray: one execution per combination
        return run_batch_command(args)

    # a value becomes a plain Python literal or is refused (papermill writes it into the notebook as source)
    params = {key: parse_parameter(key, value) for key, value in (args.parameters or [])}
    given = " ".join(f"-p {key} {value}" for key, value in (args.parameters or []))
    print(f"maze-lab run: executing {args.notebook}{' ' + given if given else ''} with papermill "
          f"(the notebook's output goes into the executed copy) ...", flush=True)
    started = time.monotonic()
    try:
        run_dir, executed = run_notebook(args.notebook, params, log_base_dir=args.log_base_dir,
                                         kernel_name=args.kernel)
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


# ---- sweep ---------------------------------------------------------------------------------------------------
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
    from maze_lab.run.config import training_plan
    from maze_lab.run.run_context import RunContext

    _check_config_name(args)
    overrides, experiment = parse_sweep(args.overrides)
    experiment = args.experiment or experiment
    rc = RunContext(overrides=overrides, experiment=experiment, config_module=args.config_module, silent=True,
                    multirun=True, n_jobs=args.jobs, launcher="ray" if args.ray else "local", ray_address=args.address)
    grid = " x ".join(f"{k} ({len(overrides[k])} values)" for k in rc.grid_keys) or "no swept keys"
    print(f"maze-lab sweep: {len(rc.configs)} runs over {grid}, {args.jobs} parallel job(s)"
          f"{' as Ray tasks' if args.ray else ''}", flush=True)
    plans = list(dict.fromkeys(training_plan(cfg) for cfg in rc.configs))
    print(f"maze-lab sweep: each run: {plans[0]}" if len(plans) == 1 else
          "maze-lab sweep: the runs differ: " + " | ".join(plans), flush=True)
    try:
        with interrupt_once() as caught:
            try:
                table = rc.train()
            except KeyboardInterrupt as err:  # the runs in flight were stopped and recorded interrupted
                return report_interrupted("sweep", err, caught, "run(s)")
    except Exception as err:  # noqa: BLE001 - every run failed: one line, the run directories say `failed`
        where = ", ".join(str(path) for path, _ in rc.failures[:3]) + (" ..." if len(rc.failures) > 3 else "")
        _report(args, err, f" (every run of the sweep failed; run directories {where or 'none made'}, marked "
                           f"failed)")
        return EXIT_BAD_INPUT if isinstance(err, (ValueError, *_bad_input_types())) else 1
    columns = [*rc.grid_keys, "status", "epoch", "env_steps", "best_eval_reward", "last_eval_reward",
               "final_train_reward", "run_dir"]
    print(table[[c for c in columns if c in table.columns]].to_string(index=False))
    for path, err in rc.failures:
        print(f"maze-lab sweep: run {path} failed: {one_line(err)[:500]}", file=sys.stderr)
    if rc.failures:
        print(f"maze-lab sweep: {len(rc.failures)} of {len(table)} runs failed (their maze_lab_run.json holds the "
              f"traceback)", file=sys.stderr)
        return 1
    return 0


# ---- runs ----------------------------------------------------------------------------------------------------
def _runs(args: argparse.Namespace) -> int:
    from maze_lab.run.run_dir import default_outputs_dir
    from maze_lab.run.runs import list_runs

    base = Path(args.base) if args.base is not None else default_outputs_dir()
    if not base.is_dir():
        if args.base is None:
            print(f"no runs yet: {base} does not exist (the default location of runs; see maze-lab runs --help)")
            return 0
        raise BadInput(f"{base} is not a directory; give the base directory of the runs with --base "
                       f"(the log_base_dir of the runs; default {default_outputs_dir()})")
    df = list_runs(base, group=args.group)
    if df.empty:
        print(f"no runs under {base}" + (f" in group {args.group}" if args.group else ""))
        return 0
    columns = ["created", "experiment", "status", "live", "algorithm", "env", "epoch", "env_steps",
               "best_eval_reward", "final_train_reward", "run_dir"]
    df = df.assign(live=df.live.map(lambda v: "live" if v is True else "-"))
    if df.group.notna().any():  # runs made together (sweeps, batches, studies) show their group; single runs "-"
        columns.insert(2, "group")
        df = df.assign(group=df.group.fillna("-"))
    damaged = df[df.status == "damaged"]
    print(df[columns].to_string(index=False))
    if not damaged.empty:
        print(f"\n{len(damaged)} damaged run director{'y' if len(damaged) == 1 else 'ies'}:")
        for run_dir, reason in zip(damaged.run_dir, damaged.reason, strict=True):
            print(f"  {run_dir}: {reason}")
    ended = df[df.status.isin(["died", "failed", "early-stopped", "interrupted"])]
    if not ended.empty:
        print("\nhow runs ended:")
        for run_dir, status, reason in zip(ended.run_dir, ended.status, ended.reason, strict=True):
            print(f"  {run_dir}: {status}: {reason or 'no reason recorded'}")
    return 0


# ---- control of live runs ----------------------------------------------------------------------------------------
_CONTROL_DONE = {"stop": "ended", "pause": "paused", "resume": "resumed", "checkpoint": "checkpoint written"}


def _control(args: argparse.Namespace) -> int:
    from maze_lab.run.attach import request_run
    from maze_lab.run.run_dir import NotARunDirectoryError
    from maze_lab.run.run_status import RunControlError

    try:
        state = request_run(args.run_dir, args.command, timeout=args.timeout)
    except (RunControlError, NotARunDirectoryError) as err:
        _report(args, err)
        return EXIT_BAD_INPUT if isinstance(err, NotARunDirectoryError) else 1
    extra = ""
    if args.command == "stop":
        ckpt = Path(args.run_dir) / "checkpoints" / "state_dict_last.pt"
        extra = f" (status {state.get('status')}; checkpoint {ckpt if ckpt.exists() else 'none'})"
    elif args.command == "checkpoint":
        extra = f": {(state.get('control') or {}).get('checkpoint')}"
    print(f"maze-lab {args.command}: {args.run_dir}: {_CONTROL_DONE[args.command]}{extra}")
    return 0


# ---- rollout -------------------------------------------------------------------------------------------------
def _rollout(args: argparse.Namespace) -> int:
    from maze_lab.run.runs import load_run

    run = load_run(args.run_dir, trust=args.trust)
    try:
        if not args.no_record:
            run.checked_trajectory_dir()  # episodes go only into the run (never through a symlink leading out)
        if args.workers != 1 or args.ray:  # episodes split over processes or Ray tasks, seeded as in one process
            from maze_lab.train.ray_rollouts import rollout_loaded_run

            result = rollout_loaded_run(run, args.episodes, args.workers, backend="ray" if args.ray else "processes",
                                        which=args.which, deterministic=not args.sample, seed=args.seed,
                                        record_trajectory=not args.no_record, address=args.address)
        else:
            result = run.rollout(n_episodes=args.episodes, which=args.which, deterministic=not args.sample,
                                 seed=args.seed, record_trajectory=not args.no_record)
    except (FileNotFoundError, ValueError) as err:
        raise BadInput(str(err)) from err
    except _run_fault_types() as err:  # e.g. a full disk: the episodes written before are kept
        _report_fault(args, err, "")
        return 1
    lengths = ", ".join(str(n) for n in result.episode_lengths)
    print(f"{args.episodes} episode(s) of the {args.which} policy: mean reward {result.mean_reward:.3f} "
          f"(lengths {lengths})")
    if not args.no_record:
        print(f"trajectories: {run.directory.trajectory_dir}")
    return 0


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
LAB_NOTEBOOK_CODE = (
    "# The maze-lab Lab app: `maze-lab lab` serves this notebook with voila (no code shown). In JupyterLab, run this "
    "cell.\n"
    "from maze_lab.widgets.lab_app import LabApp\n"
    "\n"
    "app = LabApp()  # runs go to $MAZE_LAB_OUTPUTS, else <project root>/outputs; LabApp(base_dir=...) picks another\n"
    "app")
"""The code of ``notebooks/lab.ipynb`` (written out where the notebook is not at hand, e.g. an installed wheel)."""

LAB_DEFAULT_PORT = 8866


def lab_notebook() -> Path:
    """The notebook of the Lab app: ``notebooks/lab.ipynb`` of the maze-lab source tree (a checkout or an editable
    install) or of the project in the working directory; else a copy written into a per-user temporary folder."""
    import json
    import tempfile

    from maze_lab.run.run_dir import project_root

    package_root = Path(__file__).resolve().parents[1]
    candidates = [package_root / "notebooks" / "lab.ipynb"]
    root = project_root()
    if root is not None:
        candidates.append(root / "notebooks" / "lab.ipynb")
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    folder = Path(tempfile.gettempdir()) / f"maze-lab-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    folder.mkdir(mode=0o700, exist_ok=True)
    notebook = folder / "lab.ipynb"
    content = {"cells": [{"cell_type": "code", "execution_count": None, "id": "maze-lab-app", "metadata": {},
                          "outputs": [], "source": LAB_NOTEBOOK_CODE.splitlines(keepends=True)}],
               "metadata": {"kernelspec": {"display_name": "maze-lab", "language": "python", "name": "maze-lab"},
                            "language_info": {"name": "python"}},
               "nbformat": 4, "nbformat_minor": 5}
    notebook.write_text(json.dumps(content, indent=1))
    return notebook


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
    train.add_argument("--silent", action="store_true", help="no console statistics tables")
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
    run.add_argument("notebook", help="notebook with a cell tagged 'parameters'")
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
                         help="split the episodes over N local processes (with --ray: N Ray tasks); default 1")
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


# ---- maze-run: the Maze framework's command lines ---------------------------------------------------------------
_ROLLOUT_IGNORED = ("env", "wrappers", "model", "critic")
_ROLLOUT_RUNNER_KEYS = {"runner.n_episodes": "--episodes", "runner.record_trajectory": "--no-record",
                        "seed": "--seed"}


def translate_maze_run(words: list[str]) -> tuple[list[str], list[str]]:
    """The ``maze-lab`` arguments for a ``maze-run`` command line, and notes on what was left out.

    ``-cn conf_train`` trains (``-m``: a sweep); Maze's default ``conf_rollout`` with ``policy=torch_policy
    input_dir=RUN`` rolls out a trained run, and without a policy (Maze's random policy) on a Gymnasium env runs the
    random-policy demo. Anything without an equivalent raises BadInput naming what to use instead.
    """
    config_name, multirun, rest = "conf_rollout", False, []
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("-cn", "--config-name"):
            if i + 1 >= len(words):
                raise BadInput(f"{word} needs a config name (conf_train or conf_rollout)")
            config_name, i = words[i + 1], i + 2
            continue
        if word.startswith("--config-name="):
            config_name = word.split("=", 1)[1]
        elif word in ("-m", "--multirun"):
            multirun = True
        elif word.split("=", 1)[0] in ("-cp", "--config-path", "-cd", "--config-dir"):
            raise BadInput(f"{word}: maze-lab finds your config groups in an importable package; pass it with "
                           f"`maze-lab train --config-module my_project.conf`")
        elif word.startswith("-"):
            raise BadInput(f"maze-run option {word} has no maze-lab equivalent; see `maze-lab train --help` and "
                           f"`maze-lab sweep --help`")
        else:
            rest.append(word)
        i += 1
    if config_name == "conf_train":
        return ["sweep" if multirun else "train", *rest], []
    if config_name != "conf_rollout":
        raise BadInput(f"-cn {config_name}: maze-lab has one root config for training, conf_train (maze-run -cn "
                       f"conf_train = maze-lab train); add your own config groups with --config-module")
    if multirun:
        raise BadInput("maze-run -m with the rollout config has no maze-lab equivalent; run one "
                       "`maze-lab rollout RUN_DIR` per run")
    return _translate_rollout(rest)


def _translate_rollout(words: list[str]) -> tuple[list[str], list[str]]:
    values: dict[str, str] = {}
    for word in words:
        if "=" not in word:
            raise BadInput(f"'{word}' must look like key=value (e.g. policy=torch_policy input_dir=outputs/...)")
        key, value = word.split("=", 1)
        values[key.lstrip("+")] = value
    policy, input_dir = values.pop("policy", None), values.pop("input_dir", None)
    options: list[str] = []
    for key, flag in _ROLLOUT_RUNNER_KEYS.items():
        if key in values:
            value = values.pop(key)
            if flag == "--no-record":
                options += [flag] if value.lower() in ("false", "0", "no") else []
            else:
                options += [flag, value]
    if values.pop("runner", "sequential") not in ("sequential", "parallel"):
        raise BadInput("Maze's rollout runners are sequential and parallel; maze-lab rolls out in this process")
    if values.get("runner.render", "false").lower() in ("true", "1", "yes"):
        raise BadInput("maze-lab does not render rollouts live; rollouts are recorded into <run>/trajectories/, view "
                       "them with maze_lab.widgets.trajectory_viewer.TrajectoryViewer in a notebook")
    values.pop("runner.render", None)
    for key in ("runner.n_processes", "runner.max_episode_steps", "runner.record_event_logs"):
        values.pop(key, None)  # maze-lab's rollout runs in this process; episodes end with the env's own limit
    if policy in (None, "random_policy"):
        env, name = values.pop("env", "gym_env"), values.pop("env.name", None)
        leftover = sorted(k for k in values if k.split(".", 1)[0] not in _ROLLOUT_IGNORED)
        if env != "gym_env" or name is None or leftover:
            raise BadInput("without policy=torch_policy, maze-run rolls out a random policy; maze-lab's equivalent "
                           "is `maze-lab demo --env GYM_ID --episodes N` (Gymnasium envs: env=gym_env env.name=ID), "
                           "and maze_lab.core.rollout.SequentialRolloutRunner in Python for any env and policy")
        episodes = options[options.index("--episodes") + 1] if "--episodes" in options else None
        demo = ["demo", "--env", name, *(["--epochs", "1", "--episodes", episodes] if episodes else [])]
        return demo, [f"ignored: {k}" for k in sorted(values)]
    if policy != "torch_policy":
        raise BadInput(f"policy={policy}: maze-lab rolls out the policy of a trained run with `maze-lab rollout "
                       f"RUN_DIR` (Maze: policy=torch_policy input_dir=RUN_DIR); heuristic policies roll out with "
                       f"maze_lab.core.rollout.SequentialRolloutRunner in Python")
    if not input_dir:
        raise BadInput("policy=torch_policy needs input_dir=RUN_DIR, the run directory of the training run")
    unknown = sorted(k for k in values if k.split(".", 1)[0] not in _ROLLOUT_IGNORED)
    if unknown:
        raise BadInput(f"maze-run rollout setting(s) {', '.join(unknown)} have no maze-lab equivalent; "
                       f"`maze-lab rollout --help` lists what a rollout takes")
    notes = [f"the run's own {', '.join(sorted({k.split('.', 1)[0] for k in values}))} config is used "
             f"(from {input_dir}/config.yaml)"] if values else []
    return ["rollout", input_dir, *options], notes


def maze_run_main(argv: list[str] | None = None) -> int:
    """Entry point of ``maze-run``: runs the maze-lab equivalent of a Maze command line, saying which."""
    words = list(sys.argv[1:] if argv is None else argv)
    if not words or words[0] in ("-h", "--help"):
        print("maze-run: Maze's command line, run by maze-lab.\n"
              "  maze-run -cn conf_train [overrides]        = maze-lab train [overrides]\n"
              "  maze-run -cn conf_train -m key=a,b [...]   = maze-lab sweep key=a,b [...]\n"
              "  maze-run policy=torch_policy input_dir=RUN [runner.n_episodes=N] = maze-lab rollout RUN --episodes N\n"
              "  maze-run env=gym_env env.name=ID [runner.n_episodes=N]          = maze-lab demo --env ID --episodes N")
        return 0 if words else EXIT_BAD_INPUT
    try:
        translated, notes = translate_maze_run(words)
    except BadInput as err:
        print(f"maze-run: error: {one_line(err)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"maze-run: running `maze-lab {shlex.join(translated)}`", file=sys.stderr, flush=True)
    for note in notes:
        print(f"maze-run: {note}", file=sys.stderr, flush=True)
    return main(translated)


if __name__ == "__main__":
    sys.exit(main())
