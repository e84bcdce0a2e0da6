"""RunContext: the Python entry point for training, evaluation and acting, from configs or objects."""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import itertools
import secrets
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf

from maze_lab.core.utils.factory import ConfigurationError, TrustPolicy, config_names
from maze_lab.core.utils.log import get_logger
from maze_lab.run.config import GROUPS, build_algorithm_config, compose_config, training_plan, validate_config
from maze_lab.run.env_factory import RunEnvFactory, wrappers_in_run_dir
from maze_lab.run.kernel_yield import background_run
from maze_lab.run.run_dir import (
    MARKER,
    RUN_OUTPUTS,
    DamagedRunError,
    ExistingRunError,
    RunDirectory,
    new_run_dir,
    versions,
)
from maze_lab.run.run_status import RunControlError, RunOwner

_log = get_logger(__name__)

FROM_CONFIG: Literal["config"] = "config"
"""Default of ``torch_threads`` arguments: the run config's ``torch_threads`` (1 unless overridden)."""

ThreadsArg = int | None | Literal["config"]


def _is_object(value: Any) -> bool:
    """Anything but a config name, a config dict or None is an object (factory, instance)."""
    return value is not None and not isinstance(value, str | Mapping | DictConfig)


class RunContext:
    """Compose a run from config names, config dicts or Python objects; train (blocking or in the background),
    evaluate and act.

    :param env: env option name (``gym_env``, ``cutting2d_struct_masked``...), a config dict, or a callable
        that returns a maze-lab env.
    :param wrappers: wrappers option name or a mapping ``{WrapperName: params}``.
    :param model: model option name, config dict, or a model composer / TorchActorCritic instance.
    :param critic: critic option name or config dict.
    :param algorithm: ``ppo`` / ``a2c``, a config dict, or an algorithm config instance.
    :param runner: ``dev`` (in-process envs) / ``local`` (one process per env), or a config dict.
    :param overrides: dotted key -> value (``{"env.name": "Pendulum-v1", "algorithm.lr": 0.001}``); with
        ``multirun=True`` list values span a grid.
    :param experiment: an experiment file from the ``experiment`` group.
    :param config_module: importable package(s) with your own config groups.
    :param run_dir: where to write the run (default ``<log_base_dir>/<experiment_name>/<timestamp>``; ``log_base_dir``
        defaults to ``$MAZE_LAB_OUTPUTS``, else ``<project root>/outputs``, see ``maze_lab.run.run_dir``).
    :param silent: nothing on the console while training (no epoch lines, no progress bar).
    :param verbose: the full statistics tables of every epoch on the console besides the epoch lines (the
        statistics always go to the run directory and TensorBoard).
    :param multirun: treat list values in ``overrides`` as a grid (one run per combination).
    :param n_jobs: for grids: runs in parallel worker processes (Ray tasks in flight with ``launcher="ray"``).
    :param launcher: for grids: ``local`` (worker processes of this machine) or ``ray`` (each run a Ray task, see
        ``maze_lab.run.ray_tasks``).
    :param ray_address: with ``launcher="ray"``: None starts a local Ray (an initialized Ray is reused), ``auto`` or
        ``host:6379`` / ``ray://host:10001`` joins a cluster.
    :param trust: when resuming (``input_dir``): modules or dotted names of your own that the earlier run's
        ``config.yaml`` may name besides maze-lab's own classes and the names of this run's configuration (see
        ``maze_lab.core.utils.factory.TrustPolicy``).
    :param overwrite: allow ``run_dir`` to be an existing run whose results are then replaced (without it, an
        existing run is refused unless this run resumes from it: ``overrides={"input_dir": run_dir}``).
    """

    def __init__(self, env: Any = None, wrappers: Any = None, model: Any = None, critic: Any = None,
                 algorithm: Any = None, runner: Any = None, overrides: Mapping[str, Any] | None = None,
                 experiment: str | None = None, config_module: str | list[str] | None = None,
                 run_dir: str | Path | None = None, silent: bool = False, multirun: bool = False, n_jobs: int = 1,
                 trust: Iterable[str] | str | None = None, overwrite: bool = False, launcher: str = "local",
                 ray_address: str | None = None, verbose: bool = False):
        components = {"env": env, "wrappers": wrappers, "model": model, "critic": critic, "algorithm": algorithm,
                      "runner": runner}
        self._objects = {k: v for k, v in components.items() if _is_object(v)}
        if "env" in self._objects and not callable(self._objects["env"]):
            raise ConfigurationError("env must be an option name, a config dict or a callable returning an env "
                                     "(e.g. lambda: GymMazeEnv('CartPole-v1')); an env instance cannot be shared "
                                     "between the training and evaluation envs")
        self._components = {k: v for k, v in components.items() if v is not None and k not in self._objects}
        self._config_modules = [config_module] if isinstance(config_module, str) else list(config_module or [])
        self._experiment = experiment
        self.silent = silent
        self.verbose = verbose
        self.multirun = multirun
        self.n_jobs = n_jobs
        from maze_lab.run.ray_tasks import LAUNCHERS

        if launcher not in LAUNCHERS:
            raise ConfigurationError(f"launcher '{launcher}' is not one of {', '.join(LAUNCHERS)}")
        if ray_address is not None and launcher != "ray":
            raise ConfigurationError(f"ray_address={ray_address!r} names a Ray cluster; pass launcher='ray' with it")
        self.launcher, self.ray_address = launcher, ray_address
        overrides = dict(overrides or {})
        if multirun:
            grid_keys = [k for k, v in overrides.items() if isinstance(v, list | tuple)]
            base = {k: v for k, v in overrides.items() if k not in grid_keys}
            combos = list(itertools.product(*(overrides[k] for k in grid_keys))) if grid_keys else [()]
            self.grid = [{**base, **dict(zip(grid_keys, combo, strict=True))} for combo in combos]
            self.grid_keys = grid_keys
            self.configs = [self._compose(o) for o in self.grid]
            self.config = self.configs[0]
        else:
            self.grid, self.grid_keys = [overrides], []
            self.config = self._compose(overrides)
            self.configs = [self.config]
        for cfg, given in zip(self.configs, self.grid, strict=True):
            if "algorithm" not in self._objects:
                validate_config(cfg, given)  # before anything heavy is imported or any directory is made
            if cfg.get("input_dir"):
                # refuse a directory that is not a run, or one whose config names untrusted code, before making one
                _check_resume_source(RunDirectory.open(cfg.input_dir), cfg, trust, self._config_modules)
        self._requested_run_dir = Path(run_dir) if run_dir is not None else None
        self._previous = _previous_results(self._requested_run_dir, self.config, overwrite) \
            if self._requested_run_dir is not None and not multirun else "none"
        self._run: _Run | None = None
        self._best_policy: tuple[Any, Any] | None = None  # (best state dict, a policy holding it)
        self.runs: list[_Run] = []
        self.failures: list[tuple[Path, BaseException]] = []
        self.detached_runs: list[Path] = []
        """Run directories of the detached runs this RunContext started."""
        """The runs of a grid that failed: (run directory, error); the grid goes on past them."""

    def _compose(self, overrides: Mapping[str, Any]) -> DictConfig:
        return compose_config(self._components, overrides, self._experiment, self._config_modules)

    # ---- the run -------------------------------------------------------------------------------------------
    def _single(self) -> _Run:
        if self.multirun:
            raise ConfigurationError("this RunContext is a grid (multirun=True): use train() for all runs, or "
                                     "index rc.runs after training")
        if self._run is None:
            self._run = _Run(self.config, self._objects, self._requested_run_dir, self.silent, self._previous,
                             verbose=self.verbose)
            self.runs = [self._run]
        return self._run

    @property
    def run_dir(self) -> Path:
        """The run directory (created on first use; that of the latest detached run where one was started)."""
        if self._run is None and self.detached_runs:
            return self.detached_runs[-1]
        return self._single().run_directory.path

    @property
    def trainer(self) -> Any:
        """The trainer (built on first use)."""
        return self._single().trainer

    @property
    def policy(self) -> Any:
        """The policy being trained."""
        return self._single().trainer.policy

    @property
    def stats(self) -> Any:
        """Statistics so far as a long-format DataFrame (epoch, prefix, topic, event, name, value)."""
        return self._single().store.to_dataframe()

    def training_plan(self, n_epochs: int | None = None) -> str:
        """How long ``train(n_epochs)`` trains, in one line (a number of epochs, or until early stopping)."""
        _check_n_epochs(n_epochs)
        if "algorithm" in self._objects:
            obj = run_algorithm_object(self._objects["algorithm"], self.config)
            epochs = n_epochs if n_epochs is not None else obj.n_epochs
            patience = getattr(obj, "patience", 0)  # BC has none: it trains until stopped
            return (f"training for {epochs} epochs" if epochs else
                    f"training until early stopping (patience {patience}) or Ctrl-C" if patience else
                    "training until you stop it (Ctrl-C)")
        built = self._run._trainer if self._run is not None else None
        # once the trainer is built, its env's action space says whether the bounded-Box values apply
        known = bool(built.bounded_box_changes) if built is not None else None
        return training_plan(self.config, n_epochs, bounded_box=known)

    def describe(self) -> str:
        """What the run trains, in one line: env, algorithm, model, runner and seed."""
        from maze_lab.run.config import describe_run

        return describe_run(self.config, env_factory=self._objects.get("env"))

    def _torch_threads(self, torch_threads: ThreadsArg) -> int | None:
        if torch_threads != FROM_CONFIG:
            return torch_threads
        value = self.config.get("torch_threads", 1)
        return None if value is None else int(value)

    def train(self, n_epochs: int | None = None, torch_threads: ThreadsArg = FROM_CONFIG) -> Any:
        """Train (blocking). Returns this RunContext; for grids a DataFrame comparing the runs.

        In a grid a run that fails does not stop the others: it is marked ``failed`` in its directory, listed in
        the table with that status and in :attr:`failures`; where every run failed, the first run's error is
        raised. A grid interrupted (Ctrl-C; SIGTERM under ``maze-lab sweep``) starts no further run; the runs in
        flight are stopped through their run directories (a checkpoint of their current weights), their workers
        ended, and each is recorded ``interrupted``; then :class:`~maze_lab.run.ray_tasks.RunsInterrupted`, a
        KeyboardInterrupt, is raised (see :func:`maze_lab.run.ray_tasks.interrupt_runs`).

        :param torch_threads: torch intra-op threads while training, put back afterwards; default the config's
            ``torch_threads`` (1), None keeps torch's default. As for ``train_async``: one thread is fastest for the
            small networks of RL on CPU.
        """
        _check_n_epochs(n_epochs)
        threads = self._torch_threads(torch_threads)
        if self.multirun:
            with torch_threads_of_this_thread(threads):
                return self._train_grid(n_epochs)
        run = self._single()
        with torch_threads_of_this_thread(threads):
            run.train(n_epochs)
        return self

    def train_async(self, n_epochs: int | None = None, torch_threads: ThreadsArg = FROM_CONFIG,
                    detach: bool = False) -> Any:
        """Start training in the background and return a handle at once.

        By default the run trains in a thread of this process (a kernel: the live env and policy are there to look
        at) and the handle is a :class:`RunHandle`. With ``detach=True`` it trains in a process of its own that
        outlives this kernel (its console goes to ``console.log`` in the run directory) and the handle is an
        :class:`~maze_lab.run.attach.AttachedRun`; either can be paused, resumed and stopped from any process
        through the run directory (``maze-lab stop RUN_DIR``, the cockpit, the Lab app).

        :param torch_threads: torch intra-op threads of the training thread only (the kernel's own setting is
            untouched); default the config's ``torch_threads`` (1), None keeps torch's default. One thread is fastest
            for the small networks of RL on CPU: with more, OpenMP runs a second thread pool beside the kernel's and
            small ops get several times slower.
        :param detach: train in a process of its own (see above).
        """
        _check_n_epochs(n_epochs)
        if detach:
            return self._start_detached(n_epochs, self._torch_threads(torch_threads))
        run = self._single()
        return run.start_async(n_epochs, self._torch_threads(torch_threads))

    def _start_detached(self, n_epochs: int | None, torch_threads: int | None) -> Any:
        from maze_lab.run.attach import AttachedRun
        from maze_lab.run.detached import start_detached

        if self.multirun:
            raise ConfigurationError("this RunContext is a grid (multirun=True): detach=True starts one run; use "
                                     "`maze-lab sweep` or train() for a grid")
        if self._run is not None:
            raise RuntimeError(f"this RunContext already built its run in this process ({self._run.run_directory.path})"
                               f"; make a new RunContext to start a detached run")
        cfg = self.config
        path = self._requested_run_dir or new_run_dir(cfg.log_base_dir, cfg.experiment_name)
        path.mkdir(parents=True, exist_ok=True)
        start_detached(OmegaConf.to_container(cfg), dict(self._objects), path, n_epochs, torch_threads,
                       silent=self.silent, previous=self._previous, verbose=self.verbose)
        self.detached_runs.append(path)
        return AttachedRun(path)

    def evaluate(self, n_episodes: int | None = None, deterministic: bool | None = None,
                 which: str = "best", seed: int | None = None) -> dict[str, float]:
        """Evaluate the policy; returns ``{"Topic/event/name": value}`` of the evaluation episodes (also written into
        the run's statistics). Like ``evaluate``, ``compute_action`` and ``rollout`` run torch with the config's
        ``torch_threads`` (then put the caller's setting back): with torch's default in a kernel, evaluating took
        50x longer.

        :param which: the weights that act (see :meth:`weights`): ``best`` (default, as ``maze-lab rollout``), the
            weights of the run's best evaluation, or ``last``, the weights as training left them.
        :param seed: seed of the evaluation episodes (default: the evaluation envs go on with their own stream).
        """
        run = self._single()
        if run.handle is not None and run.handle.running:
            raise RuntimeError("the run is training in the background; evaluate after it ended (handle.wait()) or "
                               "stop it (handle.stop()) — both would use the same evaluation envs")
        trainer = run.trainer
        best = self._best_state(which)
        saved = copy.deepcopy(trainer.model.state_dict()) if best is not None else None
        try:
            if best is not None:
                trainer.model.load_state_dict(best)
            with torch_threads_of_this_thread(self._torch_threads(FROM_CONFIG)):
                trainer.evaluate(deterministic=deterministic, repeats=n_episodes, seed=seed)
        finally:
            if saved is not None:  # training goes on from where it was
                trainer.model.load_state_dict(saved)
        return {f"{k.topic}/{k.event_name}/{k.label}": v for k, v in trainer.evaluator.last_stats.items()
                if not isinstance(v, list)}

    def weights(self, which: str = "best") -> str:
        """Which weights ``compute_action``, ``evaluate`` and ``rollout`` act with for ``which``: ``best`` gives
        those of the run's best evaluation so far ("best (epoch N, reward R)"), or the current weights ("last")
        while no evaluation has been made (before training); ``last`` gives the weights as training left them."""
        if self._best_state(which) is None:
            return "last"
        selection = self._single().trainer.model_selection
        return f"best (epoch {selection.best_epoch}, reward {selection.best_reward:.4g})"

    def _best_state(self, which: str) -> dict[str, Any] | None:
        """The state dict of the best evaluation where ``which`` is ``best`` and one exists, else None."""
        if which not in WHICH_WEIGHTS:
            raise ValueError(f"which={which!r} names no weights; valid: {', '.join(map(repr, WHICH_WEIGHTS))}")
        return self._single().trainer.model_selection.best_state if which == "best" else None

    def _acting_policy(self, which: str) -> Any:
        """The trainer's policy (``last``, or ``best`` before any evaluation), or a copy holding the best weights
        (made once per new best)."""
        trainer = self._single().trainer
        best = self._best_state(which)
        if best is None:
            return trainer.policy
        if self._best_policy is None or self._best_policy[0] is not best:
            model = copy.deepcopy(trainer.model)
            model.load_state_dict(best)
            self._best_policy = (best, getattr(model, "policy", model))
        return self._best_policy[1]

    def compute_action(self, observation: dict, actor_id: Any = None, deterministic: bool = False,
                       which: str = "best") -> dict:
        """The policy's action for one observation (or a batch).

        :param which: ``best`` (default) or ``last`` weights (see :meth:`weights`)."""
        policy = self._acting_policy(which)
        with torch_threads_of_this_thread(self._torch_threads(FROM_CONFIG)):
            return policy.compute_action(observation, actor_id=actor_id, deterministic=deterministic)

    def rollout(self, n_episodes: int = 1, deterministic: bool = True, seed: int | None = None,
                record_trajectory: bool = True, record_frames: bool | None = None, n_workers: int = 1,
                backend: str = "processes", which: str = "best") -> Any:
        """Roll out the current policy on fresh envs of this run; episodes are recorded into the run directory's
        ``trajectories/`` (view them with ``TrajectoryViewer(rc.run_dir / "trajectories")``).

        :param record_frames: store the env's rendered RGB frames with the episodes (None: where the env renders
            RGB frames and has no renderer that can redraw a recorded state, e.g. Gymnasium envs).
        :param n_workers: split the episodes over this many local processes (``backend="processes"``) or Ray tasks
            (``backend="ray"``); episode i is seeded ``seed + i`` as in one process (see
            ``maze_lab.train.ray_rollouts.parallel_rollout``).
        :param which: ``best`` (default, as ``maze-lab rollout``) or ``last`` weights (see :meth:`weights`)."""
        from maze_lab.core.rollout import SequentialRolloutRunner

        run = self._single()
        factory = run.env_factory(0, "rollout")
        policy = self._acting_policy(which)
        if n_workers != 1 or backend != "processes":
            from maze_lab.train.ray_rollouts import parallel_rollout

            return parallel_rollout(factory.build_env, policy, n_episodes, n_workers, backend=backend,
                                    deterministic=deterministic, seed=seed, record_trajectory=record_trajectory,
                                    trajectory_dir=run.run_directory.trajectory_dir, record_frames=record_frames)
        runner = SequentialRolloutRunner(factory.build_env, policy, n_episodes,
                                         record_trajectory=record_trajectory,
                                         trajectory_dir=run.run_directory.trajectory_dir,
                                         deterministic=deterministic, seed=seed, writers=[],
                                         record_frames=record_frames)
        with torch_threads_of_this_thread(self._torch_threads(FROM_CONFIG)):
            return runner.run()

    def close(self) -> None:
        """Close the envs of all runs (worker processes end)."""
        for run in self.runs:
            run.close()

    # ---- grids ---------------------------------------------------------------------------------------------
    def _train_grid(self, n_epochs: int | None) -> Any:
        from maze_lab.run.runs import compare_runs

        if self._objects and (self.n_jobs > 1 or self.launcher == "ray"):
            raise ConfigurationError("parallel grid runs need config-only components (names or dicts); objects "
                                     f"{sorted(self._objects)} cannot be sent to worker processes or Ray tasks. "
                                     f"Use n_jobs=1 (launcher='local').")
        # the runs of one grid share a sweep id in their summaries: `maze-lab runs` lists them as one group
        sweep_id = f"sweep-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        summaries = [{"sweep_id": sweep_id, "sweep_index": i, "sweep_size": len(self.configs)}
                     for i in range(len(self.configs))]
        group = f"sweep:{sweep_id}"
        from maze_lab.run.progress import CountProgress

        with CountProgress(len(self.configs), "sweep", "run") as progress:
            run_dirs, failures = self._train_grid_runs(n_epochs, sweep_id, summaries, group, progress)
        self.failures = failures
        if failures and len(failures) == len(self.configs):
            raise failures[0][1]  # every run failed (a configuration error, typically): the first one's error
        table = compare_runs(run_dirs, params=self.grid_keys)
        for key in self.grid_keys:
            if key in GROUPS:  # the option name, not the composed group config
                table[key] = [overrides[key] for overrides in self.grid]
        return table

    def _train_grid_runs(self, n_epochs: int | None, sweep_id: str, summaries: list[dict[str, Any]], group: str,
                         progress: Any) -> tuple[list[Path], list[tuple[Path, BaseException]]]:
        """Train the grid's runs (Ray tasks, local worker processes or one after the other in this process); returns
        their run directories and the failures. ``progress`` advances as each run ends."""
        run_dirs: list[Path] = []
        failures: list[tuple[Path, BaseException]] = []
        counts = {"failed": 0}

        def on_done(_index: int, result: Any) -> None:
            failed = isinstance(result, BaseException) or (isinstance(result, tuple) and result[1] is not None)
            counts["failed"] += int(failed)
            progress.advance(1, f"{counts['failed']} failed" if counts["failed"] else None)

        if self.launcher == "ray":
            from maze_lab.run.ray_tasks import train_configs_as_ray_tasks

            for path, error in train_configs_as_ray_tasks([OmegaConf.to_container(c) for c in self.configs],
                                                          n_epochs, self.n_jobs, self.ray_address, summaries, group,
                                                          on_done=on_done):
                run_dirs.append(path)
                if error is not None:
                    failures.append((path, error))
        elif self.n_jobs > 1:
            from maze_lab.run.ray_tasks import JobLost, find_run, mark_lost, run_in_processes

            def run_dir_of(index: int) -> Path | None:
                cfg = self.configs[index]
                return find_run(Path(cfg.log_base_dir) / str(cfg.experiment_name), sweep_id=sweep_id, sweep_index=index)

            results = run_in_processes(train_config_in_worker,
                                       [(OmegaConf.to_container(c), n_epochs, None, summary)
                                        for c, summary in zip(self.configs, summaries, strict=True)],
                                       self.n_jobs, run_dir_of=run_dir_of, what="sweep", group=group,
                                       on_done=on_done)
            for index, result in enumerate(results):
                if isinstance(result, JobLost):  # its worker died: the run (where one was made) is marked failed
                    path = run_dir_of(index)
                    mark_lost(path, str(result))
                    result = (path, result)
                path, error = result
                if path is not None:
                    run_dirs.append(Path(path))
                if error is not None:
                    failures.append((Path(path) if path is not None else None, error))
        else:
            for index, (cfg, summary) in enumerate(zip(self.configs, summaries, strict=True)):
                run = _Run(cfg, self._objects, None, self.silent, summary=summary, verbose=self.verbose)
                self.runs.append(run)
                error: BaseException | None = None
                try:
                    run.train(n_epochs)
                except Exception as err:  # noqa: BLE001 - one failed run does not end the grid; its summary says why
                    error = err
                    failures.append((run.run_directory.path, err))
                except KeyboardInterrupt as err:  # the run recorded `interrupted`; the grid ends here
                    from maze_lab.run.ray_tasks import RunsInterrupted, interrupt_cause

                    cause, status = interrupt_cause(err), None
                    with contextlib.suppress(Exception):
                        status = run.run_directory.read_summary().get("status")
                    marked = [run.run_directory.path] if status == "interrupted" else []
                    raise RunsInterrupted(f"sweep interrupted ({cause})", marked, len(self.configs) - index - 1,
                                          cause, group, in_flight=1) from err
                finally:
                    run.close()
                run_dirs.append(run.run_directory.path)
                on_done(index, (run.run_directory.path, error))
        return run_dirs, failures


