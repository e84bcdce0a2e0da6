"""Shared pytest set-up: keep torch to one thread (2-core CI machines run several processes); one local Ray per
module for the tests that need one."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    """One local Ray for a test module (starting one takes 5-25 s on a loaded machine); maze-lab's own start reuses
    an initialized Ray. Yields the ray module; shuts down only a Ray it started. ``address="local"``: a fresh
    instance of the test's own, as maze-lab starts one; without it ``ray.init`` would join a cluster that ``ray
    start`` left running on the machine (and refuse ``num_cpus`` there)."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        for attempt in range(2):
            try:
                ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
                break
            except Exception:  # noqa: BLE001
                # Ray's raylet waits a fixed ~30 s for its metrics agent; on a 2-core machine under heavy load it
                # can die waiting ("Timed out waiting for file .../metrics_agent_port_..."): start once more
                ray.shutdown()
                if attempt:
                    raise
    yield ray
    if started:
        ray.shutdown()


def pytest_configure(config: Any) -> None:
    """Ctrl-C as in a terminal, however the suite was started: a shell without job control (``bash -c '... &'``, a
    CI runner's background step) starts it with SIGINT ignored, which Python then leaves ignored, so neither
    ``_thread.interrupt_main`` in this process nor a SIGINT sent to a command started here would interrupt anything.
    A Python handler is reset to the default at ``exec``, so the commands the tests start get Ctrl-C as well."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    """Tests marked ``docs`` run last: the documentation build shows the notebooks as the notebook tests executed
    them (``test-artifacts/executed/``), so in a full run it comes after them instead of executing them again."""
    items[:] = [item for item in items if item.get_closest_marker("docs") is None] + \
               [item for item in items if item.get_closest_marker("docs") is not None]
