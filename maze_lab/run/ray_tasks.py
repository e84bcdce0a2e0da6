"""Grid points as Ray tasks: joining or starting Ray, and running a list of independent jobs with a bound on how
many are in flight.

Used by sweeps (``RunContext(multirun=True, launcher="ray")``, ``maze-lab sweep --ray``) and by notebook batches
(``maze_lab.run.notebook_batch``). Ray is imported only here and only when a Ray launcher is asked for.

On a cluster (``address="auto"`` on a node of it, or ``"ray://head:10001"`` from outside), every node must see
maze-lab (installed in the same environment) and the runs' ``log_base_dir`` (a shared file system): each task writes
its run directory where it runs.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from maze_lab.core.utils.factory import ConfigurationError

LAUNCHERS = ("local", "ray")
"""How the runs of a grid are executed: local worker processes, or Ray tasks."""


class RayTaskFailed(RuntimeError):
    """A Ray task ended without a result (its worker died, it was cancelled, or Ray lost it); the message says why."""


def import_ray() -> Any:
    """The ``ray`` module, or a ConfigurationError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigurationError("Ray is not installed; install it with: pip install 'maze-lab[scale]' "
                                 "(or use the local launcher: leave out --ray / launcher='ray')") from None
    return ray


class RayConnectionError(ConfigurationError, ConnectionError):
    """A Ray cluster address that cannot be reached or joined; the message names the setting and how to start one."""


def ensure_ray(address: str | None = None, num_cpus: int | None = None, setting: str = "Ray address") -> bool:
    """Connect this process to Ray unless it is connected already; returns whether this call did the connecting (and
    its caller is to shut Ray down).

    An initialized Ray (a notebook's own ``ray.init``, a test fixture, an earlier sweep) is reused as it is, whatever
    ``address`` says. This is maze-lab's one way of starting or joining Ray (runner=ray, sweeps, notebook batches,
    optimize).

    :param address: None: ``$RAY_ADDRESS`` where set (as in a job started by ``ray job submit``), else start a new
        local Ray in this process (``num_cpus`` CPUs, default all of them); ``"auto"``: join the cluster whose node
        runs on this machine (``ray start`` ran here); ``"host:6379"``: join that cluster from one of its nodes;
        ``"ray://host:10001"``: join it from outside through Ray Client.
    :param num_cpus: CPUs of a local Ray this call starts (ignored when joining a cluster).
    :param setting: how the caller's user gave the address (``runner.address``, ``--address``), for messages.
    """
    ray = import_ray()
    if ray.is_initialized():
        return False
    import logging

    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is not None and address not in ("auto", "local"):
        _check_reachable(address, setting)
    options: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING,
                               "log_to_driver": False}
    try:
        if address is None or address == "local":
            # "local": a fresh instance of our own, never a cluster that happens to run on this machine (ray.init()
            # without an address would join the last one `ray start` started here)
            ray.init(address="local", num_cpus=num_cpus, **options)
        elif address.startswith("ray://"):
            ray.init(address=address)  # Ray Client: the options above would be passed on to the server's ray.init
        else:
            ray.init(address=address, **options)
    except ConnectionError as err:
        raise RayConnectionError(
            f"{setting}={address!r}: cannot join the Ray cluster ({' '.join(str(err).split())}). Start it with "
            f"`ray start --head` on the head node (`ray status` shows it); Ray's token authentication needs the "
            f"cluster's token here too (RAY_AUTH_MODE=token with ~/.ray/auth_token or RAY_AUTH_TOKEN)") from err
    return True


def stop_ray_actors(actors: Sequence[Any], timeout: float = 30.0) -> None:
    """Ask each actor to close (``actor.close.remote()``: flush and close its envs), wait up to ``timeout`` seconds
    for those that still answer, then kill them all. A dead or failing actor cannot flush; the others still do."""
    ray = import_ray()
    if not actors or not ray.is_initialized():
        return  # nothing started, or Ray was shut down already and the actors went with it
    refs = [a.close.remote() for a in actors]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
    for ref in ready:
        with contextlib.suppress(Exception):
            ray.get(ref)
    for actor in actors:
        with contextlib.suppress(Exception):  # already gone
            ray.kill(actor)