def _check_n_epochs(n_epochs: Any) -> None:
    """Refuse an ``n_epochs`` argument that is not a count of epochs."""
    if n_epochs is None:
        return
    if isinstance(n_epochs, bool) or not isinstance(n_epochs, int):
        raise ConfigurationError(f"n_epochs must be an int >= 0 (0 or None: until early stopping), got "
                                 f"{type(n_epochs).__name__} {n_epochs!r}")
    if n_epochs < 0:
        raise ConfigurationError(f"n_epochs must be >= 0 (0 or None: until early stopping), got {n_epochs}")


def _check_resume_source(source: RunDirectory, cfg: DictConfig, trust: Iterable[str] | str | None,
                         config_modules: list[str]) -> None:
    """Refuse to resume from a run whose ``config.yaml`` names anything off the allow-list.

    Resuming reads only the earlier run's checkpoint (weights only) and builds everything from this run's own
    configuration; the check keeps one rule for everything read from a run directory. Trusted besides the
    allow-list: ``trust``, the packages of ``config_modules`` and every name this run's configuration uses.
    """
    if not source.config_file.exists():
        raise DamagedRunError(f"{source.path} has no config.yaml; a run directory to resume from holds the "
                              f"config.yaml and checkpoints its run wrote")
    own = [name for _, name in config_names(OmegaConf.to_container(cfg), ("env", "wrappers", "model"))
           if isinstance(name, str)]
    policy = TrustPolicy(trust, source=str(source.config_file),
                         how_to_allow="RunContext(..., trust=['{name}']) or `maze-lab train input_dir=RUN_DIR "
                                      "--trust {name}`")
    policy = policy.extended([*own, *(m.split(".", 1)[0] for m in config_modules)])
    policy.check_config(source.read_config(), ("env", "wrappers", "model"))


