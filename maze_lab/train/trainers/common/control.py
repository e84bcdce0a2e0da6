"""Stop, pause and resume of a trainer from other threads (background runs, notebooks)."""

from __future__ import annotations

import threading


class TrainingControl:
    """Flags a training loop checks between updates; the methods may be called from any thread."""

    def _init_control(self) -> None:
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()

    def request_stop(self) -> None:
        """Stop after the current update (a checkpoint of the current weights is written)."""
        self._stop.set()
        self._running.set()

    def pause(self) -> None:
        """Pause between updates until :meth:`resume`."""
        self._running.clear()

    def resume(self) -> None:
        """Continue after :meth:`pause`."""
        self._running.set()

    @property
    def paused(self) -> bool:
        """Whether the trainer is paused."""
        return not self._running.is_set()
