"""Shared by the run-layer tests: a tiny training budget, the ``maze-lab`` command in a subprocess, a finished run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from maze_lab.core.log_stats.stats_files import write_stats_file
from maze_lab.core.log_stats.writers import StatsStore
from maze_lab.run.run_context import RunContext
from maze_lab.run.run_dir import RunDirectory

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


def copy_run(run_dir: Path, to: Path) -> Path:
    """A copy of a finished run directory (its own run from then on)."""
    shutil.copytree(run_dir, to)
    (to / "owner.json").unlink(missing_ok=True)
    return to


def lengthen_run(run_dir: Path, to: Path, n_epochs: int, seed: int = 0) -> Path:
    """A copy of a finished run whose statistics are ``n_epochs`` epochs: its last epoch replayed (scalars varied
    from epoch to epoch, env steps and training time growing, the action and observation samples as recorded)."""
    copy_run(run_dir, to)
    store = StatsStore.load(run_dir)
    rows, _ = store.rows_since(0)
    last = max(r[0] for r in rows)
    rows = [r for r in rows if r[0] == last]
    samples = [s for s in store.samples() if s[0] == last]
    rng = np.random.default_rng(seed)
    epochs = []
    for epoch in range(1, n_epochs + 1):
        new_rows = []
        for _, prefix, topic, event, name, value in rows:
            if event in ("env_steps", "time_training"):
                value = value / last * epoch  # what the x-axes read: growing with the epochs
            else:
                value = value + (0.1 * abs(value) + 0.01) * (np.sin(epoch / 37.0) + rng.normal())
            new_rows.append((epoch, prefix, topic, event, name, float(value)))
        epochs.append((new_rows, [(epoch, *s[1:]) for s in samples]))
    write_stats_file(to, epochs)
    RunDirectory(to).write_summary(epoch=n_epochs, target_epochs=n_epochs)
    return to


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
