"""Shared by the run-layer tests: a tiny training budget, the ``maze-lab`` command in a subprocess, a finished run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from maze_lab.run.run_context import RunContext

TINY = {"n_epochs": 1, "algorithm.epoch_length": 1, "algorithm.n_rollout_steps": 16, "runner.concurrency": 1,
        "runner.eval_concurrency": 1, "algorithm.eval_repeats": 1}
"""Overrides for a one-epoch CartPole run of a few dozen env steps."""


def maze_lab_command() -> list[str]:
    """The ``maze-lab`` script of this environment (or the module, where the script is not installed)."""
    script = Path(sys.executable).parent / "maze-lab"
    return [str(script)] if script.exists() else [sys.executable, "-m", "maze_lab.cli"]


def run_maze_lab(*args: str, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    """The command in a subprocess, as a user runs it (``pythonpath`` is put in front of PYTHONPATH)."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    return subprocess.run([*maze_lab_command(), *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env=env)


def train_tiny_run(base: Path) -> Path:
    """The directory of a finished one-epoch CartPole run under ``base``."""
    rc = RunContext(overrides={**TINY, "log_base_dir": str(base)}, silent=True)
    rc.train()
    rc.close()
    return rc.run_dir


def run_with_an_episode(base: Path) -> Path:
    """A finished three-epoch CartPole run with one recorded episode (its frames included)."""
    rc = RunContext(overrides={**TINY, "n_epochs": 3, "log_base_dir": str(base)}, silent=True)
    try:
        rc.train()
        rc.rollout(n_episodes=1, seed=0, record_frames=True)
    finally:
        rc.close()
    return rc.run_dir


def stop_if_live(run_dir: Path | None) -> None:
    """Stop a detached run a failed test left going (its process outlives the test otherwise)."""
    if run_dir is None:
        return
    from maze_lab.run.attach import attach

    run = attach(run_dir)
    if run.running:
        try:
            run.stop(timeout=60)
        except Exception:  # noqa: BLE001 - e.g. it died meanwhile
            pass


def run_in_terminal(*args: str, cwd: Path, timeout: float = 300, columns: int = 120) -> tuple[int, str]:
    """The ``maze-lab`` command with a pseudo-terminal as its stdin, stdout and stderr, as a user runs it in a
    terminal ``columns`` wide; returns its exit code and everything the terminal received (carriage returns
    kept)."""
    import fcntl
    import pty
    import select
    import struct
    import termios
    import time

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen([*maze_lab_command(), *args], cwd=cwd, stdin=follower, stdout=follower, stderr=follower,
                            close_fds=True)
    os.close(follower)
    received = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the command ended and closed its side of the terminal
                    break
                if not chunk:
                    break
                received += chunk
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
            raise TimeoutError(f"maze-lab {' '.join(args)} ran past {timeout} s; it printed: "
                               f"{received.decode(errors='replace')[-2000:]}")
        return proc.wait(timeout=60), received.decode(errors="replace")
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
