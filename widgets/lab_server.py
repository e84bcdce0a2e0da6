"""The kernel manager of the Lab app's voila server: the kernel of a page that is gone is shut down.

Every page of ``maze-lab lab`` (each load, reload, tab, browser) gets a kernel of its own. A page that closes
normally asks voila to shut its kernel down (a beacon sent at ``beforeunload``); a page that never says goodbye (a
crashed or killed browser, a laptop that slept, a lost network) leaves its kernel behind. jupyter_server's idle
culler cannot take those: it counts every message a kernel sends as activity, and the app's cockpit sends an update
with each epoch of a live run, so the kernel of a closed page that shows a live run never looks idle.

:class:`LabKernelManager` culls by the one thing that says a page is gone: no connection. A kernel that no page has
been connected to for :attr:`LabKernelManager.cull_disconnected_timeout` seconds is shut down, whatever it sends; a
kernel whose page has not connected yet (voila runs the notebook before the page connects) gets
:attr:`LabKernelManager.cull_unconnected_timeout`. It looks every ``cull_interval`` seconds (jupyter_server's option).
Nothing is lost: the app's runs train in processes of their own, and its page state is in the base directory.
"""

from __future__ import annotations

import time

from jupyter_core.utils import ensure_async
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from tornado.ioloop import IOLoop, PeriodicCallback
from traitlets import Integer

DISCONNECTED_TIMEOUT_S = 600
"""Default seconds a kernel may live on without a page (a sleeping laptop's page reconnects within them)."""
UNCONNECTED_TIMEOUT_S = 300
"""Default seconds from a kernel's start until its page must have connected."""
CULL_INTERVAL_S = 60
"""Default seconds between two looks for kernels without a page."""


class LabKernelManager(AsyncMappingKernelManager):
    """jupyter_server's kernel manager, with kernels culled once no page is connected to them (see the module
    docstring). Its idle culling (``cull_idle_timeout``) still works where it is set."""

    cull_disconnected_timeout = Integer(
        DISCONNECTED_TIMEOUT_S, config=True,
        help="Seconds after the last page disconnected from a kernel until the kernel is shut down; 0: never.")
    cull_unconnected_timeout = Integer(
        UNCONNECTED_TIMEOUT_S, config=True,
        help="Seconds after a kernel started until it is shut down where no page ever connected to it; 0: never.")

    _page_culler: PeriodicCallback | bool | None = None

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._alone_since: dict[str, float] = {}
        """Kernel id -> when its last page disconnected (or it started, until a page connects)."""
        self._connected_once: set[str] = set()

    async def _async_start_kernel(self, *args, **kwargs) -> str:  # type: ignore[override]
        kernel_id = await super()._async_start_kernel(*args, **kwargs)
        self._alone_since.setdefault(kernel_id, time.monotonic())
        self._start_page_culler()
        return kernel_id

    start_kernel = _async_start_kernel

    def notify_connect(self, kernel_id: str) -> None:
        super().notify_connect(kernel_id)
        self._connected_once.add(kernel_id)
        self._alone_since.pop(kernel_id, None)

    def notify_disconnect(self, kernel_id: str) -> None:
        super().notify_disconnect(kernel_id)
        if kernel_id in self._kernels and not self._kernel_connections.get(kernel_id, 0):
            self._alone_since[kernel_id] = time.monotonic()

    def remove_kernel(self, kernel_id: str):  # type: ignore[override]
        self._alone_since.pop(kernel_id, None)
        self._connected_once.discard(kernel_id)
        return super().remove_kernel(kernel_id)

    def _start_page_culler(self) -> None:
        if self._page_culler is not None:
            return
        if self.cull_disconnected_timeout <= 0 and self.cull_unconnected_timeout <= 0:
            self._page_culler = False
            return
        interval = self.cull_interval if self.cull_interval > 0 else self.cull_interval_default
        _ = IOLoop.current()
        self._page_culler = PeriodicCallback(self.cull_pageless_kernels, 1000 * interval)
        self.log.info("Shutting down kernels without a page: %s s after their page left, %s s after start where "
                      "none connected; looking every %s s", self.cull_disconnected_timeout,
                      self.cull_unconnected_timeout, interval)
        self._page_culler.start()

    async def cull_pageless_kernels(self) -> None:
        """Shut down every kernel that has been without a page for longer than its timeout."""
        now = time.monotonic()
        for kernel_id in list(self._kernels):
            since = self._alone_since.get(kernel_id)
            if since is None or self._kernel_connections.get(kernel_id, 0):
                continue
            connected = kernel_id in self._connected_once
            timeout = self.cull_disconnected_timeout if connected else self.cull_unconnected_timeout
            if timeout <= 0 or now - since <= timeout:
                continue
            self.log.warning("Culling kernel %s: %s for %.0f s", kernel_id,
                             "its page left" if connected else "no page connected", now - since)
            try:
                await ensure_async(self.shutdown_kernel(kernel_id))
            except Exception as err:  # noqa: BLE001 - the next look tries again
                self.log.exception("culling kernel %s failed: %s", kernel_id, err)
