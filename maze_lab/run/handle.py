"""A run training in a background thread of the kernel: :class:`RunHandle` (status, progress, pause, resume, stop,
live statistics), :class:`RunFailedError`, the final status of a run whose trainer returned (:func:`final_status`), and
the helpers that set torch's intra-op threads of one thread only."""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from maze_lab.core.utils.log import get_logger
from maze_lab.run.kernel_yield import background_run
from maze_lab.run.run_status import RunControlError

_log = get_logger(__name__)


class RunFailedError(RuntimeError):
    """A background run ended with an exception; the message carries its traceback."""


def final_status(stop_reason: str | None) -> tuple[str, str | None]:
    """The status and reason of a run whose trainer returned with ``stop_reason``."""
    if stop_reason == "stopped":
        return "stopped", "stopped on request; a checkpoint of the current weights was written"
    if stop_reason and stop_reason.startswith("early stopping"):
        return "early-stopped", stop_reason
    return "done", None


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

    def __init__(self, run: Any, n_epochs: int | None, torch_threads: int | None = 1):
        # run: the run to train, a ``maze_lab.run.training_run._Run`` (which makes its handle: not imported here)
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
