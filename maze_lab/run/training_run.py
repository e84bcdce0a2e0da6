"""One run trained in this process (``_Run``): it makes the run directory's config and summary, builds envs, model,
trainer and writers on first use (the trainer as :mod:`maze_lab.run.build` says), trains while this process owns the
run (status, heartbeat, requests from any process through the run directory) and records how the run ended.
``RunContext``, a detached run's process and a grid's worker processes and Ray tasks all train through it."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from maze_lab.core.utils.log import get_logger
from maze_lab.run.build import (
    BuildParts,
    algorithm_config,
    build_trainer,
    run_algorithm_object,
    trainer_class,
    vector_env_class,
)
from maze_lab.run.env_factory import RunEnvFactory, wrappers_in_run_dir
from maze_lab.run.handle import RunHandle, final_status
from maze_lab.run.resume import Previous, previous_statistics, remove_results, start_from_input_dir
from maze_lab.run.run_dir import RunDirectory, new_run_dir, versions
from maze_lab.run.run_status import RunControlError, RunOwner

_log = get_logger(__name__)


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


class _Run:
    """Builds and owns the parts of one run: envs, model, trainer, writers, run directory."""

    def __init__(self, config: DictConfig, objects: dict[str, Any], run_dir: Path | None, silent: bool,
                 previous: Previous = "none", summary: dict[str, Any] | None = None, verbose: bool = False):
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
            remove_results(self.run_directory)
        previous_stats = previous_statistics(path) if previous == "continue" else None
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
        from maze_lab.train.vector_env import SequentialVectorEnv

        cfg = self.config
        runner = cfg.runner
        self.run_directory.write_summary(versions=versions())
        torch.manual_seed(int(cfg.seed))
        writers = [self.store, TensorBoardWriter(self.run_directory.tensorboard_dir)]
        if self.verbose:  # the full statistics tables, above the progress bar
            writers.append(ConsoleWriter(stream=AboveBar()))
        self.writers = writers
        venv_cls = vector_env_class(runner)
        algorithm = algorithm_config(cfg, self.objects)
        trainer_cls = trainer_class(algorithm)
        eval_env = self.eval_env = SequentialVectorEnv(
            [self.env_factory(i, "eval") for i in range(int(runner.eval_concurrency))], logging_prefix="eval",
            writers=writers)
        evaluator = RolloutEvaluator(eval_env, n_episodes=algorithm.eval_repeats,
                                     deterministic=algorithm.deterministic_eval)
        parts = BuildParts(config=cfg, objects=self.objects, algorithm=algorithm, trainer_cls=trainer_cls,
                           evaluator=evaluator, writers=writers, eval_env=eval_env, venv_cls=venv_cls,
                           env_factory=self.env_factory, run_directory=self.run_directory)
        try:
            trainer = build_trainer(parts)
        finally:
            self.train_env = parts.train_env  # where made: a build that fails from here on closes it (_build_failed)
        # the values actually trained with where the algorithm's bounded_box block replaced configured ones
        self.run_directory.write_summary(bounded_box_changes=dict(getattr(trainer, "bounded_box_changes", {})))
        if cfg.input_dir:
            start_from_input_dir(trainer, cfg.input_dir, self.run_directory)
        trainer.callbacks.append(self._on_epoch)
        return trainer

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


def _train_reward(store: Any) -> float | None:
    df = store.to_dataframe()
    sel = df[(df.prefix == "train") & (df.event == "reward") & (df.name == "mean")]
    return None if sel.empty else float(sel.value.iloc[-1])