def _previous_results(run_dir: Path, cfg: DictConfig, overwrite: bool) -> Literal["none", "continue", "replace"]:
    """What to do with the results of an earlier run in ``run_dir``: none there, continue them (this run resumes from
    that directory) or replace them (``overwrite=True``); anything else is refused."""
    existing = RunDirectory(run_dir)
    if not existing.has_results():
        return "none"
    source = cfg.get("input_dir")
    if source and Path(source).resolve() == run_dir.resolve():
        return "continue"
    if overwrite:
        return "replace"
    status = "unknown"
    if existing.summary_file.exists():
        with contextlib.suppress(DamagedRunError, OSError):
            status = existing.read_summary().get("status", "unknown")
    raise ExistingRunError(
        f"run_dir {run_dir} already holds a run (status {status}); training into it would overwrite its statistics "
        f"and checkpoints. Give a new run_dir (or none: a fresh <log_base_dir>/<experiment_name>/<timestamp>), "
        f"resume from it with overrides={{'input_dir': '{run_dir}'}}, or pass overwrite=True to replace it")


def _remove_results(run_directory: RunDirectory) -> None:
    """Delete what an earlier run wrote into ``run_directory`` (``overwrite=True``): only maze-lab's own files."""
    import shutil

    for name in (*RUN_OUTPUTS, MARKER):
        target = run_directory.path / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()


