"""A script that trains at import time (no ``if __name__ == "__main__":``) with spawned worker processes (ES
workers, IMPALA actors): the workers import the script again, and each would start a training of its own. maze-lab
refuses in the worker at once, with the fix in the message; the script fails instead of training again and again,
and no run directory is made by a worker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
from maze_lab import RunContext

rc = RunContext(algorithm={algorithm!r}, overrides={overrides!r}, silent=True)
rc.train()
print("trained", rc.run_dir)
"""

CASES = {
    "es": {"env.name": "CartPole-v1", "n_epochs": 1, "algorithm.shared_noise_table_size": 100_000,
           "algorithm.eval_repeats": 1, "algorithm.max_steps": 50},
    "impala": {"env.name": "CartPole-v1", "n_epochs": 1, "algorithm.num_actors": 2, "algorithm.actor_processes": 2,
               "algorithm.actors_batch_size": 2, "algorithm.n_rollout_steps": 8, "algorithm.epoch_length": 1,
               "algorithm.eval_repeats": 1},
}


@pytest.mark.parametrize("algorithm", sorted(CASES))
def test_training_at_import_time_fails_at_once_with_the_fix(algorithm: str, tmp_path: Path) -> None:
    base = tmp_path / "outputs"
    script = tmp_path / "train_script.py"
    script.write_text(SCRIPT.format(algorithm=algorithm, overrides={**CASES[algorithm], "log_base_dir": str(base)}))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert 'if __name__ == "__main__":' in output, output[-3000:]
    assert "trained" not in done.stdout
    runs = [p for p in base.rglob("maze_lab_run.json")]
    assert len(runs) == 1, runs  # the script's own run; no worker made one

    guarded = tmp_path / "guarded.py"
    body = "\n".join("    " + line for line in script.read_text().strip().splitlines())
    guarded.write_text(f'if __name__ == "__main__":\n{body}\n')
    ok = subprocess.run([sys.executable, str(guarded)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "trained" in ok.stdout, ok.stdout + ok.stderr