def _check_reachable(address: str, setting: str) -> None:
    """Refuse at once a cluster address where nothing listens (Ray itself would retry it for minutes)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address if "://" in address else f"//{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number
        host, port = None, None
    if not host:
        raise RayConnectionError(f"{setting}={address!r} is not HOST:PORT, ray://HOST:PORT or auto")
    port = port or (10001 if parts.scheme == "ray" else 6379)
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as err:
        raise RayConnectionError(
            f"{setting}={address!r}: no Ray cluster answers at {host}:{port} ({err.strerror or err}). Start one with "
            f"`ray start --head --port={port}` on that machine (Ray Client, ray://: the head's port 10001) and "
            f"`ray start --address=HEAD:6379` on the others, or leave the address out for a local Ray") from None


def run_as_ray_tasks(func: Callable[..., Any], jobs: Sequence[tuple[Any, ...]], n_jobs: int,
                     address: str | None = None, num_cpus_per_task: float = 1) -> list[Any]:
    """Call ``func(*args)`` for each ``args`` of ``jobs`` as a Ray task, at most ``n_jobs`` at a time; returns the
    results in the order of ``jobs``, with a :class:`RayTaskFailed` in place of a task that ended without one.

    ``func`` goes to the workers pickled by reference: a function of a module the workers can import (maze-lab's
    own). A task is not retried: a run that killed its worker is reported, not started again into a second run
    directory.

    :param n_jobs: tasks in flight at once (Ray still waits for free CPUs where the cluster has fewer).
    :param address: where Ray runs, see :func:`ensure_ray`; a local Ray gets at least ``n_jobs`` CPUs.
    """
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1:
        raise ConfigurationError(f"n_jobs must be an int >= 1 (Ray tasks in flight at once), got {n_jobs!r}")
    ray = import_ray()
    ensure_ray(address, num_cpus=max(n_jobs, os.cpu_count() or 1) if address is None else None)
    remote = ray.remote(num_cpus=num_cpus_per_task, max_retries=0)(_call)
    results: list[Any] = [None] * len(jobs)
    pending: dict[Any, int] = {}
    queue = list(enumerate(jobs))[::-1]
    try:
        while queue or pending:
            while queue and len(pending) < n_jobs:
                index, args = queue.pop()
                pending[remote.remote(func, *args)] = index
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                index = pending.pop(ref)
                try:
                    results[index] = ray.get(ref)
                except Exception as err:  # noqa: BLE001 - a lost task is one failed run, the others go on
                    results[index] = RayTaskFailed(f"Ray task {index} ended without a result: "
                                                   f"{type(err).__name__}: {' '.join(str(err).split())[:2000]}")
    except BaseException:
        for ref in pending:  # Ctrl-C (or a failure of Ray itself): the tasks still running are ended
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise
    return results


def _call(func: Callable[..., Any], *args: Any) -> Any:
    """The body of every task: ``func(*args)`` (one remote function for all, whatever ``func`` is)."""
    return func(*args)


def portable_error(err: BaseException, fallback: type[Exception] = RuntimeError) -> BaseException:
    """``err`` without its traceback where it survives pickling, else a ``fallback`` with its text (an exception
    class of a notebook cannot be unpickled in another process)."""
    try:
        pickle.loads(pickle.dumps(err))
    except Exception:  # noqa: BLE001 - any unpicklable exception
        err = fallback(f"{type(err).__name__}: {err}")
    err.__traceback__ = None
    return err


def train_configs_as_ray_tasks(configs: Sequence[dict], n_epochs: int | None, n_jobs: int,
                               address: str | None = None, summaries: Sequence[dict] | None = None
                               ) -> list[tuple[Path, BaseException | None]]:
    """Train each composed config (plain dicts) as a Ray task (``run_context.train_config_in_worker``, as local
    grid workers do), ``n_jobs`` at a time; returns per config its run directory and its error (None where it
    trained). ``summaries``: per config, fields for its run's summary (the sweep id and index).

    The run directories are made here, before the tasks start, so that a task whose worker dies still has its run
    directory, which is then marked ``failed`` with the reason.
    """
    from maze_lab.run.run_dir import RunDirectory, new_run_dir
    from maze_lab.run.run_status import ENDED

    # Ray first: an address that cannot be joined leaves no empty run directories behind
    ensure_ray(address, num_cpus=max(n_jobs, os.cpu_count() or 1) if address is None else None)
    from maze_lab.run.run_context import train_config_in_worker

    run_dirs = [new_run_dir(cfg["log_base_dir"], cfg["experiment"]) for cfg in configs]
    summaries = list(summaries) if summaries is not None else [{} for _ in configs]
    results = run_as_ray_tasks(train_config_in_worker,
                               [(cfg, n_epochs, str(path), summary) for cfg, path, summary in
                                zip(configs, run_dirs, summaries, strict=True)], n_jobs, address)
    out: list[tuple[Path, BaseException | None]] = []
    for path, result in zip(run_dirs, results, strict=True):
        if isinstance(result, RayTaskFailed):
            run = RunDirectory(path)
            with contextlib.suppress(OSError, ValueError):  # a damaged summary is rewritten below as well
                status = run.read_summary().get("status") if run.summary_file.exists() else None
                if status not in ENDED:
                    run.write_summary(status="failed", error=str(result),
                                      finished=time.strftime("%Y-%m-%dT%H:%M:%S"))
            out.append((path, result))
        else:
            out.append((Path(result[0]), result[1]))
    return out


def remote_worker_class(body: type, n_workers: int, num_cpus_per_worker: float, num_gpus_per_worker: float,
                        owns_ray: bool, what: str) -> Any:
    """``ray.remote`` of a worker body with the resources each worker reserves, after checking that the cluster
    can place ``n_workers`` of them: a Ray started by this run (``owns_ray``) never grows, so too few CPUs is an
    error there; on a cluster it is a warning (the workers wait for nodes to join).

    Ray never restarts these actors itself: a worker's death reaches its owner, which decides (a named error, or a
    fresh worker where the algorithm allows, see ``runner.max_worker_restarts``).

    :param what: the workers, for messages (``runner=ray``, ``ES on Ray``).
    """
    import sys

    ray = import_ray()
    need, have = n_workers * num_cpus_per_worker, ray.cluster_resources().get("CPU", 0.0)
    if need > have:
        message = (f"{what}: {n_workers} workers x {num_cpus_per_worker:g} CPUs need {need:g} CPUs; the Ray cluster "
                   f"has {have:g}. Lower runner.n_workers or runner.num_cpus_per_worker")
        if owns_ray:
            raise RuntimeError(message)
        print(f"maze-lab: WARNING {message}, or add nodes (the workers wait until the cluster has room)",
              file=sys.stderr, flush=True)
    return ray.remote(num_cpus=num_cpus_per_worker, num_gpus=num_gpus_per_worker, max_restarts=0)(body)