def _previous_statistics(path: Path) -> Any:
    """The statistics of the run in ``path`` as a StatsStore that goes on appending to ``path`` (None: none yet)."""
    from maze_lab.core.log_stats.writers import StatsStore

    try:
        store = StatsStore.load(path)
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as err:
        raise DamagedRunError(f"cannot continue the statistics of {path}: {err}") from err
    store.persist_to(path)  # writes the earlier epochs first, then every new one
    return store


def train_config_in_worker(config: dict, n_epochs: int | None, run_dir: str | None = None,
                           summary: dict[str, Any] | None = None) -> tuple[str, BaseException | None]:
    """One run of a grid in a worker process or a Ray task: train a composed config (a plain dict) into ``run_dir``
    (None: a new one); returns the run directory and the error where the run failed (its summary records the
    traceback; an error that cannot be sent back comes as a RunFailedError with its text).

    :param summary: fields for the run's summary (the sweep id and index).
    """
    import torch

    from maze_lab.run.ray_tasks import portable_error

    threads = config.get("torch_threads", 1)
    # grid workers share the machine: one thread each unless the config asks for more
    torch.set_num_threads(1 if threads is None else int(threads))
    run = _Run(OmegaConf.create(config), {}, None if run_dir is None else Path(run_dir), silent=True, summary=summary)
    try:
        run.train(n_epochs)
    except Exception as err:  # noqa: BLE001 - reported to the grid, which goes on with the other runs
        return str(run.run_directory.path), portable_error(err, RunFailedError)
    finally:
        run.close()
    return str(run.run_directory.path), None


class RunFailedError(RuntimeError):
    """A background run ended with an exception; the message carries its traceback."""


def run_algorithm_object(algorithm: Any, config: DictConfig) -> Any:
    """An algorithm config object as a run trains with it: the root ``seed`` where the object has none and the root
    ``n_epochs`` where one is set, as for an algorithm given by name or dict (a copy; the user's object is left
    alone)."""
    from maze_lab.run.config import root_int

    if not dataclasses.is_dataclass(algorithm):
        return algorithm
    names = {f.name for f in dataclasses.fields(algorithm)}
    changes: dict[str, Any] = {}
    if "seed" in names and algorithm.seed is None:
        seed = root_int(config, "seed", "an int (or null: unseeded)")
        if seed is not None:
            changes["seed"] = seed
    n_epochs = root_int(config, "n_epochs", "an int >= 0 (0 or null: until early stopping)")
    if "n_epochs" in names and n_epochs is not None:
        changes["n_epochs"] = n_epochs
    return dataclasses.replace(algorithm, **changes) if changes else algorithm


def importable_name(obj: Any) -> str | None:
    """``module.qualname`` of a function or class that can be imported back by that name (the same object), else
    None (a lambda, a nested function, one defined in ``__main__`` such as a notebook's)."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname \
            or module in ("__main__", "__mp_main__", "builtins"):
        return None
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return f"{module}.{qualname}" if found is obj else None


def _plain(value: Any) -> Any:
    """A config value as YAML can hold it (a schedule or other object by its repr)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return repr(value)


WHICH_WEIGHTS = ("best", "last")
"""The weights a trained run acts with: its best evaluation's, or the last (as training left them)."""


