"""The ``maze-lab`` command as a user runs it: train, sweep, runs, run (papermill), lab (voila), jupyter; bad input
exits with 2."""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conf_options import listed_options

from maze_lab.cli import main, parse_sweep, running_lab_url, split_lab_args, split_values

REPO = Path(__file__).resolve().parents[2]
TINY = ["n_epochs=1", "algorithm.epoch_length=2", "algorithm.n_rollout_steps=16", "runner.concurrency=2",
        "algorithm.eval_repeats=1"]


def _command() -> list[str]:
    script = Path(sys.executable).parent / "maze-lab"
    if script.exists():
        return [str(script)]
    found = shutil.which("maze-lab")
    return [found] if found else [sys.executable, "-m", "maze_lab.cli"]


def user_env(**extra: str) -> dict[str, str]:
    """The environment of a user who has not set MAZE_LAB_OUTPUTS (plus ``extra``)."""
    env = {k: v for k, v in os.environ.items() if k != "MAZE_LAB_OUTPUTS"}
    return {**env, **extra}


def maze_lab(*args: str, cwd: Path, timeout: float = 180, env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess:
    """Run the command in a subprocess, as a user would."""
    return subprocess.run([*_command(), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env if env is not None else user_env())


def wait_until(condition, timeout: float):
    """The first truthy value of ``condition()``, polled until the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


class LineReader:
    """Reads a process's output lines in a thread, so that a test can wait for a line with a deadline."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, text: str, timeout: float = 120) -> str:
        """The first line containing ``text``; fails at the deadline or when the output ends."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no line with {text!r} in time; output so far:\n{''.join(self.lines)}"
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            assert line is not None, f"output ended without {text!r}:\n{''.join(self.lines)}"
            self.lines.append(line)
            if text in line:
                return line


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="module")
def trained(workdir: Path) -> tuple[subprocess.CompletedProcess, Path]:
    proc = maze_lab("train", *TINY, "algorithm=a2c", "env.name=CartPole-v1", "seed=3", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("run directory: ")
    return proc, workdir / last.removeprefix("run directory: ")


@pytest.fixture(scope="module")
def swept(workdir: Path) -> subprocess.CompletedProcess:
    proc = maze_lab("sweep", "algorithm.lr=0.001,0.0005,0.0002", *TINY, "--jobs", "2", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_train_writes_a_complete_run_directory(trained: tuple[subprocess.CompletedProcess, Path]) -> None:
    proc, run_dir = trained
    assert run_dir.parent.parent.name == "outputs" and run_dir.is_dir()
    assert proc.stdout.startswith("maze-lab train: training for 1 epoch of 2 updates\n")
    described = proc.stdout.splitlines()[1]  # the start says what runs
    assert described.startswith("maze-lab train: env CartPole-v1, algorithm A2C, model ") and \
        described.endswith(", seed 3") and "runner sequential" in described, described
    summary = json.loads((run_dir / "maze_lab_run.json").read_text())
    assert proc.stdout.strip().splitlines()[-2] == (f"evaluation reward: final {summary['last_eval_reward']:.4g}, "
                                                    f"best {summary['best_eval_reward']:.4g} (epoch 1)")
    for name in ("config.yaml", "stats.arrows", "maze_lab_run.json", "checkpoints/state_dict_last.pt",
                 "checkpoints/state_dict_best.pt", "model_graphs/policy_0.svg", "model_graphs/critic_0.svg"):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    # one concise line per epoch (the statistics tables only with --verbose)
    assert re.search(r"^epoch 1/1  steps \d+ +reward \S+ +eval \S+ +pi_loss ", proc.stdout, re.MULTILINE), \
        proc.stdout
    assert "ActorCriticEvents" not in proc.stdout
    from maze_lab.run.runs import load_run

    run = load_run(run_dir)
    assert run.summary["status"] == "done" and run.summary["epoch"] == 1 and run.summary["seed"] == 3
    assert run.config.algorithm._target_.endswith("A2CAlgorithmConfig")
    assert run.config.algorithm.n_rollout_steps == 16


def test_sweep_runs_a_grid_and_prints_a_comparison(swept: subprocess.CompletedProcess, workdir: Path) -> None:
    lines = swept.stdout.strip().splitlines()
    assert lines[0].startswith("maze-lab sweep: 3 runs over algorithm.lr (3 values), 2 parallel job(s)")
    assert lines[1] == "maze-lab sweep: each run: training for 1 epoch of 2 updates"
    # what runs: env, algorithm, model, runner, and the seeds
    assert lines[2].startswith("maze-lab sweep: env CartPole-v1, algorithm PPO, model ") and \
        lines[2].endswith("; seeds 1234, 1234, 1234"), lines[2]
    header, rows = lines[3], lines[4:]
    assert header.split()[:3] == ["algorithm.lr", "status", "epoch"]
    assert len(rows) == 3
    assert [float(r.split()[0]) for r in rows] == [0.001, 0.0005, 0.0002]
    assert all(r.split()[1] == "done" for r in rows)
    run_dirs = [workdir / r.split()[-1] for r in rows]
    assert len(set(run_dirs)) == 3
    from omegaconf import OmegaConf

    assert [OmegaConf.load(d / "config.yaml").algorithm.lr for d in run_dirs] == [0.001, 0.0005, 0.0002]


def test_runs_lists_the_run_directories(trained: tuple, swept: subprocess.CompletedProcess, workdir: Path) -> None:
    proc = maze_lab("runs", "--base", "outputs", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].split()[:4] == ["created", "experiment", "group", "status"]
    assert len(lines) == 1 + 4
    assert sum("A2CAlgorithmConfig" in line for line in lines) == 1
    assert sum("PPOAlgorithmConfig" in line for line in lines) == 3
    # the three runs of the sweep share its group; the single run has none
    groups = {line.split()[2] for line in lines[1:] if "PPOAlgorithmConfig" in line}
    assert len(groups) == 1 and groups.pop().startswith("sweep:sweep-")
    assert [line.split()[2] for line in lines[1:] if "A2CAlgorithmConfig" in line] == ["-"]



@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_sweep_whose_every_run_fails_says_so_in_one_line(tmp_path: Path, jobs: str) -> None:
    proc = maze_lab("sweep", "algorithm.lr=0.001,0.002", "env.name=NoSuchEnv-v0", *TINY, "--jobs", jobs, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr  # a value the runs cannot use: bad input, as for `maze-lab train`
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("maze-lab sweep: error:")]
    assert len(errors) == 1 and "'NoSuchEnv-v0' is not a registered Gymnasium env" in errors[0]
    assert "every run of the sweep failed" in errors[0]
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "outputs").rglob("maze_lab_run.json")]
    assert len(summaries) == 2 and {s["status"] for s in summaries} == {"failed"}


def test_a_sweep_goes_on_past_a_failed_run(tmp_path: Path) -> None:
    proc = maze_lab("sweep", "env.name=CartPole-v1,NoSuchEnv-v0", *TINY, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    rows = {line.split()[0]: line.split()[1] for line in proc.stdout.splitlines()[4:] if line.strip()}
    assert rows == {"CartPole-v1": "done", "NoSuchEnv-v0": "failed"}
    described = proc.stdout.splitlines()[2]  # the runs differ in their env: both are named
    assert described.startswith("maze-lab sweep: env CartPole-v1, ") and " | env NoSuchEnv-v0, " in described
    assert "Traceback" not in proc.stderr
    assert "maze-lab sweep: 1 of 2 runs failed" in proc.stderr and "NoSuchEnv-v0" in proc.stderr


def test_run_executes_a_notebook_into_a_run_directory(tmp_path: Path) -> None:
    proc = maze_lab("run", str(REPO / "notebooks" / "train.ipynb"), "-p", "n_epochs", "2", "-p", "epoch_length", "2",
                    "-p", "overrides", "{algorithm.n_rollout_steps: 16, algorithm.eval_repeats: 1}",
                    "--log-base-dir", "runs", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith(f"maze-lab run: executing {REPO / 'notebooks' / 'train.ipynb'} -p n_epochs 2 ")
    assert lines[1].startswith('maze-lab run: parameters env="gym_env", algorithm="ppo", ') and \
        "n_epochs=2" in lines[1] and "seed=1234" in lines[1] and "run_dir" not in lines[1], lines[1]
    # it ends with what a user wants to know: rewards, where the notebook is, how to open it
    done, rewards, run_line, nb_line, open_line = lines[-5:]
    run_dir = tmp_path / run_line.removeprefix("run directory: ")
    executed = tmp_path / nb_line.removeprefix("executed notebook: ")
    assert run_dir.parent.parent == tmp_path / "runs"
    assert executed == run_dir / "train.ipynb" and executed.is_file()
    assert (run_dir / "stats.arrows").is_file()
    summary = json.loads((run_dir / "maze_lab_run.json").read_text())
    assert done.startswith("maze-lab run: train.ipynb done in ")
    assert done.endswith(f" s: 2 epochs, {summary['env_steps']:,} env steps")
    assert rewards == (f"evaluation reward: final {summary['last_eval_reward']:.4g}, best "
                       f"{summary['best_eval_reward']:.4g} (epoch {summary['best_epoch']})")
    shown_command, _, rest = open_line.removeprefix("open it in JupyterLab: ").partition(" jupyter ")
    assert rest.startswith(nb_line.removeprefix("executed notebook: "))
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(run_dir / "config.yaml")
    assert cfg.n_epochs == 2 and cfg.algorithm.epoch_length == 2 and cfg.algorithm.n_rollout_steps == 16
    # the command it names opens that notebook in JupyterLab
    # the command it names works as printed (the bare name where PATH finds it, else the script's path)
    runnable = shutil.which(shown_command, path=user_env().get("PATH")) or str(tmp_path / shown_command)
    assert Path(runnable).exists(), shown_command
    command = subprocess.run([runnable, "jupyter", "--print-command", nb_line.removeprefix("executed notebook: ")],
                             cwd=tmp_path, capture_output=True, text=True, timeout=180, env=user_env())
    assert command.returncode == 0, command.stderr
    assert command.stdout.split()[-1] == str(executed)


@pytest.mark.parametrize("args, message", [
    (["train", "algorithm=rainbow"],
     f"unknown option 'rainbow' for config group 'algorithm'; valid options: {listed_options('algorithm')}"),
    (["train", "algorithm.lr=fast"], "override 'algorithm.lr': expected a value of type float"),
])
def test_bad_input_exits_2_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    proc = maze_lab(*args, cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"maze-lab {args[0]}: error: ")
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "outputs").exists()  # refused before a run directory was made


@pytest.mark.parametrize("args, message", [
    (["train", "wrappers=nope"], "unknown option 'nope' for config group 'wrappers'; valid options: cutting2d, "),
    (["train", "algorithm.learning_rate=0.1"], "unknown config key 'algorithm.learning_rate'; valid keys in"),
    (["train", "runner.concurrency=2.5"], "'runner.concurrency': expected a value of type int"),
    (["train", "n_epochs"], "override 'n_epochs' must look like key=value"),
    (["train", "experiment=nope"], "unknown option 'nope' for config group 'experiment'; valid options:"),
    (["sweep", "algorithm.lr=0.1,0.2", "algorithm.gama=0.9"], "unknown config key 'algorithm.gama'"),
    (["sweep", "experiment=cartpole_ppo,cutting2d_masked_ppo"], "experiment cannot be swept"),
    (["runs", "--base", "no/such/dir"], "no/such/dir is not a directory"),
    (["run", "no_such.ipynb"], "notebook no_such.ipynb does not exist"),
    (["run", str(REPO / "notebooks" / "train.ipynb"), "-p", "epochs", "3"],
     "unknown parameter(s) epochs for train.ipynb; valid parameters: env, algorithm"),
    (["train", "-cn", "conf_rollout"], "maze-lab rolls out a trained run with `maze-lab rollout RUN_DIR"),
    (["train", "-cn", "my_conf"], "maze-lab has one root config, conf_train; add your own config groups with "
                                  "--config-module"),
])
def test_bad_input_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                            args: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"maze-lab {args[0]}: error: ")
    assert message in err


def test_not_a_run_directory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "somewhere").mkdir()
    (tmp_path / "somewhere" / "notes.txt").write_text("not a run")
    monkeypatch.chdir(tmp_path)
    assert main(["train", "input_dir=somewhere", *TINY]) == 2
    err = capsys.readouterr().err
    assert "somewhere is not a maze-lab run directory: it has no maze_lab_run.json" in err
    assert "notes.txt" in err
    assert not (tmp_path / "outputs").exists()


def test_runs_on_an_empty_base(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["runs", "--base", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == f"no runs under {tmp_path}"


def test_jupyter_dry_run_prints_the_command(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO / "notebooks")
    assert main(["jupyter", "--dry-run", "--port", "8899", "--no-browser"]) == 0
    out = capsys.readouterr().out.strip()
    assert "-m jupyterlab" in out and "--port=8899" in out and "--no-browser" in out
    # the project root is served (notebooks/ and outputs/), the notebooks folder is opened
    assert f"--notebook-dir={REPO} " in out and "--LabApp.default_url=/lab/tree/notebooks" in out


def test_jupyter_passes_jupyter_options_through(tmp_path: Path) -> None:
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "a.ipynb").write_text("{}")
    proc = maze_lab("jupyter", "--print-command", "--allow-root", "--no-browser", "--port", "9999", "--ip", "0.0.0.0",
                    "--ServerApp.token=secret", "a.ipynb", "--", "--debug", cwd=tmp_path / "notebooks")
    assert proc.returncode == 0, proc.stderr
    words = proc.stdout.split()
    assert words[words.index("-m") + 1:] == [
        "jupyterlab", f"--notebook-dir={tmp_path}", str(tmp_path / "notebooks" / "a.ipynb"), "--port=9999",
        "--no-browser", "--allow-root", "--ip", "0.0.0.0", "--ServerApp.token=secret", "--debug"]


def test_jupyter_argument_splitting() -> None:
    assert split_lab_args(["--allow-root", "--ip", "0.0.0.0", "--port", "1", "x"]) == (
        ["--port", "1", "x"], ["--allow-root", "--ip", "0.0.0.0"])
    assert split_lab_args(["--allow-root", "notebooks", "--no-browser"]) == (
        ["notebooks", "--no-browser"], ["--allow-root"])
    assert split_lab_args(["--print-command", "--", "--port", "3"]) == (["--print-command"], ["--port", "3"])


def test_jupyter_refuses_a_path_that_does_not_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["jupyter", "--print-command", "nope.ipynb"]) == 2
    assert "nope.ipynb is neither a notebook nor a directory" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("jupyterlab") is None, reason="needs JupyterLab")
def test_jupyter_starts_with_jupyter_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """JupyterLab refuses to run as root without --allow-root: passed through, the server starts."""
    (tmp_path / "notebooks").mkdir()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([*_command(), "jupyter", "--no-browser", "--port", str(port), "--allow-root",
                             "--ip=127.0.0.1", "--ServerApp.token=maze-lab-test"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=user_env(JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime")))
    try:
        line = LineReader(proc.stdout).wait_for(f"127.0.0.1:{port}/lab/tree/notebooks")
        assert "http://" in line
        # `maze-lab run` names the URL of a running JupyterLab that serves the executed notebook
        monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
        notebook = tmp_path / "outputs" / "x" / "train.ipynb"
        # the server writes its info file just after logging its URL
        url = wait_until(lambda: running_lab_url(notebook), timeout=60)
        assert url == f"http://127.0.0.1:{port}/lab/tree/outputs/x/train.ipynb"
        assert running_lab_url(Path("/elsewhere/train.ipynb")) is None
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    # stopping the command stops the server: nothing is left listening on the port
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0, "JupyterLab outlived `maze-lab jupyter`"


def test_lab_serves_the_app_notebook_with_voila(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MAZE_LAB_OUTPUTS", raising=False)
    assert main(["lab", "--print-command", "--port", "8899", "--no-browser", "--base", "runs", "--",
                 "--theme=dark"]) == 0
    words = capsys.readouterr().out.split()
    # the app's kernel runs in the notebook's folder: it is told where the runs are
    assert words[0] == f"MAZE_LAB_OUTPUTS={tmp_path / 'runs'}"
    assert words[1:5] == [sys.executable, "-m", "voila", str(REPO / "notebooks" / "lab.ipynb")]
    assert "--port=8899" in words and "--no-browser" in words and words[-1] == "--theme=dark"
    assert "--VoilaConfiguration.strip_sources=True" in words  # no code shown


def test_lab_defaults_to_the_default_outputs_and_a_free_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("MAZE_LAB_OUTPUTS", str(tmp_path / "elsewhere"))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 8866))  # voila's usual port is taken: the next free one is used
        assert main(["lab", "--print-command"]) == 0
    words = capsys.readouterr().out.split()
    assert words[0] == f"MAZE_LAB_OUTPUTS={tmp_path / 'elsewhere'}"
    port = int(next(w for w in words if w.startswith("--port=")).split("=")[1])
    assert 8866 < port < 8866 + 50 and "--no-browser" not in words


def test_lab_notebook_is_the_shipped_app_and_run_finds_shipped_notebooks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """In a checkout the notebooks that ship are notebooks/ (a wheel carries them as maze_lab/notebooks, see
    test_packaging): the Lab app serves its lab.ipynb, and ``maze-lab run NAME`` refuses a name that is neither a
    file nor shipped, naming the ones that ship."""
    import nbformat

    from maze_lab import cli
    from maze_lab.cli.shipped_notebooks import copy_notebooks, find_notebook, shipped_notebooks

    assert shipped_notebooks() == REPO / "notebooks" and cli.lab_notebook() == REPO / "notebooks" / "lab.ipynb"
    notebook = nbformat.read(cli.lab_notebook(), as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert len(code) == 1 and "LabApp()" in code[0].source and notebook.metadata.kernelspec.name == "python3"
    monkeypatch.chdir(tmp_path)
    assert find_notebook("train") == find_notebook("train.ipynb") == REPO / "notebooks" / "train.ipynb"
    (tmp_path / "train.ipynb").write_text("{}")
    assert find_notebook("train.ipynb") == Path("train.ipynb")  # the user's own file comes first
    assert main(["run", "nothing_like_it"]) == 2
    err = capsys.readouterr().err
    assert "notebook nothing_like_it does not exist, and no notebook of that name ships with maze-lab" in err
    assert "train.ipynb" in err and "maze-lab notebooks DIR" in err
    copied, kept = copy_notebooks(tmp_path)
    assert [p.name for p in kept] == ["train.ipynb"] and (tmp_path / "train.ipynb").read_text() == "{}"
    assert len(copied) == len(list((REPO / "notebooks").glob("*.ipynb"))) - 1
    assert main(["notebooks", str(tmp_path / "train.ipynb")]) == 2
    assert "is a file; give a folder" in capsys.readouterr().err


def test_lab_refuses_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "file").write_text("x")
    monkeypatch.chdir(tmp_path)
    assert main(["lab", "--print-command", "--base", "file"]) == 2
    assert "--base file is not a directory" in capsys.readouterr().err
    assert main(["lab", "--print-command", "--port", "70000"]) == 2
    assert "--port 70000 is not a port number" in capsys.readouterr().err


def test_train_without_n_epochs_says_how_long_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    proc = subprocess.Popen([*_command(), "train", "algorithm.epoch_length=1", "algorithm.n_rollout_steps=8",
                             "algorithm.eval_repeats=1", "algorithm.patience=0"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=user_env())
    try:
        out = LineReader(proc.stdout)
        first = out.wait_for("maze-lab train: ")
        assert first.strip() == ("maze-lab train: no n_epochs given and algorithm.patience=0: training until you "
                                 "stop it with Ctrl-C (the last checkpoint stays); set n_epochs=N to end by itself")
        run_dir = Path(out.wait_for("maze-lab train: run directory ").split("run directory ", 1)[1].strip())
        out.wait_for("epoch 1  steps ")  # the line of the first epoch: training is under way
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "maze-lab train: interrupted; run directory: " in proc.stderr.read()
    assert json.loads((run_dir / "maze_lab_run.json").read_text())["status"] == "interrupted"


def test_early_stopping_is_announced() -> None:
    from maze_lab.run.config import compose_config, training_plan

    plan = training_plan(compose_config())
    assert plan.startswith("no n_epochs given: training until early stopping, after 15 epochs in a row without a "
                           "better evaluation reward (algorithm.patience), in epochs of 25 updates; stop with Ctrl-C")
    assert training_plan(compose_config(overrides={"n_epochs": 20})) == (
        "training for 20 epochs of 25 updates, or less where 15 epochs in a row bring no better evaluation reward "
        "(algorithm.patience)")
    assert training_plan(compose_config(experiment="cartpole_ppo")) == "training for 20 epochs of 10 updates"


# ---- configuration errors come before torch and matplotlib --------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["train", "algorithm=rainbow"], "unknown option 'rainbow' for config group 'algorithm'"),
    (["train", "algorithm.lr=fast"], "override 'algorithm.lr': expected a value of type float"),
    (["train", "algorithm.epoch_length=0"], "epoch_length must be >= 1, got 0"),
    (["train", "algorithm.gamma=2"], "gamma must be in [0, 1], got 2.0"),
    (["train", "runner.vector_env=threads"], "runner.vector_env must be 'sequential' (runner=dev) or 'subprocess'"),
    (["train", "env=cutting2d_flat", "runner.concurrency=0"], "runner.concurrency must be >= 1, got 0"),
    (["train", "input_dir=."], "is not a maze-lab run directory"),
    (["sweep", "algorithm.lr=0.1,0.2", "algorithm.n_rollout_steps=0"], "n_rollout_steps must be >= 1"),
])
def test_config_errors_come_before_the_heavy_imports(tmp_path: Path, args: list[str], message: str) -> None:
    code = ("import sys\nfrom maze_lab.cli import main\ncode = main(sys.argv[1:])\n"
            "print(sorted(m for m in ('torch', 'matplotlib', 'tensorboard') if m in sys.modules))\nsys.exit(code)")
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=user_env())
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and proc.stderr.count("\n") == 1
    assert proc.stdout.strip() == "[]"  # the config was checked before torch or matplotlib were imported
    assert not (tmp_path / "outputs").exists()


def test_sweep_value_parsing() -> None:
    assert split_values("0.1,0.2") == ["0.1", "0.2"]
    assert split_values("[64,64],[32,32]") == ["[64,64]", "[32,32]"]
    assert split_values("{type: linear, start: 0.1},0.2") == ["{type: linear, start: 0.1}", "0.2"]
    overrides, experiment = parse_sweep(["algorithm.lr=0.1,0.2", "algorithm=ppo,a2c", "n_epochs=2",
                                         "experiment=cartpole_ppo"])
    assert overrides == {"algorithm.lr": [0.1, 0.2], "algorithm": ["ppo", "a2c"], "n_epochs": 2}
    assert experiment == "cartpole_ppo"
    overrides, _ = parse_sweep(["seed=range(1,4)", "model.hidden=[64,64],[32,32]",
                                "algorithm.lr={type: linear, start: 0.1},0.2"])
    assert overrides == {"seed": [1, 2, 3], "model.hidden": [[64, 64], [32, 32]],
                         "algorithm.lr": [{"type": "linear", "start": 0.1}, 0.2]}
