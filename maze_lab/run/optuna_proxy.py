"""The study's gRPC storage proxy in a process of its own, through Optuna's public API
(``optuna.storages.run_grpc_proxy_server``): while trials run in worker processes or Ray tasks, this process is the
only one that uses the study's SQLite file; the driver and the workers reach the study through it.

The driver starts it with :class:`StudyProxy` and stops it when the trials have ended; it listens only on the
address the trials reach the driver at (loopback unless Ray runs them on other machines) and ends with its driver.

Run: ``python -m maze_lab.run.optuna_proxy STUDY_DB HOST PORT DRIVER_PID`` (what :class:`StudyProxy` does).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 60.0
"""Seconds the driver waits for the proxy to listen."""


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _listens(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1.0):
        return True
    return False


class StudyProxy:
    """The proxy process serving ``study_db`` at ``host`` on a free port (``port``), until :meth:`stop`."""

    def __init__(self, study_db: Path, host: str):
        self.host = host
        errors = []
        for _ in range(3):  # the free port found here may be taken before the proxy binds it: try another one
            self.port = _free_port(host)
            self._log = tempfile.TemporaryFile()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "maze_lab.run.optuna_proxy", str(study_db), host, str(self.port),
                 str(os.getpid())], stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                # a session of its own: a terminal's Ctrl-C reaches the driver only, which still needs the proxy to
                # record how the trials in flight ended; it ends when the driver stops it or is gone
                start_new_session=True)
            deadline = time.monotonic() + START_TIMEOUT_S
            while self.process.poll() is None and time.monotonic() < deadline:
                if _listens(host, self.port):
                    return
                time.sleep(0.05)
            errors.append(self._output() or f"it did not listen within {START_TIMEOUT_S:.0f} s")
            self.stop()
        raise RuntimeError(f"the Optuna storage proxy of {study_db} could not start on {host}: {errors[-1]}")

    def _output(self) -> str:
        self._log.seek(0)
        return " ".join(self._log.read().decode(errors="replace").split())[-2000:]

    def storage(self) -> Any:
        """A storage reaching the study through the proxy (Optuna's ``GrpcStorageProxy``)."""
        import optuna

        with warnings.catch_warnings():  # experimental since Optuna 4.2: the warning says nothing to the user
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.GrpcStorageProxy(host=self.host, port=self.port)

    def stop(self) -> None:
        """End the proxy process (the trials have ended)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def main(argv: list[str]) -> None:
    """Serve the study ``argv[0]`` at ``argv[1]:argv[2]`` while the driver ``argv[3]`` lives."""
    import optuna

    from maze_lab.run.ray_tasks import end_with_parent

    study_db, host, port, driver = argv
    end_with_parent(int(driver))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{Path(study_db).resolve()}"
    storage = optuna.storages.get_storage(
        optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.run_grpc_proxy_server(storage, host=host, port=int(port))


if __name__ == "__main__":
    main(sys.argv[1:])
