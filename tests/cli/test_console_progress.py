"""What ``maze-lab train`` shows while it trains: one concise line per epoch, a progress bar in a terminal (none when
piped), the statistics tables with ``--verbose``, nothing with ``--silent``; a blocking ``rc.train()`` in a notebook
kernel shows a notebook progress bar instead of console tables."""

from __future__ import annotations

import re
from pathlib import Path

from run_utils import run_in_terminal, run_maze_lab

SMALL = ["n_epochs=2", "algorithm.epoch_length=2", "algorithm.n_rollout_steps=16", "algorithm.eval_repeats=1",
         "runner.concurrency=1", "runner.eval_concurrency=1", "seed=5"]
EPOCH_LINE = re.compile(r"^epoch (\d)/2  steps ([\d,]+) +reward \S+ +eval \S+ +pi_loss \S+ +v_loss \S+",
                        re.MULTILINE)
TABLE_HEADER = re.compile(r"step\|path +\|")


def _base(tmp_path: Path) -> str:
    return f"log_base_dir={tmp_path / 'outputs'}"


def test_a_terminal_shows_a_progress_bar_that_advances_and_one_line_per_epoch(tmp_path: Path) -> None:
    code, screen = run_in_terminal("train", *SMALL, _base(tmp_path), cwd=tmp_path)
    assert code == 0, screen
    text = screen.replace("\r\n", "\n")
    # the start line names what runs
    assert re.search(r"maze-lab train: env CartPole-v1, algorithm PPO, model \S+, runner sequential \(1 envs?\), "
                     r"seed 5", text), text
    # the bar, redrawn in place (carriage returns) as the epochs end: 0 -> 1 -> 2 of 2, with steps and rates
    states = re.findall(r"\rtrain: +(\d+)%\|[^|]*\| (\d)/2 epochs", text)
    assert ("0", "0") in states and ("50", "1") in states and ("100", "2") in states, states
    assert re.search(r"\| 2/2 epochs \[[^\]]*steps [\d,]+, [\d,]+ steps/s, reward \S+, eval \S+\]", text), text
    # one concise line per epoch above the bar (the bar is cleared with a carriage return before each); env steps
    # grow; no tables
    lines = EPOCH_LINE.findall(re.sub(r"\r *\r?", "\n", text))
    assert [epoch for epoch, _ in lines] == ["1", "2"], text
    assert int(lines[1][1].replace(",", "")) > int(lines[0][1].replace(",", "")) > 0
    assert not TABLE_HEADER.search(text), text


