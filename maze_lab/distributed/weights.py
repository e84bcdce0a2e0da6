"""The weights a learner hands its workers: a policy's floating-point state as one flat float32 vector
(:func:`flat_weights`, :func:`load_flat_weights`), and one shared-memory copy of it that local worker processes read
without a message each (:class:`SharedWeights`). Over Ray the same vector goes into the object store once
(:meth:`maze_lab.distributed.transport.RayTransport.broadcast`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np


def policy_tensors(policy: Any) -> list[Any]:
    """The floating-point tensors of the policy's state (parameters and buffers), in a fixed order; they share the
    storage of the modules, so that writing them changes the policy."""
    return [t for module in policy._modules().values() for t in module.state_dict().values() if t.is_floating_point()]


def flat_weights(policy: Any) -> np.ndarray:
    """The floating-point state of the policy (any device) as one float32 vector, in ``policy_tensors`` order."""
    import torch

    with torch.no_grad():
        return torch.cat([t.detach().reshape(-1).float().cpu() for t in policy_tensors(policy)]).numpy()


def load_flat_weights(tensors: list[Any], flat: np.ndarray) -> None:
    """Copy a vector made by :func:`flat_weights` into a policy's ``policy_tensors``."""
    import torch

    flat = np.asarray(flat, dtype=np.float32)
    if not flat.flags.writeable:  # e.g. an array of Ray's object store: torch wants memory it may write
        flat = flat.copy()
    copy_flat(tensors, torch.from_numpy(flat))


def copy_flat(tensors: Sequence[Any], flat: Any) -> None:
    """Copy a flat tensor (any device) into ``tensors``, in order (in place: they never share memory with ``flat``)."""
    import torch

    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset:offset + n].view_as(t))
            offset += n


class SharedWeights:
    """The policy's weights in shared memory, with the learner's update count as version.

    A sequence counter instead of a lock (a seqlock): the learner makes it odd while it writes and even again after;
    an actor copies the array and keeps the copy only where the counter was even and unchanged around the copy. No
    actor ever blocks the learner, so an actor killed in the middle of a copy cannot hang it.

    :param n_values: the number of float values of the policy's state.
    :param ctx: the multiprocessing context the actor processes are started with.
    """

    def __init__(self, n_values: int, ctx: Any):
        self.array = ctx.RawArray("f", max(n_values, 1))
        self.version = ctx.RawValue("q", -1)
        self.sequence = ctx.RawValue("q", 0)

    def publish(self, policy: Any, version: int) -> None:
        """Write the policy's weights (any device) and their version (the learner only)."""
        self.write(flat_weights(policy), version)

    def write(self, flat: np.ndarray, version: int) -> None:
        """Write a flat vector (:func:`flat_weights`) and its version (the learner only)."""
        view = np.frombuffer(self.array, dtype=np.float32)
        self.sequence.value += 1  # odd: a write is under way
        view[:flat.size] = flat
        self.version.value = version
        self.sequence.value += 1

    def read(self, have: int) -> tuple[int, np.ndarray | None]:
        """``(version, a copy of the vector)``, or ``(have, None)`` where the version written is still ``have``."""
        view = np.frombuffer(self.array, dtype=np.float32)
        while True:
            before = self.sequence.value
            if before % 2:
                time.sleep(0.0005)  # the learner is writing; it takes microseconds
                continue
            version = int(self.version.value)
            if version == have:
                return have, None
            flat = view.copy()
            if self.sequence.value == before:
                return version, flat

    def pull(self, tensors: list[Any], have: int) -> int:
        """Copy the weights into ``tensors`` where their version differs from ``have``; returns the version now held."""
        version, flat = self.read(have)
        if flat is not None:
            load_flat_weights(tensors, flat)
        return version


class SharedValue:
    """Stands in a message for what the driver last wrote into the workers' :class:`SharedWeights`
    (:meth:`maze_lab.distributed.transport.ProcessTransport.broadcast`); the worker's side hands the handler the
    vector itself, as Ray hands an actor the object behind a reference."""

    __slots__ = ("version",)

    def __init__(self, version: int):
        self.version = version
