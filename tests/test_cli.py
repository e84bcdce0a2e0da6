"""The ``maze-lab`` command as a user runs it: train, sweep, runs, run (papermill), lab; bad input exits with 2."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from maze_lab.cli import main, parse_sweep, split_values

REPO = Path(__file__).resolve().parents[1]
TINY = ["n_epochs=1", "algorithm.epoch_length=2", "algorithm.n_rollout_steps=16", "runner.concurrency=2",
        "algorithm.eval_repeats=1"]


def _command() -> list[str]:
    script = Path(sys.executable).parent / "maze-lab"
    if script.exists():
        return [str(script)]
    found = shutil.which("maze-lab")
    return [found] if found else [sys.executable, "-m", "maze_lab.cli"]


def maze_lab(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run the command in a subprocess, as a user would."""
    return subprocess.run([*_command(), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


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
    for name in ("config.yaml", "stats.parquet", "maze_lab_run.json", "checkpoints/state_dict_last.pt",
                 "checkpoints/state_dict_best.pt", "model_graphs/policy_0.svg", "model_graphs/critic_0.svg"):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert "ActorCriticEvents" in proc.stdout  # headless console statistics
    from maze_lab.run.runs import load_run

    run = load_run(run_dir)
    assert run.summary["status"] == "done" and run.summary["epoch"] == 1 and run.summary["seed"] == 3
    assert run.config.algorithm._target_.endswith("A2CAlgorithmConfig")
    assert run.config.algorithm.n_rollout_steps == 16


def test_sweep_runs_a_grid_and_prints_a_comparison(swept: subprocess.CompletedProcess, workdir: Path) -> None:
    lines = swept.stdout.strip().splitlines()
    assert lines[0].startswith("maze-lab sweep: 3 runs over algorithm.lr (3 values), 2 parallel job(s)")
    header, rows = lines[1], lines[2:]
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
    assert lines[0].split()[:3] == ["created", "experiment", "status"]
    assert len(lines) == 1 + 4
    assert sum("A2CAlgorithmConfig" in line for line in lines) == 1
    assert sum("PPOAlgorithmConfig" in line for line in lines) == 3


def test_run_executes_a_notebook_into_a_run_directory(tmp_path: Path) -> None:
    proc = maze_lab("run", str(REPO / "notebooks" / "train.ipynb"), "-p", "n_epochs", "1", "-p", "epoch_length", "2",
                    "-p", "overrides", "{algorithm.n_rollout_steps: 16, algorithm.eval_repeats: 1}",
                    "--log-base-dir", "runs", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    run_line, nb_line = proc.stdout.strip().splitlines()[-2:]
    run_dir = Path(run_line.removeprefix("run directory: "))
    executed = Path(nb_line.removeprefix("executed notebook: "))
    assert run_dir.parent.parent == tmp_path / "runs"
    assert executed == run_dir / "train.ipynb" and executed.is_file()
    assert (run_dir / "stats.parquet").is_file()
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(run_dir / "config.yaml")
    assert cfg.n_epochs == 1 and cfg.algorithm.epoch_length == 2 and cfg.algorithm.n_rollout_steps == 16


@pytest.mark.parametrize("args, message", [
    (["train", "algorithm=sac"], "unknown option 'sac' for config group 'algorithm'; valid options: a2c, ppo"),
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


def test_lab_dry_run_prints_the_command(capsys: pytest.CaptureFixture) -> None:
    assert main(["lab", "--dry-run", "--port", "8899", "--no-browser"]) == 0
    out = capsys.readouterr().out.strip()
    assert "-m jupyterlab" in out and "--port=8899" in out and "--no-browser" in out
    assert f"--notebook-dir={REPO / 'notebooks'}" in out


def test_sweep_value_parsing() -> None:
    assert split_values("0.1,0.2") == ["0.1", "0.2"]
    assert split_values("[64,64],[32,32]") == ["[64,64]", "[32,32]"]
    assert split_values("{type: linear, start: 0.1},0.2") == ["{type: linear, start: 0.1}", "0.2"]
    overrides, experiment = parse_sweep(["algorithm.lr=0.1,0.2", "algorithm=ppo,a2c", "n_epochs=2",
                                         "experiment=cartpole_ppo"])
    assert overrides == {"algorithm.lr": [0.1, 0.2], "algorithm": ["ppo", "a2c"], "n_epochs": 2}
    assert experiment == "cartpole_ppo"
