"""Shared pytest set-up: keep torch to one thread (2-core CI machines run several processes); one local Ray per
module for the tests that need one."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    """One local Ray for a test module (starting one takes 5-25 s on a loaded machine); maze-lab's own start reuses
    an initialized Ray. Yields the ray module; shuts down only a Ray it started."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()
