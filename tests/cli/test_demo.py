"""The README's main job: `maze-lab demo` prints the statistics table of a few CartPole episodes."""

from __future__ import annotations

import subprocess
import sys


def test_demo_command_prints_statistics_table():
    out = subprocess.run([sys.executable, "-m", "maze_lab.cli", "demo", "--epochs", "2", "--episodes", "3"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    lines = out.splitlines()
    assert lines[0].startswith(" step|path")
    rows = [line for line in lines if "|demo BaseEnvEvents reward episode_count" in line]
    assert [r.split("|")[0].strip() for r in rows] == ["1", "2"]
    assert all(float(r.split("|")[2]) == 3.0 for r in rows)
    total = [line for line in lines if "reward total_episode_count" in line]
    assert float(total[-1].split("|")[2]) == 6.0
    assert any("DiscreteActionEvents action 0/action" in line and "[len:" in line for line in lines)
