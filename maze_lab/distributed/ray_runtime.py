"""Starting or joining Ray: maze-lab's one way to Ray, for the trainers' workers (``runner=ray``, ES and IMPALA on
Ray, whose actors :mod:`maze_lab.distributed.ray_workers` makes) and for the run layer's sweeps, notebook batches and
studies.

Ray is imported only when something asks for it (:func:`import_ray`); installing it is optional (``maze-lab[scale]``).
"""

from __future__ import annotations

import os
from typing import Any

from maze_lab.core.utils.factory import ConfigurationError


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

    label, local = f"{setting}={address!r}", "or leave the address out for a local Ray"
    if not address and os.environ.get("RAY_ADDRESS"):
        # the value came from the environment, not from what the user passed: the messages say so
        address = os.environ["RAY_ADDRESS"]
        label = f"RAY_ADDRESS={address!r} (an environment variable of this process; {setting} was not given)"
        local = f"or unset RAY_ADDRESS for a local Ray ({setting}=local starts one whatever RAY_ADDRESS says)"
    address = address or None
    if address is not None and address not in ("auto", "local"):
        _check_reachable(address, label, local)
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
            f"{label}: cannot join the Ray cluster ({' '.join(str(err).split())}). Start it with "
            f"`ray start --head` on the head node (`ray status` shows it); Ray's token authentication needs the "
            f"cluster's token here too (RAY_AUTH_MODE=token with ~/.ray/auth_token or RAY_AUTH_TOKEN)") from err
    return True


def _check_reachable(address: str, label: str, local: str) -> None:
    """Refuse at once a cluster address where nothing listens (Ray itself would retry it for minutes).

    :param label: where the address came from and its value (``runner.address='host:6379'``), for the message.
    :param local: how to get a local Ray instead, for the message.
    """
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address if "://" in address else f"//{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number
        host, port = None, None
    if not host:
        raise RayConnectionError(f"{label} is not HOST:PORT, ray://HOST:PORT or auto")
    port = port or (10001 if parts.scheme == "ray" else 6379)
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as err:
        raise RayConnectionError(
            f"{label}: no Ray cluster answers at {host}:{port} ({err.strerror or err}). Start one with "
            f"`ray start --head --port={port}` on that machine (Ray Client, ray://: the head's port 10001) and "
            f"`ray start --address=HEAD:6379` on the others, {local}") from None
