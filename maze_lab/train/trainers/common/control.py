"""Stop, pause, resume and checkpoint requests to a trainer from other threads (background runs, notebooks, the
run directory's control file)."""

from __future__ import annotations

import threading
import time
from pathlib import Path


class TrainingControl:
    """Flags a training loop checks between updates; the methods may be called from any thread. The class that
    mixes it in writes checkpoints (``save_checkpoint``)."""

    def _init_control(self) -> None:
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._wake = threading.Event()  # set by every request: a paused loop looks at them again
        self._checkpoint_requested = threading.Event()
        self.requested_checkpoints = 0
        """Checkpoints written on request (:meth:`request_checkpoint`) so far."""
        self.last_requested_checkpoint: Path | None = None
        self.holding = False
        """True while the loop holds between two updates because it is paused."""

    def request_stop(self) -> None:
        """Stop after the current update (a checkpoint of the current weights is written)."""
        self._stop.set()
        self._running.set()
        self._wake.set()

    def pause(self) -> None:
        """Pause between updates until :meth:`resume`."""
        self._running.clear()
        self._wake.set()

    def resume(self) -> None:
        """Continue after :meth:`pause`."""
        self._running.set()
        self._wake.set()

    def request_checkpoint(self) -> int:
        """Write a checkpoint at the next boundary between updates (at once where the run is paused); returns the
        value :attr:`requested_checkpoints` reaches once it is written."""
        target = self.requested_checkpoints + 1
        self._checkpoint_requested.set()
        self._wake.set()
        return target

    @property
    def paused(self) -> bool:
        """Whether the trainer is paused."""
        return not self._running.is_set()

    def _exclude_from_wall_time(self, seconds: float) -> None:
        """Hook: ``seconds`` the loop held (paused) are not counted as training time."""

    def _between_updates(self) -> None:
        """Where the loop is between two updates: writes a requested checkpoint and holds while paused."""
        held_since: float | None = None
        while True:
            self._wake.clear()
            if self._checkpoint_requested.is_set():
                self._checkpoint_requested.clear()
                self.last_requested_checkpoint = self.save_checkpoint()
                self.requested_checkpoints += 1
            if self._running.is_set():
                self.holding = False
                if held_since is not None:  # a pause is no training time
                    self._exclude_from_wall_time(time.perf_counter() - held_since)
                return
            if held_since is None:
                held_since = time.perf_counter()
            self.holding = True
            self._wake.wait(1.0)
