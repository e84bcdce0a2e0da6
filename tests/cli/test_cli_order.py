"""Options and ``key=value`` overrides mix in any order on the command line, as users type them."""

from __future__ import annotations

from pathlib import Path

from run_utils import run_maze_lab


def test_train_takes_overrides_after_an_option(tmp_path: Path) -> None:
    base = tmp_path / "outputs"
    done = run_maze_lab("train", "n_epochs=1", "--silent", f"log_base_dir={base}", "algorithm.epoch_length=1",
                        "algorithm.n_rollout_steps=16", "--threads", "1", "algorithm.eval_repeats=1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(list(base.rglob("maze_lab_run.json"))) == 1  # log_base_dir, given after --silent, was applied


def test_words_that_are_no_overrides_are_still_refused(tmp_path: Path) -> None:
    done = run_maze_lab("train", "n_epochs=1", "--silent", "stray", cwd=tmp_path)
    assert done.returncode == 2 and "unrecognized arguments: stray" in done.stderr, done.stderr
    listed = run_maze_lab("runs", "--bogus", cwd=tmp_path)
    assert listed.returncode == 2 and "unrecognized arguments: --bogus" in listed.stderr


def test_a_console_closed_by_its_reader_never_fails_the_run(tmp_path: Path) -> None:
    """``maze-lab train ... | head -1``: the reader goes away after the first line; the run trains to its end."""
    import subprocess

    from run_utils import maze_lab_command

    from maze_lab import load_run

    base = tmp_path / "outputs"
    proc = subprocess.Popen([*maze_lab_command(), "train", "n_epochs=3", "algorithm.epoch_length=1",
                             "algorithm.n_rollout_steps=16", "algorithm.eval_repeats=1", f"log_base_dir={base}"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    proc.stdout.close()  # as head does after its line
    _, err = proc.communicate(timeout=300)
    assert first.strip()
    assert proc.returncode == 0, err
    assert "BrokenPipeError" not in err and "Traceback" not in err, err
    (summary,) = [load_run(p.parent).summary for p in base.rglob("maze_lab_run.json")]
    assert summary["status"] == "done" and summary["epoch"] == 3, summary
