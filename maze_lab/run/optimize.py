"""Hyperparameter search with Optuna: ``maze-lab optimize --space ppo_cartpole`` and :func:`optimize`.

A search space is a YAML file of the config group ``search_space`` (``maze_lab/conf/search_space/<name>.yaml``, or
the same folder of a ``config_module``) or a path: the training configuration the trials start from, the study's
settings (direction, objective, number of trials, sampler, pruner) and one distribution per dotted config key.

Every trial is an ordinary maze-lab run directory, ``<study dir>/trial_<number>``, trained through
:class:`~maze_lab.run.run_context.RunContext` with the trial's values as overrides; its summary records the trial
(``optuna``: study, number, params, state). After each epoch the trial reports its evaluation reward to Optuna and
stops (a checkpoint of the current weights is written) when the pruner says so. The study is an SQLite file,
``<study dir>/study.db``, so running the same search again resumes it: the trials already finished are kept and only
the missing ones run, numbered on from the last.

Trials run one at a time in this process, in ``n_jobs`` local worker processes, or as Ray tasks (``backend="ray"``:
a local Ray started here, or a cluster given by ``address``). One process at a time uses the SQLite file: the driver
(this process) opens the study, and while trials run in workers it starts Optuna's gRPC storage proxy in a process of
its own (:mod:`maze_lab.run.optuna_proxy`, Optuna's public ``run_grpc_proxy_server``), which alone uses the file
until the trials have ended: the driver asks Optuna for each trial's values and tells it the result through the
proxy, and the workers report their per-epoch rewards and ask whether to prune through it. SQLite locks the whole
file on every write and, on a network file system, its locks cannot be trusted; with one process using the file no
write waits on another process's lock, and workers on other machines of a Ray cluster need no access to the file at
all. The proxy listens only on the address the workers reach the driver at (loopback unless Ray runs them on other
machines of a cluster, where it listens on this machine's address in the cluster's network, without
authentication, as Optuna's proxy does: run clusters on a network you trust).

Interrupted (Ctrl-C, or SIGTERM of ``maze-lab optimize``), the driver asks no further trial; the trials in flight
have their runs stopped through their run directories (a checkpoint of their current weights), their workers ended,
their runs recorded ``interrupted`` and their trials ``FAIL`` with ``interrupted`` (a resumed study runs them again);
:class:`~maze_lab.run.ray_tasks.RunsInterrupted`, a KeyboardInterrupt, says so. A trial run one at a time trains in
the driver's own process, and a worker process ends when its driver is gone: a driver killed outright (SIGKILL)
leaves no trial training, and its trials' runs read ``died``.

A search space and a study directory are untrusted input, as a run directory is (they are shared, downloaded,
copied from a colleague): before anything is composed or run, every ``_target_``, dotted name and Gymnasium
``module:EnvId`` that the space's ``overrides`` and choices hold is checked against the allow-list of run directories
(:class:`~maze_lab.core.utils.factory.TrustPolicy`: maze-lab's own classes and env factories, torch.nn modules,
Gymnasium spaces and env ids), plus the names the configuration composed without the space already uses, the
packages of ``config_module`` and what ``trust=`` / ``--trust`` adds. What the study directory holds (``study.db``
and its journal, the lock, ``search_space.yaml``, ``best_*.yaml``, the trial directories) must be a regular file (a
directory) inside it: a symlink leaving it, a FIFO, a device or a socket is refused with one line naming the path, as
is a ``study.db`` that is not an SQLite database or is damaged, and one that another process holds locked (after a
wait of :data:`DB_LOCK_WAIT_S`).

The search space is :mod:`maze_lab.run.search_space`, the study directory and database :mod:`maze_lab.run.study`, the
trials and where they run :mod:`maze_lab.run.trials`, the table of trials and the best files
:mod:`maze_lab.run.study_results`; their public names stay importable from here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.run.search_space import (
    DIRECTIONS,
    DISTRIBUTIONS,
    OBJECTIVES,
    PRUNERS,
    SAMPLERS,
    SPACE_GROUP,
    ParamSpec,
    SearchSpace,
    SearchSpaceTrustError,
    StudySettings,
    available_spaces,
    check_space_keys,
    check_space_trust,
    configuration_names,
    load_search_space,
    space_dirs,
    space_names,
)
from maze_lab.run.study import (
    DB_LOCK_WAIT_S,
    FINISHED,
    STUDY_DB,
    TRIAL_DIR,
    fail_stale_trials,
    make_pruner,
    make_sampler,
    note_space,
    open_study,
    study_directory,
    study_lock,
    study_storage,
)
from maze_lab.run.study_results import OptimizeResult, finish_study, format_table, trials_table
from maze_lab.run.trials import connect_ray, run_trial, run_trials, say_above_bar, shutdown_ray

__all__ = ["DB_LOCK_WAIT_S", "DIRECTIONS", "DISTRIBUTIONS", "OBJECTIVES", "PRUNERS", "SAMPLERS", "SPACE_GROUP",
           "STUDY_DB", "TRIAL_DIR", "OptimizeResult", "ParamSpec", "SearchSpace", "SearchSpaceTrustError",
           "StudySettings", "add_optimize_parser", "available_spaces", "check_space_keys", "check_space_trust",
           "connect_ray", "default_study_dir", "format_table", "load_search_space", "make_pruner", "make_sampler",
           "optimize", "run_trial", "space_dirs", "space_names", "study_storage", "trials_table"]


def default_study_dir(cfg: DictConfig, space_name: str) -> Path:
    """``<log_base_dir>/<experiment_name>/optimize-<space name>``."""
    return Path(str(cfg.log_base_dir)) / str(cfg.experiment_name) / f"optimize-{space_name}"


def optimize(space: str | Path | Mapping[str, Any] | SearchSpace, overrides: Mapping[str, Any] | None = None,
             n_trials: int | None = None, n_jobs: int = 1, backend: str = "local",
             study_dir: str | Path | None = None, address: str | None = None, experiment: str | None = None,
             config_module: str | list[str] | None = None, quiet: bool = False,
             trust: list[str] | tuple[str, ...] | str | None = None) -> OptimizeResult:
    """Search hyperparameters with Optuna; every trial is a maze-lab run under the study directory.

    :param space: a search space of the ``search_space`` config group (``"ppo_cartpole"``), a YAML path, or a dict
        with ``params``, ``study``, ``overrides`` and ``experiment`` as such a file has them.
    :param overrides: config overrides of every trial (``{"env.name": "CartPole-v1", "n_epochs": 3}``), on top of
        the space's own; a group name with an option name selects that option.
    :param n_trials: the number of trials the study should hold (default: the space's ``study.n_trials``); a
        resumed study runs only the missing ones.
    :param n_jobs: trials run at the same time (local worker processes, or Ray tasks in flight).
    :param backend: ``"local"`` (this process, or ``n_jobs`` worker processes) or ``"ray"`` (Ray tasks; an
        initialised Ray is used, else ``address``, else a local Ray is started and shut down at the end).
    :param study_dir: where the study lives (default ``<log_base_dir>/<experiment_name>/optimize-<space name>``); a
        directory holding a study resumes it.
    :param address: with ``backend="ray"``: the Ray cluster (``ray://host:10001`` or ``auto``).
    :param experiment: an experiment file (replaces the space's).
    :param config_module: importable package(s) with your own config groups (and ``search_space`` files).
    :param quiet: print nothing (otherwise one line per trial and the table of trials at the end).
    :param trust: modules or dotted names of your own that the search space may name (``["my_project"]``); without
        it a search space names only what a run directory may (see :func:`check_space_trust`). Resuming from a run
        (``input_dir``) trusts them too.
    :raises SearchSpaceTrustError: the search space names something off the allow-list (nothing ran).
    :raises ConfigurationError: a bad search space or setting, or a study directory whose files are not regular files
        inside it, whose ``study.db`` is damaged or held locked by another process.
    """
    from maze_lab.run.config import GROUPS, compose_config, describe_run, training_plan

    if backend not in ("local", "ray"):
        raise ConfigurationError(f"backend must be 'local' or 'ray', got {backend!r}")
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1:
        raise ConfigurationError(f"n_jobs must be an int >= 1, got {n_jobs!r}")
    if n_trials is not None and (isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1):
        raise ConfigurationError(f"n_trials must be an int >= 1, got {n_trials!r}")
    config_modules = [config_module] if isinstance(config_module, str) else list(config_module or [])
    spec = load_search_space(space, config_modules)
    merged = {**spec.overrides, **dict(overrides or {})}
    components = {k: merged.pop(k) for k in list(merged) if k in GROUPS and isinstance(merged[k], str)}
    named = merged.pop("experiment", None)  # experiment=NAME among the overrides selects the file, as in train
    experiment = experiment or named or spec.experiment

    def own_names() -> list[str]:
        """The names of the configuration without the space's own keys (its option and experiment files are the
        config groups' files): what the trials would use anyway."""
        own = {k: v for k, v in dict(overrides or {}).items() if k != "experiment" and k in merged}
        try:
            cfg = compose_config(components, own, experiment, config_modules)
        except ConfigurationError:
            return []
        return list(dict.fromkeys(configuration_names(OmegaConf.to_container(cfg, resolve=True))))

    # before anything of the space is composed (composing imports an algorithm's _target_) or run
    check_space_trust(spec, trust, config_modules, own_names)
    base = compose_config(components, merged, experiment, config_modules)
    check_space_keys(spec, base, config_modules)
    target = n_trials if n_trials is not None else spec.study.n_trials
    study_path = Path(study_dir) if study_dir is not None else default_study_dir(base, spec.name)
    # Ray first: a cluster that cannot be reached is reported before a study directory is made
    ray_started = connect_ray(address, num_cpus=max(n_jobs, 1)) if backend == "ray" else False
    with contextlib.ExitStack() as stack:
        if ray_started:  # started here: shut down at the end (an initialised Ray is the caller's)
            stack.callback(shutdown_ray)
        study_path = study_directory(study_path)
        say = (lambda *a, **k: None) if quiet else say_above_bar  # noqa: E731

        with study_lock(study_path):
            study_name = f"optimize-{spec.name}"
            storage, study = open_study(study_path, study_name, spec)
            if study.direction.name.lower() != spec.study.direction:
                raise ConfigurationError(f"the study in {study_path} was made with direction "
                                         f"{study.direction.name.lower()}; this search space asks for "
                                         f"{spec.study.direction}: use another study_dir")
            note_space(study, spec, study_path, say)
            fail_stale_trials(study, say)
            done = [t for t in study.get_trials(deepcopy=False) if t.state.name in FINISHED
                    and not t.user_attrs.get("interrupted")]
            study.sampler = make_sampler(spec.study.sampler, seed_offset=len(study.get_trials(deepcopy=False)),
                                         parallel=n_jobs > 1)
            missing = max(0, target - len(done))
            mode = (f"{n_jobs} Ray task(s) at a time" if backend == "ray" else
                    f"{n_jobs} worker process(es)" if n_jobs > 1 else "one at a time in this process")
            say(f"maze-lab optimize: study {study_name} in {study_path}: {target} trials wanted, {len(done)} finished, "
                f"{missing} to run ({mode})")
            say(f"maze-lab optimize: each trial: {describe_run(base)}, {training_plan(base)}; sampled: "
                f"{', '.join(spec.params)}")
            job_base = {"components": components, "overrides": merged, "experiment": experiment,
                        "config_modules": config_modules, "study_name": study_name, "study_dir": str(study_path),
                        "objective": spec.study.objective, "pruner": spec.study.pruner,
                        "trust": [trust] if isinstance(trust, str) else list(trust or [])}
            ran = run_trials(study, spec, missing, n_jobs, backend, address, study_path, job_base, say) \
                if missing else []
            result = finish_study(study, spec, study_path, ran)
    if not quiet:
        print(format_table(result.table), flush=True)
        if result.best_trial is not None:
            print(f"maze-lab optimize: best trial {result.best_trial} ({spec.study.objective} {result.best_value:g}): "
                  f"{result.best_params}; config {result.best_config_path}", flush=True)
        else:
            print("maze-lab optimize: no trial completed; no best config written", flush=True)
    return result


# ---- the command line ----------------------------------------------------------------------------------------------
def add_optimize_parser(sub: Any, common: Any) -> None:
    """The ``maze-lab optimize`` sub-command."""
    p = sub.add_parser("optimize", parents=[common], help="hyperparameter search with Optuna (trials are runs)",
                       description="Search hyperparameters with Optuna. The search space is a file of the config "
                                   "group search_space (maze_lab/conf/search_space/) or a YAML path; every trial is "
                                   "a run directory under the study directory (<log_base_dir>/<experiment_name>/"
                                   "optimize-<space>, with study.db, best_config.yaml and best_params.yaml). Running "
                                   "the same search again resumes the study.")
    p.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                   help="group=option or dotted.key=value for every trial")
    p.add_argument("--space", required=True, help="search space: a name of the search_space group or a YAML file")
    p.add_argument("--trials", type=int, default=None,
                   help="trials the study should hold (default: the space's study.n_trials); only missing ones run")
    p.add_argument("--jobs", "-j", type=int, default=1, help="trials at the same time (worker processes or Ray tasks)")
    p.add_argument("--ray", action="store_true", help="run the trials as Ray tasks (a local Ray unless --address)")
    p.add_argument("--address", default=None, help="with --ray: the Ray cluster to use (e.g. auto or ray://HOST:10001)")
    p.add_argument("--study-dir", default=None, help="where the study lives (default <log_base_dir>/<experiment_name>/"
                                                     "optimize-<space>)")
    p.add_argument("--experiment", help="experiment file (config group 'experiment')")
    p.add_argument("--config-module", action="append", help="importable package with your own config groups")
    p.add_argument("--trust", action="append", metavar="MODULE",
                   help="a module (my_project) or dotted name of your own that the search space may name; "
                        "repeatable. Without it a search space (like a run directory) names only maze-lab's own "
                        "classes and env factories, torch.nn modules and Gymnasium env ids")
    p.set_defaults(func=_optimize_command)


def _optimize_command(args: Any) -> int:
    """``maze-lab optimize``: exit 0 where a trial completed, 1 where none did, 2 for bad input (by the caller)."""
    from maze_lab.run.config import parse_cli_overrides

    if args.address and not args.ray:
        raise ConfigurationError("--address names a Ray cluster: add --ray")
    components, overrides = parse_cli_overrides(args.overrides)
    experiment = components.pop("experiment", None)
    import optuna

    from maze_lab.run.commands import interrupt_once, report_interrupted

    # the command's own process: optuna's notice per trial repeats the lines maze-lab prints (a library call of
    # optimize() leaves optuna's logging as the application set it)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.perf_counter()
    # Ctrl-C or SIGTERM: no further trial, the trials in flight stopped and recorded interrupted, one line
    with interrupt_once() as caught:
        try:
            result = optimize(args.space, overrides={**components, **overrides}, n_trials=args.trials,
                              n_jobs=args.jobs, backend="ray" if args.ray else "local", study_dir=args.study_dir,
                              address=args.address, experiment=args.experiment or experiment,
                              config_module=args.config_module, trust=args.trust)
        except KeyboardInterrupt as err:
            return report_interrupted("optimize", err, caught, "trial(s)",
                                      "; run the same command again to resume the study")
    print(f"maze-lab optimize: {len(result.ran)} trial(s) run in {time.perf_counter() - start:.0f} s; study "
          f"{result.study_dir / 'study.db'} (maze-lab runs --base {result.study_dir})", flush=True)
    return 0 if result.best_trial is not None else 1
