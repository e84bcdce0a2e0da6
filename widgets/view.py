"""What every view of maze_lab.widgets shares: redrawing on the kernel's event loop while its run may still change.

A view has ``.widget`` (what is displayed), ``update(force=False)`` (take in what is new and redraw what changed;
never raises: a drawing error is shown in the view) and ``close()``. Displaying a view whose source is live starts
a task on the kernel's asyncio loop that calls :meth:`PollingView.tick` every ``refresh_seconds`` and ends by itself
after one last tick once nothing can change any more; ``close()`` cancels it. Nothing here runs in a training
thread: the run goes on whatever a view does.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


class PollingView:
    """Base of the views: polling on the kernel's loop, display, close. Subclasses set ``widget`` and implement
    ``update``; ``live`` says whether anything may still change (default: the view's ``source`` is live)."""

    refresh_seconds: float = 1.0
    _task: asyncio.Task | None = None
    _closed: bool = False
    ticks: int = 0

    # ---- what subclasses provide -------------------------------------------------------------------------------
    widget: Any

    def update(self, force: bool = False) -> bool:
        """Take in what is new and redraw what changed; returns whether anything was redrawn."""
        raise NotImplementedError

    @property
    def live(self) -> bool:
        """Whether new data may still come (polling goes on while it does)."""
        return bool(self.source.live)

    def _poll_error(self, what: str, err: BaseException) -> None:
        """An error met while polling: kept in :attr:`errors`; subclasses also show it where users see it."""
        self.__dict__.setdefault("errors", []).append(f"{what}: {type(err).__name__}: {err}")

    # ---- polling -----------------------------------------------------------------------------------------------
    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
        if self.live:
            self.start()

    @property
    def task(self) -> asyncio.Task | None:
        """The polling task (None before :meth:`start`)."""
        return self._task

    def start(self) -> asyncio.Task | None:
        """Tick on the kernel's event loop every ``refresh_seconds`` until nothing can change any more (then one
        last tick) or the view is closed; returns the task (the running one where polling already goes on)."""
        if self._closed:
            return None
        if self._task is not None and not self._task.done():
            return self._task
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called from a cell or a script: the task runs once the loop does
            loop = asyncio.get_event_loop_policy().get_event_loop()
        self._task = loop.create_task(self._poll())
        return self._task

    def stop_updates(self) -> None:
        """Stop polling (:meth:`start` polls again)."""
        if self._task is not None:
            self._task.cancel()

    async def _poll(self) -> None:
        while not self._closed:
            try:
                live = self.live
            except Exception as err:  # noqa: BLE001 - keep polling: the next look may succeed
                self._poll_error("reading the run", err)
                live = True
            self.tick(force=not live)
            if not live:
                return  # nothing can change any more, and the last state is drawn
            await asyncio.sleep(self.refresh_seconds)

    def tick(self, force: bool = False) -> bool:
        """One poll: :meth:`update`, with any error shown in the view instead of raised. Returns whether anything
        was redrawn."""
        self.ticks += 1
        try:
            return bool(self.update(force=force))
        except Exception as err:  # noqa: BLE001 - a broken drawing must never disturb the run or the kernel
            self._poll_error("drawing", err)
            return False

    def close(self) -> None:
        """Stop polling and close the view's widgets (only its own)."""
        self._closed = True
        self.stop_updates()
        close_tree(self.widget)


def close_tree(widget: Any) -> None:
    """Close a widget and the widgets it contains (only those: ``Widget.close_all`` would close every widget)."""
    for child in getattr(widget, "children", ()) or ():
        close_tree(child)
    with contextlib.suppress(Exception):
        widget.close()
