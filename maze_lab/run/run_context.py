"""RunContext: the Python entry point for training, evaluation and acting, from configs or objects.

A run itself is :class:`~maze_lab.run.training_run._Run` (its trainer built by :mod:`maze_lab.run.build`), a
background run's handle :class:`~maze_lab.run.handle.RunHandle`, resuming :mod:`maze_lab.run.resume`, and a grid's
runs outside this process :mod:`maze_lab.run.grid`; the public names of those that were defined here stay importable
from here.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import secrets
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.run.build import run_algorithm_object
from maze_lab.run.config import GROUPS, compose_config, training_plan, validate_config
from maze_lab.run.grid import train_config_in_worker
from maze_lab.run.handle import RunFailedError, RunHandle, final_status, torch_threads_of_this_thread
from maze_lab.run.resume import check_resume_source, previous_results
from maze_lab.run.run_dir import RunDirectory, new_run_dir
from maze_lab.run.training_run import _Run, importable_name

__all__ = ["FROM_CONFIG", "WHICH_WEIGHTS", "RunContext", "RunFailedError", "RunHandle", "ThreadsArg", "final_status",
           "importable_name", "run_algorithm_object", "torch_threads_of_this_thread", "train_config_in_worker"]


FROM_CONFIG: Literal["config"] = "config"
"""Default of ``torch_threads`` arguments: the run config's ``torch_threads`` (1 unless overridden)."""

ThreadsArg = int | None | Literal["config"]

WHICH_WEIGHTS = ("best", "last")
"""The weights a trained run acts with: its best evaluation's, or the last (as training left them)."""


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
                check_resume_source(RunDirectory.open(cfg.input_dir), cfg, trust, self._config_modules)
        self._requested_run_dir = Path(run_dir) if run_dir is not None else None
        self._previous = previous_results(self._requested_run_dir, self.config, overwrite) \
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
        :param n_workers: split the episodes over this many local processes (``backend="processes"``) or Ray workers
            (``backend="ray"``, as Ray actors); episode i is seeded ``seed + i`` as in one process (see
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
            from maze_lab.run.grid import train_configs_as_ray_tasks

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