def test_piped_output_has_epoch_lines_and_no_bar(tmp_path: Path) -> None:
    done = run_maze_lab("train", *SMALL, _base(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [e for e, _ in EPOCH_LINE.findall(done.stdout)] == ["1", "2"], done.stdout
    assert "\r" not in done.stdout + done.stderr and "steps/s" not in done.stdout + done.stderr
    assert not TABLE_HEADER.search(done.stdout), done.stdout
    assert "evaluation reward: final" in done.stdout


def test_verbose_brings_back_the_tables_and_silent_shows_nothing_per_epoch(tmp_path: Path) -> None:
    verbose = run_maze_lab("train", *SMALL, _base(tmp_path), "--verbose", cwd=tmp_path)
    assert verbose.returncode == 0, verbose.stderr
    assert len(TABLE_HEADER.findall(verbose.stdout)) >= 4, verbose.stdout  # train env, trainer, eval; 2 epochs
    assert re.search(r"^ +2\|train BaseEnvEvents reward mean +\| +\S+$", verbose.stdout, re.MULTILINE)
    assert re.search(r"^ +2\|eval BaseEnvEvents reward mean +\| +\S+$", verbose.stdout, re.MULTILINE)
    assert len(EPOCH_LINE.findall(verbose.stdout)) == 2
    silent = run_maze_lab("train", *SMALL, _base(tmp_path), "--silent", cwd=tmp_path)
    assert silent.returncode == 0, silent.stderr
    assert not EPOCH_LINE.search(silent.stdout) and not TABLE_HEADER.search(silent.stdout), silent.stdout
    assert "evaluation reward: final" in silent.stdout


def test_verbose_tables_print_above_the_bar_in_a_terminal(tmp_path: Path) -> None:
    code, screen = run_in_terminal("train", *SMALL, _base(tmp_path), "-v", cwd=tmp_path)
    assert code == 0, screen
    text = screen.replace("\r\n", "\n")
    assert TABLE_HEADER.search(text) and "| 2/2 epochs" in text, text
    assert len(EPOCH_LINE.findall(re.sub(r"\r *\r?", "\n", text))) == 2, text


def test_a_blocking_train_in_a_notebook_shows_a_notebook_progress_bar(tmp_path: Path) -> None:
    import os

    from kernel_utils import Kernel

    env = {"OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg", **os.environ}
    kernel = Kernel.start(cwd=tmp_path, env=env)
    try:
        overrides = {"n_epochs": 2, "algorithm.epoch_length": 2, "algorithm.n_rollout_steps": 16,
                     "algorithm.eval_repeats": 1, "runner.concurrency": 1, "runner.eval_concurrency": 1,
                     "log_base_dir": str(tmp_path / "outputs")}
        cell = kernel.ok(f"from maze_lab import RunContext\nrc = RunContext(overrides={overrides!r})\nrc.train()\n"
                         f"rc.close()", timeout=600)
        mine = [m for m in kernel.messages if m["parent_header"].get("msg_id") == cell.msg_id]
        # the bar is a widget shown in the cell's output, and its value advances over the epochs
        shown = [m for m in mine if m["msg_type"] == "display_data"
                 and "application/vnd.jupyter.widget-view+json" in m["content"]["data"]]
        assert shown, [m["msg_type"] for m in mine]
        states = [m["content"]["data"].get("state", {}) for m in mine if m["msg_type"] == "comm_msg"]
        values = [s["value"] for s in states if isinstance(s.get("value"), int | float)]  # the bar's, not labels'
        assert values and values[-1] == 2 and 1 in values, values
        assert any("steps/s" in str(s.get("value")) for s in states), states
        # epoch lines in the cell's output, no statistics tables
        assert [e for e, _ in EPOCH_LINE.findall(cell.stdout)] == ["1", "2"], cell.stdout
        assert not TABLE_HEADER.search(cell.stdout), cell.stdout
    finally:
        kernel.close()


TINY_WORDS = ["n_epochs=1", "algorithm.epoch_length=1", "algorithm.n_rollout_steps=16", "algorithm.eval_repeats=1",
              "runner.concurrency=1", "runner.eval_concurrency=1"]


def test_sweep_optimize_and_rollout_show_a_bar_over_their_runs_trials_and_episodes(tmp_path: Path) -> None:
    base = _base(tmp_path)
    code, screen = run_in_terminal("sweep", "seed=1,2", *TINY_WORDS, base, cwd=tmp_path)
    assert code == 0, screen
    states = re.findall(r"\rsweep: +(\d+)%\|[^|]*\| (\d)/2 runs", screen)
    assert ("0", "0") in states and ("50", "1") in states and ("100", "2") in states, screen
    # the bar ends before the comparison table is printed
    assert screen.rindex("2/2 runs") < screen.index("best_eval_reward"), screen

    code, screen = run_in_terminal("optimize", "--space", "ppo_cartpole", "--trials", "2", *TINY_WORDS, base,
                                   f"--study-dir={tmp_path / 'study'}", cwd=tmp_path)
    assert code == 0, screen
    states = re.findall(r"\roptimize: +(\d+)%\|[^|]*\| (\d)/2 trials[^\r]*", screen)
    assert [n for _, n in states[:1]] == ["0"] and ("100", "2") in [s[:2] for s in states], screen
    assert re.search(r"2/2 trials \[[^\]]*best [-\d.e+]+ \(trial \d\)\]", screen), screen
    # the lines of the trials print above the bar, each on a line of its own
    lines = re.sub(r"\r *\r?", "\n", screen).replace("\r\n", "\n").splitlines()
    assert "maze-lab optimize: trial 1 completed" in "\n".join(lines) or \
        any(line.startswith("maze-lab optimize: trial 1 ") for line in lines), screen

    run_dir = next((tmp_path / "outputs").rglob("maze_lab_run.json")).parent
    code, screen = run_in_terminal("rollout", str(run_dir), "--episodes", "3", "--no-record", cwd=tmp_path)
    assert code == 0, screen
    states = re.findall(r"\rrollout: +(\d+)%\|[^|]*\| (\d)/3 episodes", screen)
    assert ("100", "3") in states and ("0", "0") in states, screen
    assert re.search(r"3/3 episodes \[[^\]]*last [\d.]+ \(\d+ steps\), mean [\d.]+\]", screen), screen


def test_run_shows_papermill_progress_over_the_cells_in_a_terminal(tmp_path: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("greeting = 'hello'")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("print(greeting)"), nbformat.v4.new_code_cell("x = 1")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    code, screen = run_in_terminal("run", str(path), "-p", "greeting", "hi", "--log-base-dir",
                                   str(tmp_path / "outputs"), cwd=tmp_path)
    assert code == 0, screen
    assert re.search(r"Executing: +100%\|[^|]*\| 4/4", screen), screen  # the injected parameters cell included
    piped = run_maze_lab("run", str(path), "--log-base-dir", str(tmp_path / "outputs"), cwd=tmp_path)
    assert piped.returncode == 0 and "Executing" not in piped.stdout + piped.stderr, piped.stderr
