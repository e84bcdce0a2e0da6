"""``maze-lab demo``, ``train`` and ``sweep``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from maze_lab.cli.errors import EXIT_BAD_INPUT, _bad_input_types, _report, _report_fault, _run_fault_types
from maze_lab.run.commands import BadInput, interrupt_once, one_line, report_interrupted


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
                    silent=args.silent, verbose=args.verbose, trust=args.trust)
    print(f"maze-lab train: {rc.training_plan()}", flush=True)
    print(f"maze-lab train: {rc.describe()}", flush=True)
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


# ---- sweep ---------------------------------------------------------------------------------------------------
def parse_sweep(words: list[str]) -> tuple[dict[str, Any], str | None]:
    """Overrides with lists for the swept keys and the experiment, from ``key=value`` words in Hydra's override
    grammar (``key=a,b,c``, ``key=range(1,4)``, ``key=choice(a,b)``)."""
    from maze_lab.run.config import parse_override

    overrides: dict[str, Any] = {}
    experiment = None
    for word in words:
        if "=" not in word:
            raise BadInput(f"'{word}' must look like key=value or key=a,b,c (e.g. algorithm.lr=0.001,0.0005)")
        key, values, sweep = parse_override(word)
        if key == "experiment":
            if sweep:
                raise BadInput("experiment cannot be swept; run one sweep per experiment")
            experiment = values[0]
        else:
            overrides[key] = values if sweep else values[0]
    return overrides, experiment


def _sweep(args: argparse.Namespace) -> int:
    from maze_lab.run.config import describe_run, training_plan
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
    # what runs: env, algorithm, model and runner where the runs share them, and the seeds of the runs
    described = list(dict.fromkeys(describe_run(cfg).rsplit(", seed ", 1)[0] for cfg in rc.configs))
    seeds = ", ".join(str(cfg.get("seed")) for cfg in rc.configs)
    print(f"maze-lab sweep: {described[0] if len(described) == 1 else ' | '.join(described)}; seeds {seeds}",
          flush=True)
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
