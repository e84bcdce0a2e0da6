"""What the trainers whose own workers can run as Ray actors (ES, IMPALA; ``runner=ray``) share: which backend,
the Ray settings, joining or starting Ray, shutting down a Ray the trainer started, and counting replaced workers."""

from __future__ import annotations

from maze_lab.train.ray_config import RayWorkerSettings

WORKER_BACKENDS = ("processes", "ray")
"""Where a trainer's workers run: processes of this machine, or Ray actors."""


class RayWorkersMixin:
    """Mixed into a Trainer whose workers are processes of this machine or Ray actors.

    :meth:`_init_workers_backend` takes the constructor's ``workers`` and ``ray``; :meth:`_connect_ray` joins or
    starts Ray before the workers start; :meth:`_shutdown_ray` (from ``close``) ends a Ray this trainer started.
    """

    supports_ray_workers = True
    """With ``runner=ray`` the run layer builds the trainer with ``workers="ray"`` and the runner's settings."""

    def _init_workers_backend(self, workers: str, ray: RayWorkerSettings | None) -> None:
        if workers not in WORKER_BACKENDS:
            raise ValueError(f"{type(self).__name__} workers must be one of {list(WORKER_BACKENDS)}, got {workers!r}")
        self.worker_backend = workers
        self.ray_settings = ray if ray is not None else RayWorkerSettings()
        self._owns_ray = False
        """Whether this trainer started Ray (then ``close`` shuts it down)."""
        self._restarts_since_update = 0
        self.worker_restarts = 0
        """Dead Ray workers replaced by fresh ones since this trainer was built."""

    def _connect_ray(self) -> None:
        """Join or start Ray as ``ray_settings.address`` says (an initialized Ray is used as it is)."""
        from maze_lab.distributed.ray_runtime import ensure_ray

        self._owns_ray = ensure_ray(self.ray_settings.address, setting="runner.address") or self._owns_ray

    def _shutdown_ray(self) -> None:
        """Shut down a Ray this trainer started."""
        if self._owns_ray:
            import ray

            self._owns_ray = False
            ray.shutdown()

    def _worker_replaced(self, message: str) -> None:
        """A dead Ray worker was replaced by a fresh one (the pool printed ``message``): counted in the next
        update's ``worker_restarts`` statistic."""
        self._restarts_since_update += 1
        self.worker_restarts += 1

    def _take_restarts(self) -> int:
        """Workers replaced since the last call (the value of an update's ``worker_restarts``)."""
        n, self._restarts_since_update = self._restarts_since_update, 0
        return n