class _Run:
    """Builds and owns the parts of one run: envs, model, trainer, writers, run directory."""

    def __init__(self, config: DictConfig, objects: dict[str, Any], run_dir: Path | None, silent: bool,
                 previous: Literal["none", "continue", "replace"] = "none", summary: dict[str, Any] | None = None,
                 verbose: bool = False):
        if "algorithm" in objects:
            # the run trains with the root seed and n_epochs as a name or a dict would, and records what it used
            algorithm = run_algorithm_object(objects["algorithm"], config)
            objects = {**objects, "algorithm": algorithm}
            if getattr(algorithm, "seed", None) is not None and config.get("seed") != algorithm.seed:
                config = config.copy()
                config.seed = algorithm.seed
        self.config = config
        self.objects = objects
        self.silent = silent
        self.verbose = verbose and not silent
        cfg = config
        path = run_dir if run_dir is not None else new_run_dir(cfg.log_base_dir, cfg.experiment_name)
        path.mkdir(parents=True, exist_ok=True)
        self.run_directory = RunDirectory(path)
        if previous == "replace":
            _remove_results(self.run_directory)
        previous_stats = _previous_statistics(path) if previous == "continue" else None
        self._write_config()
        # versions() imports torch (about a second): it is recorded when the run is built, which for a background
        # run happens in the training thread, so that train_async() returns at once
        self.run_directory.write_summary(status="created", experiment=cfg.experiment_name, seed=cfg.seed,
                                         created=time.strftime("%Y-%m-%dT%H:%M:%S"), objects=sorted(objects),
                                         **(summary or {}))
        from maze_lab.core.log_stats.writers import StatsStore

        # each finished epoch is appended to stats.arrows, off this thread (after those of the run it continues)
        self.store = StatsStore(directory=path) if previous_stats is None else previous_stats
        self._trainer = None
        self._build_lock = threading.Lock()
        self._status_lock = threading.RLock()  # requests and the final status take turns
        self._ended = False
        self._stop_early = False
        self.accept_requests_since: float = time.time()
        """Requests in the control file made since then reach this run (a detached run: since its start)."""
        self.handle: RunHandle | None = None

    def _write_config(self) -> None:
        cfg = OmegaConf.to_container(self.config)
        for group, obj in self.objects.items():
            named = obj if group == "env" and hasattr(obj, "__qualname__") else type(obj)  # a factory: itself
            cfg[group] = {"_object_": f"{named.__module__}.{named.__qualname__}"}
            if group == "env" and importable_name(obj) is not None:  # rebuilt by name where trusted (load_run)
                cfg[group]["factory"] = importable_name(obj)
            if group == "algorithm" and dataclasses.is_dataclass(obj):  # every value the run trains with
                cfg[group].update({f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)})
        self.run_directory.config_file.write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)))

    # ---- building ------------------------------------------------------------------------------------------
    def env_factory(self, index: int, prefix: str) -> Callable[[], Any]:
        """A picklable factory of env ``index`` (wrappers, monitoring and statistics included)."""
        env_cfg = OmegaConf.to_container(self.config.env)
        wrappers_cfg = wrappers_in_run_dir(OmegaConf.to_container(self.config.wrappers) or {},
                                           self.run_directory.path)
        user_factory = self.objects.get("env")
        log_dir = str(self.run_directory.event_log_dir / f"{prefix}_{index}")
        return RunEnvFactory(env_cfg, wrappers_cfg, user_factory, log_dir)

    @property
    def trainer(self) -> Any:
        """The trainer, built on first use; a build that fails marks the run ``failed`` (``interrupted`` for Ctrl-C)."""
        with self._build_lock:
            if self._trainer is None:
                try:
                    self._trainer = self._build()
                except BaseException as err:
                    self._build_failed(err)
                    raise
            return self._trainer

    def _build_failed(self, err: BaseException) -> None:
        """Close what a failed build started and record in the summary why the run never trained."""
        for part in (getattr(self, "train_env", None), getattr(self, "eval_env", None), *getattr(self, "writers", [])):
            if part is not None and part is not self.store:
                with contextlib.suppress(Exception):
                    part.close()
        self.train_env = self.eval_env = None
        interrupted = isinstance(err, KeyboardInterrupt)
        with contextlib.suppress(Exception):  # the build's own error is the one to report
            self.run_directory.write_summary(
                status="interrupted" if interrupted else "failed", finished=time.strftime("%Y-%m-%dT%H:%M:%S"),
                error=None if interrupted else "".join(traceback.format_exception(err)),
                reason=" ".join(f"{type(err).__name__}: {err}".split())[:1000])

    def _build(self) -> Any:
        import torch

        from maze_lab.core.log_stats.writers import ConsoleWriter, TensorBoardWriter
        from maze_lab.run.progress import AboveBar
        from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
        from maze_lab.train.vector_env import SequentialVectorEnv, SubprocVectorEnv

        cfg = self.config
        runner = cfg.runner
        self.run_directory.write_summary(versions=versions())
        torch.manual_seed(int(cfg.seed))
        writers = [self.store, TensorBoardWriter(self.run_directory.tensorboard_dir)]
        if self.verbose:  # the full statistics tables, above the progress bar
            writers.append(ConsoleWriter(stream=AboveBar()))
        self.writers = writers
        venv_cls = {"sequential": SequentialVectorEnv, "subprocess": SubprocVectorEnv}.get(runner.vector_env)
        if venv_cls is None and runner.vector_env not in ("ray", "processes"):
            raise ConfigurationError(f"runner.vector_env must be 'sequential', 'subprocess', 'processes' or 'ray', "
                                     f"got '{runner.vector_env}'")
        algorithm = self._algorithm_config()
        trainer_cls = _trainer_class(algorithm)
        eval_env = self.eval_env = SequentialVectorEnv(
            [self.env_factory(i, "eval") for i in range(int(runner.eval_concurrency))], logging_prefix="eval",
            writers=writers)
        evaluator = RolloutEvaluator(eval_env, n_episodes=algorithm.eval_repeats,
                                     deterministic=algorithm.deterministic_eval)
        parts = _BuildParts(algorithm, trainer_cls, evaluator, writers, eval_env, venv_cls)
        trainer = _TRAINER_BUILDERS[_training_kind(trainer_cls, runner)](self, parts)
        # the values actually trained with where the algorithm's bounded_box block replaced configured ones
        self.run_directory.write_summary(bounded_box_changes=dict(getattr(trainer, "bounded_box_changes", {})))
        if cfg.input_dir:
            self._start_from_input_dir(trainer, cfg.input_dir)
        trainer.callbacks.append(self._on_epoch)
        return trainer

    # ---- how a trainer is built, by the kind of training (see _training_kind) -----------------------------------
    def _build_with_own_workers(self, parts: _BuildParts) -> Any:
        """A trainer that runs its envs in its own workers (ES workers, IMPALA actors): one env factory per env; its
        worker statistics object stands where the training vector env would. With runner=ray (ES, IMPALA) the
        workers are runner.n_workers Ray actors (ES: one env each; IMPALA: envs_per_worker actors each), started at
        the first train() on the Ray runner.address says."""
        runner, algorithm, trainer_cls = self.config.runner, parts.algorithm, parts.trainer_cls
        ray_workers: dict[str, Any] = {}
        if runner.vector_env == "ray":
            from maze_lab.train.ray_config import RayWorkerSettings

            settings = RayWorkerSettings.from_runner(runner)
            per_worker = 1 if getattr(trainer_cls, "one_env_per_ray_worker", False) else settings.envs_per_worker
            n_envs = settings.n_workers * per_worker
            ray_workers = dict(workers="ray", ray=settings)
        else:
            n_envs = int(getattr(algorithm, "num_actors", 0) or runner.concurrency)
        trainer = trainer_cls(algorithm, self._model(parts.eval_env),
                              env_factories=[self.env_factory(i, "train") for i in range(n_envs)],
                              evaluator=parts.evaluator, writers=parts.writers,
                              checkpoint_dir=self.run_directory.checkpoint_dir, **ray_workers)
        self.train_env = trainer.env
        return trainer

    def _build_with_rollout_workers(self, parts: _BuildParts) -> Any:
        """A2C/PPO rollouts in Ray actors (runner=ray: maze_lab.train.ray_rollouts starts or joins Ray as
        runner.address says) or in local worker processes (runner=processes, started at the first rollout: the
        learner stays here, so a run trained in a kernel leaves the kernel's interpreter free while the workers
        roll out). The evaluation env gives the model its spaces."""
        runner = self.config.runner
        if runner.vector_env == "ray":
            from maze_lab.train.ray_rollouts import ray_rollout_generator as make_generator
        else:
            from maze_lab.train.process_rollouts import process_rollout_generator as make_generator
        generator = make_generator(runner, parts.trainer_cls, lambda i: self.env_factory(i, "train"), parts.writers,
                                   parts.eval_env)
        self.train_env = generator.env
        return parts.trainer_cls(parts.algorithm, self._model(parts.eval_env), rollout_generator=generator,
                                 evaluator=parts.evaluator, writers=parts.writers,
                                 checkpoint_dir=self.run_directory.checkpoint_dir)

    def _build_from_data(self, parts: _BuildParts) -> Any:
        """Behavioural cloning reads its recorded episodes (algorithm.dataset), not a training env: none is built;
        the evaluation env gives the model its spaces and checks that the episodes fit them. With
        n_eval_episodes=0 models are selected by validation loss; the evaluator stays for RunContext.evaluate."""
        from maze_lab.run.config import imitation_dataset_dir

        algorithm = parts.algorithm
        self.train_env = None
        return parts.trainer_cls(algorithm, self._model(parts.eval_env),
                                 dataset=imitation_dataset_dir(algorithm.dataset),
                                 evaluator=parts.evaluator if algorithm.n_eval_episodes else None,
                                 writers=parts.writers, checkpoint_dir=self.run_directory.checkpoint_dir)

    def _build_with_vector_env(self, parts: _BuildParts) -> Any:
        """A trainer stepping a vector env of runner.concurrency envs in this process (sequential) or in
        subprocesses (subprocess)."""
        train_env = self.train_env = parts.venv_cls(
            [self.env_factory(i, "train") for i in range(int(self.config.runner.concurrency))],
            logging_prefix="train", writers=parts.writers)
        return parts.trainer_cls(parts.algorithm, self._model(train_env), env=train_env, evaluator=parts.evaluator,
                                 writers=parts.writers, checkpoint_dir=self.run_directory.checkpoint_dir)

    def _start_from_input_dir(self, trainer: Any, input_dir: str) -> None:
        """Resume the run of ``input_dir`` (same trainer), or fine-tune from its best weights (another trainer)."""
        from maze_lab.run.runs import corrupt_checkpoint_errors
        from maze_lab.train.trainers.common.checkpoints import check_weights_fit, read_checkpoint

        source = RunDirectory.open(input_dir)
        with corrupt_checkpoint_errors(source.last_checkpoint):
            last = read_checkpoint(source.last_checkpoint, trainer.device)
        origin = last.get("trainer") if isinstance(last.get("trainer"), str) else None
        if origin is not None and origin != type(trainer).__name__:
            # fine-tuning (e.g. PPO from a BC run): the other trainer's best weights, policy and critic as
            # that run has them; epochs, updates, env steps, best reward and optimizer state start afresh,
            # since they count and score another algorithm's training
            weights = source.best_checkpoint if source.best_checkpoint.exists() else source.last_checkpoint
            with corrupt_checkpoint_errors(weights):
                state = read_checkpoint(weights, trainer.device)
            # weights of another env's spaces: one line naming the input run, the parameter and both shapes
            check_weights_fit(trainer.model, state.get("model"), f"input_dir={source.path}: its checkpoint "
                                                                 f"{weights.name}")
            trainer.load_state(state, weights_only=True)
            self.run_directory.write_summary(resumed_from=str(source.path), resumed_epoch=0,
                                             fine_tuned_from={"trainer": origin, "checkpoint": weights.name})
        else:
            check_weights_fit(trainer.model, last.get("model"), f"input_dir={source.path}: its checkpoint "
                                                                f"{source.last_checkpoint.name}")
            trainer.load_state(last)
            self.run_directory.write_summary(resumed_from=str(source.path), resumed_epoch=trainer.epoch)

    def _algorithm_config(self) -> Any:
        obj = self.objects.get("algorithm")
        if obj is not None:
            _trainer_class(obj)  # refuses what no trainer takes, naming the valid ones
            return obj
        return build_algorithm_config(self.config)

    def _model(self, env: Any) -> Any:
        from maze_lab.agent.composers import build_model_composer
        from maze_lab.agent.torch_actor_critic import TorchActorCritic

        obj = self.objects.get("model")
        device = OmegaConf.select(self.config, "algorithm.device", default="cpu")
        if isinstance(obj, TorchActorCritic):
            return obj
        model_cfg = obj if obj is not None else OmegaConf.to_container(self.config.model)
        if isinstance(model_cfg, dict) and "critic" in self.objects:
            model_cfg = {**model_cfg, "critic": self.objects["critic"]}
        composer = build_model_composer(model_cfg, env.action_spaces_dict, env.observation_spaces_dict,
                                        env.agent_counts_dict)
        try:
            composer.save_graphs(self.run_directory.graph_dir)
        except Exception as err:  # noqa: BLE001 - a graph that cannot be drawn must not stop training
            _log.warning(f"model graphs not written: {err}")
        return composer.actor_critic(device=device)

    # ---- running -------------------------------------------------------------------------------------------
    def _on_epoch(self, trainer: Any, stats: Any) -> None:
        ms = trainer.model_selection
        self.run_directory.write_summary(
            epoch=trainer.epoch, env_steps=trainer.env_steps, last_eval_reward=trainer.last_eval_reward,
            best_eval_reward=None if ms.best_epoch is None else ms.best_reward, best_epoch=ms.best_epoch)

    def train(self, n_epochs: int | None = None, mode: str = "process") -> None:
        """Train in this thread; the summary records how the run ended. While it trains this process owns the run
        (``owner.json``: see :mod:`maze_lab.run.run_status`): readers see it live, and requests written into the run
        directory (pause, resume, stop, checkpoint) reach it from any process.

        :param mode: how the run was started, recorded in ``owner.json``: ``in-kernel``, ``detached``, ``process``.
        """
        run_dir = self.run_directory
        with self._status_lock:
            self._ended = False
        run_dir.write_summary(status="running", started=time.strftime("%Y-%m-%dT%H:%M:%S"), reason=None,
                              error=None, stop_reason=None, control=None, mode=mode)
        owner = RunOwner(run_dir.path, self.request, run_dir.write_summary, mode=mode,
                         accept_since=self.accept_requests_since).start()
        status, error, reason = "failed", None, None
        try:
            trainer = self.trainer
            planned = trainer.config.n_epochs if n_epochs is None else n_epochs
            run_dir.write_summary(target_epochs=trainer.epoch + planned if planned else None)
            with self._status_lock:
                if self._stop_early:
                    trainer.request_stop()  # asked for while the run was being built: honoured before any update
            with self._progress(trainer, trainer.epoch + planned if planned else None, mode):
                trainer.train(n_epochs)
            self.store.flush()  # a run whose statistics could not be saved has failed
            status, reason = final_status(trainer.stop_reason)
        except KeyboardInterrupt:
            status, reason = "interrupted", "interrupted (Ctrl-C or SIGTERM); the checkpoint of the last finished " \
                                            "epoch is kept"
            raise
        except BaseException as err:
            error = "".join(traceback.format_exception(err))
            reason = " ".join(f"{type(err).__name__}: {err}".split())[:1000]
            raise
        finally:
            owner.stop_heartbeat()  # no acknowledgement can land after the final status
            with contextlib.suppress(Exception):  # already raised above where it failed
                self.store.flush()  # the epochs published so far are on disk before the summary says how it ended
            self._flush_event_logs()
            trainer = self._trainer
            fields: dict[str, Any] = {"status": status, "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                      "error": error, "reason": reason}
            if trainer is not None:
                fields.update(epoch=trainer.epoch, env_steps=trainer.env_steps, stop_reason=trainer.stop_reason,
                              last_eval_reward=trainer.last_eval_reward,
                              best_eval_reward=None if trainer.model_selection.best_epoch is None
                              else trainer.model_selection.best_reward,
                              final_train_reward=_train_reward(self.store))
            with self._status_lock:
                self._ended = True
                run_dir.write_summary(**fields)
            owner.close()

    @contextlib.contextmanager
    def _progress(self, trainer: Any, target_epoch: int | None, mode: str) -> Iterator[None]:
        """One line per epoch and a progress bar while ``trainer`` trains: for a blocking run (a terminal, a notebook
        cell) and in a detached run's console log (lines only); a run in a kernel's background thread shows its
        progress in the cockpit instead, and a silent run shows nothing. Every run's lines go to its
        ``console.log`` (the cockpit's Console tab)."""
        from maze_lab.run.progress import EpochProgress

        display = not self.silent and mode != "in-kernel"
        # the lines go to the run's console.log as well (where a detached run prints, it prints into that file)
        progress = EpochProgress(trainer.epoch, target_epoch, int(trainer.env_steps), bar=mode == "process",
                                 display=display,
                                 log_path=None if mode == "detached" and display else self.run_directory.console_log)
        trainer.callbacks.append(progress)
        try:
            yield
        finally:
            trainer.callbacks.remove(progress)
            progress.close()

    def request(self, action: str) -> Any:
        """Carry out a request to this run (``pause``, ``resume``, ``stop``, ``checkpoint``) from any thread, and
        record the run's new status in its summary. Returns the fields that acknowledge it, or a function returning
        them once done (a checkpoint is written at the next boundary between updates); a run being built takes a
        stop before its first update and the other requests once built."""
        with self._status_lock:
            if self._ended:
                summary = self.run_directory.read_summary()
                raise RunControlError(f"the run has ended (status {summary.get('status')}); nothing to {action}")
            trainer = self._trainer
            if trainer is None:
                if action == "stop":
                    self._stop_early = True
                    self.run_directory.write_summary(status="stopping")
                    return {"status": "stopping"}
                return lambda: None if self._trainer is None else self._apply(action)
            return self._apply_locked(trainer, action)

    def _apply(self, action: str) -> Any:
        with self._status_lock:
            if self._ended:
                return {"error": "the run ended first"}
            result = self._apply_locked(self._trainer, action)
        return result() if callable(result) else result

    def _apply_locked(self, trainer: Any, action: str) -> Any:
        if action == "checkpoint":
            target = trainer.request_checkpoint()
            return lambda: ({"checkpoint": str(trainer.last_requested_checkpoint)}
                            if trainer.requested_checkpoints >= target else None)
        if action == "stop":
            trainer.request_stop()
            status = "stopping"
        elif action == "pause":
            trainer.pause()
            self.run_directory.write_summary(status="paused")
            # acknowledged once the loop holds (the update under way finishes first)
            return lambda: {"status": "paused"} if trainer.holding or not trainer.paused else None
        elif action == "resume":
            trainer.resume()
            status = "running"
        else:
            raise RunControlError(f"unknown request {action!r}; one of pause, resume, stop, checkpoint")
        self.run_directory.write_summary(status=status)
        return {"status": status}

    def _flush_event_logs(self) -> None:
        if self._trainer is None:
            return
        for venv in (self.train_env, self.eval_env):
            try:
                if not hasattr(venv, "reset"):
                    continue  # the statistics of a trainer's own workers: they flush their envs' logs on close
                if hasattr(venv, "envs"):
                    for env in venv.envs:
                        env.flush_event_logs()
                else:
                    venv.call("flush_event_logs")
            except Exception as err:  # noqa: BLE001 - e.g. workers already gone after a failure
                _log.warning(f"event logs not flushed: {err}")

    def start_async(self, n_epochs: int | None, torch_threads: int | None = 1) -> RunHandle:
        if self.handle is not None and self.handle.running:
            raise RuntimeError(f"this run is already training in the background (status {self.handle.status}); "
                               f"stop it or wait for it first")
        self.handle = RunHandle(self, n_epochs, torch_threads)
        return self.handle

    def close(self) -> None:
        if self._trainer is not None:
            if hasattr(self._trainer, "close"):
                self._trainer.close()  # a trainer's own worker processes
            if hasattr(self.train_env, "close"):
                self.train_env.close()
            self.eval_env.close()
            for w in self.writers:
                w.close()


def final_status(stop_reason: str | None) -> tuple[str, str | None]:
    """The status and reason of a run whose trainer returned with ``stop_reason``."""
    if stop_reason == "stopped":
        return "stopped", "stopped on request; a checkpoint of the current weights was written"
    if stop_reason and stop_reason.startswith("early stopping"):
        return "early-stopped", stop_reason
    return "done", None


def _train_reward(store: Any) -> float | None:
    df = store.to_dataframe()
    sel = df[(df.prefix == "train") & (df.event == "reward") & (df.name == "mean")]
    return None if sel.empty else float(sel.value.iloc[-1])


_TRAINERS = {
    # algorithm config class (its torch-free module) -> the trainer class that takes it
    "maze_lab.train.trainers.common.config.PPOAlgorithmConfig": "maze_lab.train.trainers.ppo.PPO",
    "maze_lab.train.trainers.common.config.A2CAlgorithmConfig": "maze_lab.train.trainers.a2c.A2C",
    "maze_lab.train.trainers.sac.config.SACAlgorithmConfig": "maze_lab.train.trainers.sac.SAC",
    "maze_lab.train.trainers.impala.config.ImpalaAlgorithmConfig": "maze_lab.train.trainers.impala.IMPALA",
    "maze_lab.train.trainers.es.config.ESAlgorithmConfig": "maze_lab.train.trainers.es.ES",
    "maze_lab.train.trainers.bc.config.BCAlgorithmConfig": "maze_lab.train.trainers.bc.BC",
}


@dataclasses.dataclass(frozen=True)
class _BuildParts:
    """What every kind of training is built from (see ``_Run._build``)."""

    algorithm: Any
    trainer_cls: type
    evaluator: Any
    writers: list
    eval_env: Any
    venv_cls: type | None


def _training_kind(trainer_cls: type, runner: Any) -> str:
    """How the run trains: the trainer's own workers, rollout workers (ray, processes), recorded data, or a vector
    env in this process."""
    if getattr(trainer_cls, "uses_env_factories", False):
        return "own_workers"
    if runner.vector_env in ("ray", "processes"):
        return "rollout_workers"
    if getattr(trainer_cls, "learns_from_data", False):
        return "data"
    return "vector_env"


_TRAINER_BUILDERS = {"own_workers": _Run._build_with_own_workers,
                     "rollout_workers": _Run._build_with_rollout_workers,
                     "data": _Run._build_from_data,
                     "vector_env": _Run._build_with_vector_env}
"""The builder of each kind of training."""


def _trainer_class(algorithm: Any) -> type:
    """The trainer class of an algorithm config object (ConfigurationError naming the valid ones otherwise)."""
    from hydra.utils import get_class

    for config_path, trainer_path in _TRAINERS.items():
        if isinstance(algorithm, get_class(config_path)):
            return get_class(trainer_path)
    valid = ", ".join(path.rsplit(".", 1)[1] for path in _TRAINERS)
    raise ConfigurationError(f"algorithm must be an algorithm config of a trainer (valid: {valid}), got "
                             f"{type(algorithm).__name__}")


@contextlib.contextmanager
def torch_threads_of_this_thread(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads in the calling thread, then put the previous count back
    (None: leave torch alone, and torch is not imported)."""
    if n is None:
        yield
        return
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _set_torch_threads_of_this_thread(n: int) -> None:
    """Set torch's intra-op threads for the calling thread only, leaving the setting of every other thread alone.

    torch.set_num_threads sets the calling thread's OpenMP/MKL thread count and a process-wide value that threads
    read when they first use torch; a helper thread puts the process-wide value back.
    """
    import torch

    previous = torch.get_num_threads()  # first use in this thread: it takes the process-wide value now, not later
    torch.set_num_threads(n)
    helper = threading.Thread(target=torch.set_num_threads, args=(previous,), name="maze-lab torch threads")
    helper.start()
    helper.join()


class RunHandle:
    """A training run in a background thread of the kernel: status, progress, pause/resume/stop, live stats.

    Statuses: ``starting``, ``running``, ``paused``, ``stopping``, then ``done``, ``stopped``, ``early-stopped`` or
    ``failed``. Every
    change of status happens under one lock, and a final status is set before the thread counts as ended: once
    ``running`` is False (or ``wait()`` returns), the status is final and never changes again; a ``stop()`` that
    meets a run as it fails leaves it ``failed``.
    """

    FINAL = ("done", "stopped", "early-stopped", "failed")
    """The statuses of a run that has ended."""

    def __init__(self, run: _Run, n_epochs: int | None, torch_threads: int | None = 1):
        self._run = run
        self.n_epochs = n_epochs
        self.torch_threads = torch_threads
        self.exception: BaseException | None = None
        self.traceback: str | None = None
        self._status = "starting"
        self._lock = threading.Lock()
        self._built = threading.Event()  # the trainer exists, or the thread ended without one
        self._done = threading.Event()
        # the thread runs in a copy of the caller's context: Jupyter kernels keep the cell a print belongs to in a
        # context variable, so the run's output (a failure's traceback) shows under the cell that started it
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._main,),
                                        name=f"maze-lab run {run.run_directory.path.name}", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        with background_run():  # in a kernel, the run makes room for the user's cells (maze_lab.run.kernel_yield)
            self._main_body()

    def _main_body(self) -> None:
        final, failure = "failed", None
        try:
            if self.torch_threads is not None:
                _set_torch_threads_of_this_thread(self.torch_threads)
            trainer = self._run.trainer
            with self._lock:
                self._target_epochs = trainer.epoch + (self.n_epochs if self.n_epochs is not None
                                                       else trainer.config.n_epochs)
                if self._status == "starting":
                    self._status = "running"
                self._built.set()
            self._run.train(self.n_epochs, mode="in-kernel")
            final = final_status(trainer.stop_reason)[0]
        except BaseException as err:  # noqa: BLE001 - the kernel must survive anything the run raises
            failure = err
        finally:
            with self._lock:
                if failure is not None:
                    self.exception = failure
                    self.traceback = "".join(traceback.format_exception(failure))
                self._status = final
            try:
                if failure is not None:  # shown under the cell that started the run before the run counts as ended
                    _log.error(f"background run {self.run_dir} failed:\n{self.traceback}")
            finally:
                self._built.set()
                self._done.set()

    # ---- state ---------------------------------------------------------------------------------------------
    @property
    def status(self) -> str:
        """Current status."""
        status = self._status
        if status == "running" and self._run._trainer is not None and self._run._trainer.paused:
            return "paused"
        return status

    @property
    def running(self) -> bool:
        """Whether the thread is still working."""
        return not self._done.is_set()

    @property
    def run_dir(self) -> Path:
        """The run directory."""
        return self._run.run_directory.path

    @property
    def progress(self) -> dict[str, Any]:
        """Epoch, target epochs, updates, env steps, the last evaluation reward and the run's warnings (e.g. a
        diverged policy: see ``maze_lab.train.trainers.common.divergence``), newest last."""
        trainer = self._run._trainer
        if trainer is None:
            return {"status": self.status, "epoch": 0, "n_epochs": self.n_epochs, "env_steps": 0, "warnings": []}
        target = getattr(self, "_target_epochs", None)
        return {"status": self.status, "epoch": trainer.epoch, "n_epochs": target, "updates": trainer.updates,
                "env_steps": trainer.env_steps, "last_eval_reward": trainer.last_eval_reward,
                "fraction": (trainer.epoch / target) if target else None,
                "warnings": list(getattr(trainer, "warnings", []))}

    @property
    def stats(self) -> Any:
        """The live statistics DataFrame."""
        return self._run.store.to_dataframe()

    @property
    def store(self) -> Any:
        """The live StatsStore (for widgets)."""
        return self._run.store

    @property
    def latest_checkpoint(self) -> Path | None:
        """The last checkpoint, once written."""
        path = self._run.run_directory.last_checkpoint
        return path if path.exists() else None

    @property
    def best_checkpoint(self) -> Path | None:
        """The best checkpoint, once written."""
        path = self._run.run_directory.best_checkpoint
        return path if path.exists() else None

    # ---- control -------------------------------------------------------------------------------------------
    def pause(self) -> None:
        """Pause between updates (recorded in the run's summary: other processes see it ``paused``)."""
        if self._wait_for_trainer() is not None:
            with contextlib.suppress(RunControlError):
                self._run.request("pause")

    def resume(self) -> None:
        """Continue after pause."""
        if self._wait_for_trainer() is not None:
            with contextlib.suppress(RunControlError):
                self._run.request("resume")

    def checkpoint(self, timeout: float | None = 60.0) -> Path | None:
        """Write a checkpoint of the current weights now (at the next boundary between updates) and return its path;
        the run goes on."""
        trainer = self._wait_for_trainer()
        if trainer is None:
            return None
        try:
            done = self._run.request("checkpoint")
        except RunControlError:
            return self.latest_checkpoint
        deadline = None if timeout is None else time.monotonic() + timeout
        while (fields := done()) is None and not self._done.is_set():
            if deadline is not None and time.monotonic() > deadline:
                return None
            time.sleep(0.05)
        return Path(fields["checkpoint"]) if fields and fields.get("checkpoint") else self.latest_checkpoint

    def stop(self, timeout: float | None = 60.0) -> Path | None:
        """Stop after the current update (a run still being built stops before its first update); a checkpoint is
        written. Waits up to ``timeout`` seconds for the run to end; returns the checkpoint path."""
        with self._lock:
            if self._status in self.FINAL:
                return self.latest_checkpoint
            self._status = "stopping"
        with contextlib.suppress(RunControlError):  # ended meanwhile: its final status stands
            self._run.request("stop")  # a run still being built stops before its first update
        self._done.wait(timeout)
        return self.latest_checkpoint

    def wait(self, timeout: float | None = None) -> str:
        """Block until the run ends (or the timeout passes); raises RunFailedError where it failed."""
        self._done.wait(timeout)
        with self._lock:
            failed, tb = self._status == "failed", self.traceback
        if failed:
            raise RunFailedError(f"the run in {self.run_dir} failed:\n{tb}")
        return self.status

    async def wait_async(self, poll_seconds: float = 0.2) -> str:
        """``await handle.wait_async()`` in a notebook cell: wait for the run to end without blocking the kernel's
        event loop, so that widgets keep redrawing and their buttons (stop, pause) keep working while the cell
        waits; papermill runs such a cell to the end like any other. Returns the final status; raises
        RunFailedError where the run failed. Cancelling the wait (interrupting the cell) leaves the run going."""
        import asyncio

        while not self._done.is_set():
            await asyncio.sleep(poll_seconds)
        return self.wait(0)

    def _wait_for_trainer(self, timeout: float = 120.0) -> Any:
        self._built.wait(timeout)
        return self._run._trainer

    def __repr__(self) -> str:
        p = self.progress
        return (f"<RunHandle {self.status} epoch {p.get('epoch')}/{p.get('n_epochs')} env_steps {p.get('env_steps')} "
                f"run_dir={self.run_dir}>")

    def _repr_html_(self) -> str:
        p = self.progress
        rows = "".join(f"<tr><th style='text-align:left'>{k}</th><td>{v}</td></tr>" for k, v in
                       {**p, "run_dir": self.run_dir}.items())
        return f"<table>{rows}</table>"
