"""Detached runs: a run trained by a process of its own that outlives the cell, the kernel, the page and the
terminal that started it.

The starting process creates the run directory, starts ``python -m maze_lab.run.detached`` in a new session (no
terminal's Ctrl-C or hang-up reaches it), hands it the composed config and the user's objects (env factories,
models: cloudpickled, through the child's standard input, never through a file), records the child as the run's
owner and returns. The child's console goes to ``console.log`` in the run directory. SIGTERM and SIGINT stop it as
``maze-lab stop`` does: after the current update, with a checkpoint, status ``stopped``.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.run.run_dir import RunDirectory
from maze_lab.run.run_status import OWNER_FILE, _write_json, owner_record

CONSOLE_LOG = "console.log"
"""What a detached run prints (its console tables, warnings, a failure's traceback)."""
MODULE = "maze_lab.run.detached"

_children: list[subprocess.Popen] = []


def start_detached(config: dict[str, Any], objects: dict[str, Any], run_dir: Path, n_epochs: int | None,
                   torch_threads: int | None, silent: bool = True, previous: str = "none",
                   verbose: bool = False) -> int:
    """Start a detached run of the composed ``config`` into ``run_dir``; returns the pid of its process."""
    import cloudpickle

    try:
        body = cloudpickle.dumps(objects)
    except Exception as err:  # noqa: BLE001 - cloudpickle raises many kinds for what it cannot pickle
        raise ConfigurationError(
            f"a detached run takes its objects ({', '.join(sorted(objects))}) to a process of its own, and they "
            f"cannot be pickled ({type(err).__name__}: {err}); pass a factory (a class or function that builds the "
            f"env or model) instead of a live object, or train with detach=False") from None
    started = time.time()
    payload = pickle.dumps({"config": config, "objects": body, "run_dir": str(run_dir), "n_epochs": n_epochs,
                            "torch_threads": torch_threads, "silent": silent, "previous": previous,
                            "verbose": verbose,
                            "sys_path": [p for p in sys.path if isinstance(p, str)], "accept_since": started})
    run = RunDirectory(run_dir)
    run.write_summary(status="starting", mode="detached", created=time.strftime("%Y-%m-%dT%H:%M:%S"),
                      experiment=config.get("experiment_name", config.get("experiment")), seed=config.get("seed"))
    log = (run_dir / CONSOLE_LOG).open("ab")
    try:
        child = subprocess.Popen([sys.executable, "-m", MODULE], stdin=subprocess.PIPE, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True, cwd=os.getcwd(),
                                 close_fds=True)
    finally:
        log.close()
    # the owner record exists before the child has imported anything: a child that dies at start reads `died`
    _write_json(run_dir / OWNER_FILE, owner_record(child.pid, mode="detached"))
    try:
        assert child.stdin is not None
        child.stdin.write(payload)
        child.stdin.close()
    except BrokenPipeError:
        pass  # the child died at start: console.log says why, readers see `died`
    _children.append(child)
    # collect the child's exit status once it ends, so that it leaves no zombie while this process lives on
    threading.Thread(target=_reap, args=(child,), name=f"maze-lab detached {child.pid}", daemon=True).start()
    return child.pid


def _reap(child: subprocess.Popen) -> None:
    child.wait()
    if child in _children:
        _children.remove(child)


def _main() -> int:
    payload = pickle.loads(sys.stdin.buffer.read())  # from the process that started this one, never from a file
    sys.stdin.close()
    for path in reversed(payload["sys_path"]):
        if path not in sys.path:
            sys.path.insert(0, path)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the terminal or kernel that started it may go away
    run_dir = Path(payload["run_dir"])
    try:
        import cloudpickle  # noqa: F401 - the objects were pickled with it
        from omegaconf import OmegaConf

        from maze_lab.run.handle import _set_torch_threads_of_this_thread
        from maze_lab.run.training_run import _Run

        objects = pickle.loads(payload["objects"])  # noqa: S301 - our parent's own objects, through a pipe
        run = _Run(OmegaConf.create(payload["config"]), objects, run_dir, payload["silent"], payload["previous"],
                   verbose=payload.get("verbose", False))
    except BaseException as err:
        RunDirectory(run_dir).write_summary(status="failed", error="".join(traceback.format_exception(err)),
                                            reason=" ".join(f"{type(err).__name__}: {err}".split())[:1000],
                                            finished=time.strftime("%Y-%m-%dT%H:%M:%S"))
        raise
    run.accept_requests_since = payload["accept_since"]

    def stop(signum: int, _frame: Any) -> None:
        print(f"maze-lab: {signal.Signals(signum).name}: stopping after the current update", flush=True)
        try:
            run.request("stop")
        except Exception:  # noqa: BLE001 - already ending
            pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if payload["torch_threads"] is not None:
        _set_torch_threads_of_this_thread(payload["torch_threads"])
    try:
        run.train(payload["n_epochs"], mode="detached")
    finally:
        run.close()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
