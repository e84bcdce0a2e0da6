"""The trials of a study: one trial trained as a maze-lab run that reports its evaluation reward to Optuna after each
epoch and stops where the pruner says so (:func:`run_trial`); where trials run (in this process, in local worker
processes or as Ray tasks: ``_Executor``); and the driver's loop that asks the study for trials, runs them
``n_jobs`` at a time, tells the study their results and, interrupted, stops the trials in flight
(:func:`run_trials`)."""

from __future__ import annotations

import contextlib
import math
import os
import socket
import traceback
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from maze_lab.run.search_space import SearchSpace
from maze_lab.run.study import STUDY_DB, TRIAL_DIR, make_pruner


# ---- one trial -------------------------------------------------------------------------------------------------------
def run_trial(job: dict[str, Any], trial: Any = None) -> dict[str, Any]:
    """Train one trial as a maze-lab run and return its result (``state``: complete, pruned or fail).

    :param job: what the driver sends: the run's components, overrides (with the trial's values), experiment,
        config modules, run directory, the trial's number, id and params, and where the study is served.
    :param trial: the Optuna trial in this process (trials run by the driver itself); None: the trial is reached
        through the driver's gRPC storage proxy at ``job["proxy"]``.
    """
    from maze_lab.run.run_context import RunContext
    from maze_lab.run.run_dir import RunDirectory

    result: dict[str, Any] = {"number": job["number"], "state": "fail", "value": None, "epoch": None,
                              "run_dir": job["run_dir"], "error": None}
    rc = None
    try:
        if trial is None:
            trial = _proxy_trial(job)
        rc = RunContext(**job["components"], overrides={**job["overrides"], **job["params"]},
                        experiment=job["experiment"], config_module=job["config_modules"], run_dir=job["run_dir"],
                        silent=True, trust=job.get("trust") or None)
        run_dir = RunDirectory(rc.run_dir)
        info = {"study": job["study_name"], "study_dir": job["study_dir"], "trial": job["number"],
                "params": job["params"], "state": "running", "host": socket.gethostname(), "pid": os.getpid()}
        run_dir.write_summary(optuna=info)
        pruned: dict[str, Any] = {}

        def report(trainer: Any, _stats: Any) -> None:
            """After each epoch: the evaluation reward to Optuna; stop the run where the pruner says so."""
            value = trainer.last_eval_reward
            if value is None or not math.isfinite(value):
                return
            trial.report(float(value), int(trainer.epoch))
            last = getattr(trainer.config, "n_epochs", 0)
            if last and trainer.epoch >= last:
                return  # the trial has trained its whole budget: it completes, whatever the pruner would say
            if trial.should_prune():
                pruned.update(epoch=int(trainer.epoch), value=float(value))
                trainer.request_stop()

        rc.trainer.callbacks.append(report)
        rc.train()
        summary = run_dir.read_summary()
        result["epoch"] = summary.get("epoch")
        if pruned:
            result.update(state="pruned", value=pruned["value"])
            run_dir.write_summary(optuna={**info, "state": "pruned"},
                                  stop_reason=f"pruned by Optuna after epoch {pruned['epoch']} (eval reward "
                                              f"{pruned['value']:g})")
            return result
        value = summary.get(job["objective"])
        if value is None or not math.isfinite(float(value)):
            raise RuntimeError(f"the run recorded no {job['objective']} (it needs an evaluation after each epoch; "
                               f"algorithm.eval_repeats must be > 0)")
        result.update(state="complete", value=float(value))
        run_dir.write_summary(optuna={**info, "state": "complete", "value": float(value)})
    except Exception as err:  # noqa: BLE001 - a failed trial is recorded as failed; the study goes on
        result["error"] = " ".join(f"{type(err).__name__}: {err}".split())[:2000]
        result["traceback"] = "".join(traceback.format_exception(err))[-5000:]
        if rc is not None and rc.runs:
            with contextlib.suppress(Exception):
                RunDirectory(rc.runs[0].run_directory.path).write_summary(
                    optuna={"study": job["study_name"], "study_dir": job["study_dir"], "trial": job["number"],
                            "params": job["params"], "state": "fail", "error": result["error"]})
    finally:
        if rc is not None:
            with contextlib.suppress(Exception):
                rc.close()
        if job.get("proxy") and trial is not None:
            with contextlib.suppress(Exception):
                trial.storage.close()  # the worker's channel to the proxy (worker processes take further trials)
    return result


def _proxy_trial(job: dict[str, Any]) -> Any:
    """The trial of ``job`` reached through the driver's gRPC storage proxy (pruner as the study's)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    host, port = job["proxy"]
    with warnings.catch_warnings():  # experimental since Optuna 4.2: the warning says nothing to maze-lab's users
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = optuna.storages.GrpcStorageProxy(host=host, port=port)
    # the sampler is never asked here (the driver sampled the values); a random one costs nothing to build
    study = optuna.load_study(study_name=job["study_name"], storage=storage,
                              sampler=optuna.samplers.RandomSampler(), pruner=make_pruner(job["pruner"]))
    return optuna.trial.Trial(study, job["trial_id"])


def _trial_in_worker(job: dict[str, Any]) -> dict[str, Any]:
    """Entry point of worker processes and Ray tasks: one torch thread (trials share the machine)."""
    import torch

    torch.set_num_threads(1)
    return run_trial(job)


# ---- where trials run ------------------------------------------------------------------------------------------------
def connect_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Connect to Ray the way all of maze-lab does (:func:`maze_lab.distributed.ray_runtime.ensure_ray`: an
    initialised Ray is reused, else ``address``, else a fresh local Ray with ``num_cpus``); returns whether Ray was
    started here (and is to be shut down by the caller). A cluster that cannot be reached or joined is a
    ConfigurationError."""
    from maze_lab.distributed.ray_runtime import ensure_ray

    return ensure_ray(address, num_cpus=num_cpus, setting="--address")


def shutdown_ray() -> None:
    """Shut down the Ray this process started (:func:`connect_ray` said so)."""
    import ray

    ray.shutdown()


class _Executor:
    """Runs trial jobs inline, in worker processes or as Ray tasks; results come back as futures."""

    def __init__(self, backend: str, n_jobs: int, address: str | None):
        self.backend = backend
        self.n_jobs = n_jobs
        self.pool: Any = None
        self._ray_started = False
        self._address = address
        self._remote: Any = None
        self._refs: list[Any] = []
        if backend == "ray":
            import ray

            self._ray_started = connect_ray(address, num_cpus=max(n_jobs, 1))
            # a failed trial is a result, not a retry; one CPU per trial
            self._remote = ray.remote(num_cpus=1, max_retries=0)(_trial_in_worker)
        elif n_jobs > 1:
            from maze_lab.run.ray_tasks import WorkerProcesses

            # a trial goes to a worker only when one is free, and the workers end with this process
            self.pool = WorkerProcesses()

    @property
    def remote(self) -> bool:
        """Whether trials run outside this process (and reach the study through the proxy)."""
        return self.backend == "ray" or self.pool is not None

    @property
    def proxy_host(self) -> str:
        """The address the trials reach this process at: loopback unless Ray runs them on other machines."""
        if self.backend != "ray":
            return "127.0.0.1"
        import ray

        if ray.util.client.ray.is_connected():
            # Ray Client (ray://head:10001): the tasks run on the cluster's machines; they reach this one at the
            # address it reaches the head from (the head must be able to connect back)
            address = self._address or os.environ.get("RAY_ADDRESS", "")
            head = address.split("://", 1)[-1].rsplit(":", 1)[0]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((head, 10001))
                return probe.getsockname()[0]
        here = ray.util.get_node_ip_address()
        nodes = {n.get("NodeManagerAddress") for n in ray.nodes() if n.get("Alive")}
        return "127.0.0.1" if nodes <= {here} else here

    def submit(self, job: dict[str, Any], trial: Any) -> Any:
        from concurrent.futures import Future

        if self.backend == "ray":
            ref = self._remote.remote(job)
            self._refs.append(ref)
            return ref.future()
        if self.pool is not None:
            return self.pool.submit(_trial_in_worker, job)  # a worker that died is replaced by a fresh one
        future: Future = Future()
        future.set_result(run_trial(job, trial))
        return future

    def kill(self) -> None:
        """End the trials in flight at once: their worker processes (with what they started) or Ray tasks."""
        if self.pool is not None:
            self.pool.kill()
        if self._refs:
            import ray

            for ref in self._refs:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            with contextlib.suppress(Exception):  # the cancelled tasks' workers are gone once their refs resolve
                ray.wait(self._refs, num_returns=len(self._refs), timeout=5)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
        if self._ray_started:
            import ray

            ray.shutdown()


def _best_note(study: Any) -> str | None:
    """``best 195.5 (trial 3)`` beside the bar, where a trial completed."""
    try:
        best = study.best_trial
    except ValueError:  # no completed trial yet
        return None
    return f"best {best.value:g} (trial {best.number})"


def say_above_bar(text: str) -> None:
    """Print a line of the driver above its progress bar."""
    from maze_lab.run.progress import print_line

    print_line(text)


# ---- the driver ------------------------------------------------------------------------------------------------------
def run_trials(study: Any, spec: SearchSpace, missing: int, n_jobs: int, backend: str,
               address: str | None, study_dir: Path, job_base: dict[str, Any], say: Any) -> list[int]:
    """Ask for ``missing`` trials, run them ``n_jobs`` at a time and tell the study their results."""
    from concurrent.futures import FIRST_COMPLETED, wait

    import optuna
    from optuna.trial import TrialState

    from maze_lab.run.ray_tasks import RunsInterrupted, interrupt_cause, interrupt_runs

    distributions = spec.distributions()
    executor = _Executor(backend, n_jobs, address)
    proxy = proxied = None
    if executor.remote:
        # from here on the proxy process alone uses study.db: the driver asks and tells through it as well
        from maze_lab.run.optuna_proxy import StudyProxy

        try:
            proxy = StudyProxy(study_dir / STUDY_DB, executor.proxy_host)
        except BaseException:
            executor.close()
            raise
        proxied = proxy.storage()
        study = optuna.load_study(study_name=study.study_name, storage=proxied, sampler=study.sampler,
                                  pruner=study.pruner)
    pending: dict[Any, Any] = {}
    in_flight: dict[Any, Path] = {}  # trial -> run directory, from its start until the study was told its result
    ran: list[int] = []
    launched = 0
    from maze_lab.run.progress import CountProgress

    progress = CountProgress(missing, "optimize", "trial", enabled=say is say_above_bar)
    try:
        while launched < missing or pending:
            while launched < missing and len(pending) < n_jobs:
                trial = study.ask(distributions)
                run_dir = study_dir / TRIAL_DIR.format(trial.number)
                in_flight[trial] = run_dir
                trial.set_user_attr("run_dir", str(run_dir))
                job = {**job_base, "number": trial.number, "trial_id": trial._trial_id, "params": dict(trial.params),
                       "run_dir": str(run_dir), "proxy": (proxy.host, proxy.port) if proxy else None}
                say(f"maze-lab optimize: trial {trial.number} started: {_fmt_params(trial.params)}")
                pending[executor.submit(job, None if executor.remote else trial)] = trial
                launched += 1
            finished, _ = wait(list(pending), timeout=0.5, return_when=FIRST_COMPLETED)
            for future in finished:
                trial = pending.pop(future)
                try:
                    result = future.result()
                except Exception as err:  # noqa: BLE001 - a worker that died: the trial failed, the study goes on
                    result = {"state": "fail", "error": " ".join(f"{type(err).__name__}: {err}".split())[:2000]}
                _tell(study, trial, result, TrialState)
                in_flight.pop(trial, None)
                ran.append(trial.number)
                value = result.get("value")
                say(f"maze-lab optimize: trial {trial.number} {result['state']}"
                    + (f": {value:g}" if value is not None else "")
                    + (f" ({result['error']})" if result.get("error") else ""))
                progress.advance(1, _best_note(study))
    except BaseException as err:  # Ctrl-C or an error of the driver: what was running did not finish
        cause = interrupt_cause(err)
        reason = f"interrupted ({cause}) while its study ran"
        # a trial run by this process recorded `interrupted` itself (the KeyboardInterrupt came through its training)
        interrupted = interrupt_runs(lambda: list(in_flight.values()), executor.kill, reason)
        for trial, run_dir in in_flight.items():
            with contextlib.suppress(Exception):
                trial.set_user_attr("interrupted", True)
                trial.set_user_attr("error", "interrupted: the optimize that ran it ended early")
                study.tell(trial, state=TrialState.FAIL)
            _note_interrupted(run_dir, reason)
        if isinstance(err, KeyboardInterrupt):
            raise RunsInterrupted(f"study interrupted ({cause}): {len(in_flight)} trial(s) in flight stopped, "
                                  f"{len(interrupted)} run(s) recorded interrupted", interrupted, missing - launched,
                                  cause, f"study:{job_base['study_name']}", len(in_flight)) from err
        raise
    finally:
        progress.close()
        executor.close()
        if proxy is not None:
            with contextlib.suppress(Exception):
                proxied.close()
            proxy.stop()
    return ran


def _note_interrupted(run_dir: Path, reason: str) -> None:
    """The trial of an interrupted run failed (it did not train its budget): so says the run's summary too."""
    from maze_lab.run.run_dir import RunDirectory

    run = RunDirectory(run_dir)
    with contextlib.suppress(Exception):
        if run.summary_file.exists():
            info = run.read_summary().get("optuna")
            if isinstance(info, dict):
                run.write_summary(optuna={**info, "state": "fail", "error": reason})


def _tell(study: Any, trial: Any, result: dict[str, Any], states: Any) -> None:
    """Tell the study how a trial ended."""
    if result.get("epoch") is not None:
        trial.set_user_attr("epochs", result["epoch"])
    if result["state"] == "complete":
        study.tell(trial, result["value"])
    elif result["state"] == "pruned":
        study.tell(trial, state=states.PRUNED)  # Optuna keeps the last reported reward as its value
    else:
        trial.set_user_attr("error", result.get("error") or "unknown error")
        if result.get("traceback"):  # also where the trial failed before its run directory was made
            trial.set_user_attr("traceback", result["traceback"])
        study.tell(trial, state=states.FAIL)



def _fmt_params(params: Mapping[str, Any]) -> str:
    """A trial's values in one line (``algorithm.lr=0.001, algorithm.n_epochs=4``)."""
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())

