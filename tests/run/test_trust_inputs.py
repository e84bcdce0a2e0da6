"""Inputs that come from someone else run no code that nobody allowed, and a damaged study fails in one line:
notebook parameters (``maze-lab run NB -p NAME VALUE``, ``run_notebook``, ``run_notebook_batch``) are only ever
plain Python literals, executed here by papermill in a real kernel; a search space of ``maze-lab optimize`` names
only what a run directory may (``--trust`` / ``trust=`` to allow more); a study directory's ``study.db`` that is
corrupt, truncated, a directory or locked by another process, and its files as symlinks leaving it, FIFOs, sockets or
devices are refused with one line naming the path. Every injected command would touch a marker file that must not
appear."""

from __future__ import annotations

import base64
import os
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from run_utils import maze_lab_command

from maze_lab.core.utils.factory import ConfigurationError

TINY = {"n_epochs": 1, "algorithm.epoch_length": 1, "algorithm.n_rollout_steps": 16, "runner.concurrency": 1,
        "runner.eval_concurrency": 1, "algorithm.eval_repeats": 1}
"""One epoch of a few dozen env steps per trial."""


def maze_lab(*args: str, cwd: Path, timeout: float = 120, pythonpath: Path | None = None
             ) -> subprocess.CompletedProcess:
    """``maze-lab ARGS`` in a subprocess as a user runs it; a hang past ``timeout`` fails the test."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    try:
        return subprocess.run([*maze_lab_command(), *args], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"maze-lab {' '.join(args)} did not end within {timeout} s (it hangs or waits): {err}")


def one_line(proc: subprocess.CompletedProcess, command: str) -> str:
    """The single stderr line of a refused command (exit code 2, no traceback)."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[0].startswith(f"maze-lab {command}: error: "), lines[0]
    return lines[0]


# ---- notebook parameters -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def notebook(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny notebook: a parameters cell with ``env`` and a cell that prints it (the stock python3 kernel)."""
    import nbformat

    pytest.importorskip("papermill")
    pytest.importorskip("ipykernel")
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('env = "CartPole-v1"\nrun_dir = ""\nlog_base_dir = ""')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell('print("env:", repr(env))')]
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    path = tmp_path_factory.mktemp("nb") / "tiny.ipynb"
    nbformat.write(nb, path)
    return path


def injection(marker: Path) -> str:
    """Text that closes papermill's string literal and runs a command where it is written unescaped."""
    return f'";__import__("os").system("touch {marker}");x="'


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_binary_parameter_is_refused_and_never_runs(notebook: Path, tmp_path: Path, batch: bool) -> None:
    """``-p env '!!binary ...'`` used to become bytes that papermill wrote unescaped into the injected cell, which
    the kernel ran. Now: one line naming the parameter, exit code 2, no run directory, no command."""
    marker = tmp_path / "command_ran"
    payload = base64.b64encode(injection(marker).encode()).decode()
    value = f"!!binary {payload}" + (",plain" if batch else "")
    proc = maze_lab("run", str(notebook), "-p", "env", value, "--log-base-dir", str(tmp_path / "out"),
                    cwd=tmp_path)
    line = one_line(proc, "run")
    assert "notebook parameter 'env'" in line and "!!binary" in line
    assert "a string, int, float, bool or null" in line
    assert not marker.exists()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["bytes", "set", "tuple in a list", "non-string key"])
def test_python_api_refuses_values_that_are_not_plain_literals(notebook: Path, tmp_path: Path, value: str) -> None:
    """run_notebook and run_notebook_batch refuse, before anything is made or run, a value that papermill would
    write as something other than the same literal (each of these ran the command when written unescaped)."""
    from maze_lab.run.notebook_batch import run_notebook_batch
    from maze_lab.run.papermill_run import run_notebook

    marker = tmp_path / "command_ran"
    text = injection(marker)
    values = {"bytes": text.encode(), "set": {text}, "tuple in a list": [(text,)], "non-string key": {1: text}}
    with pytest.raises(ConfigurationError, match=r"^notebook parameter 'env': .* is not allowed; a notebook "
                                                 r"parameter is a string, int, float, bool or null"):
        run_notebook(notebook, {"env": values[value]}, log_base_dir=tmp_path / "out")
    with pytest.raises(ConfigurationError, match=r"^notebook parameter 'env': "):
        run_notebook_batch(notebook, {"env": ["plain", values[value]]}, log_base_dir=tmp_path / "out")
    assert not marker.exists()
    assert not (tmp_path / "out").exists()


def test_plain_literals_still_reach_the_notebook(notebook: Path, tmp_path: Path) -> None:
    """Text with quotes, backslashes and newlines, numbers, lists and mappings arrive in the kernel unchanged."""
    from maze_lab.run.papermill_run import run_notebook

    value = {"text": 'a "quoted" \\ back\nslash \'x\'', "n": [1, 2.5, None, True], "nested": {"k": ["v"]}}
    _, executed = run_notebook(notebook, {"env": value}, log_base_dir=tmp_path / "out")
    import nbformat

    printed = "".join(out.get("text", "") for cell in nbformat.read(executed, as_version=4).cells
                      for out in cell.get("outputs", []))
    assert f"env: {value!r}" in printed


ACCEPTED = {"3": 3, "-0.5": -0.5, "1e-3": "1e-3", "0.001": 0.001, "true": True, "null": None, "[64, 64]": [64, 64],
            "{algorithm.lr: 0.001, hidden: [a, b]}": {"algorithm.lr": 0.001, "hidden": ["a", "b"]},
            "hello world": "hello world", "'2024-01-01'": "2024-01-01", '"!!binary x"': "!!binary x",
            "a: b: c": "a: b: c", "x!": "x!"}
REFUSED = {"!!binary YWJj": "YAML tag !!binary", "!!str 3": "YAML tag !!str", "!!set {a, b}": "YAML tag !!set",
           "!!python/name:os.system": "YAML tag !!python/name:os.system", "!local x": "YAML tag !local",
           "[1, !!binary YWJj]": "YAML tag !!binary", "&a [1, *a]": "anchors and aliases",
           "2024-01-01": "a date, 2024-01-01", "2024-01-01 10:00:00": "a datetime", ".inf": "the float inf",
           "[.nan]": "the float nan", "{1: a}": "the mapping key 1", "{null: a}": "the mapping key None"}


@pytest.mark.parametrize("text", list(ACCEPTED))
def test_parse_parameter_accepts_plain_literals(text: str) -> None:
    from maze_lab.run.papermill_run import parse_parameter

    value = parse_parameter("p", text)
    assert value == ACCEPTED[text] and type(value) is type(ACCEPTED[text])


@pytest.mark.parametrize("text", list(REFUSED))
def test_parse_parameter_refuses_anything_else_in_one_line(text: str) -> None:
    from maze_lab.run.papermill_run import parse_parameter

    with pytest.raises(ConfigurationError) as info:
        parse_parameter("p", text)
    message = str(info.value)
    assert message.startswith("notebook parameter 'p': ") and REFUSED[text] in message
    assert "a string, int, float, bool or null (None), or a list or mapping of those" in message
    assert "\n" not in message


def test_check_parameter_refuses_objects_and_self_reference() -> None:
    """Exact plain types only (a str or float subclass could write anything), finite floats, bounded nesting."""
    from maze_lab.run.papermill_run import check_parameter

    class Text(str):
        pass

    looped: list = []
    looped.append(looped)
    for value, what in [(Text("x"), "Text object"), (float("nan"), "the float nan"),
                        (looped, "nested more than"), (1 + 2j, "a complex number"), (object(), "builtins.object"),
                        ({"a": frozenset()}, "a set")]:
        with pytest.raises(ConfigurationError, match=r"^notebook parameter 'p': ") as info:
            check_parameter("p", value)
        assert what in str(info.value)
    for value in ["", 0, -0.0, 10**30, 1e300, False, None, [], {}, {"a": [{"b": None}]}, "\x00\ud800\u2028"]:
        check_parameter("p", value)


# ---- search spaces -------------------------------------------------------------------------------------------------
def command(marker: Path) -> dict:
    return {"_target_": "os.system", "command": f"touch {marker}"}


def _in_overrides(space: dict, marker: Path) -> None:
    space["overrides"]["env.evil"] = command(marker)


def _in_a_choice(space: dict, marker: Path) -> None:
    space["overrides"]["env.evil"] = {"command": f"touch {marker}"}
    space["params"]["env.evil._target_"] = {"type": "categorical", "choices": ["os.system"]}


def _nested(space: dict, marker: Path) -> None:
    space["overrides"]["env.evil"] = {"inner": [command(marker)]}


VARIANTS = {"overrides": (_in_overrides, "overrides.env.evil._target_"),
            "choice": (_in_a_choice, "params.env.evil._target_"),
            "nested": (_nested, "overrides.env.evil.inner[0]._target_")}


def space_file(tmp_path: Path, change=None, name: str = "space.yaml") -> Path:
    """A search space of one tiny trial (random sampler, no pruner), changed by ``change``."""
    space = {"overrides": dict(TINY), "study": {"n_trials": 1, "sampler": {"type": "random", "seed": 0},
                                                "pruner": "none"},
             "params": {"algorithm.lr": {"type": "float", "low": 1e-4, "high": 1e-3}}}
    if change is not None:
        change(space)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(space))
    return path


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_search_space_target_is_refused_before_anything_runs(tmp_path: Path, variant: str) -> None:
    """A search space whose overrides or choices name os.system ran it in the trial; now it is refused when the
    space is loaded, naming the file, the key and the target; no study directory is made."""
    from maze_lab.core.utils.factory import TrustError
    from maze_lab.run.optimize import optimize

    marker = tmp_path / "command_ran"
    change, key = VARIANTS[variant]
    path = space_file(tmp_path, lambda space: change(space, marker))
    with pytest.raises(TrustError) as info:
        optimize(str(path), overrides={"log_base_dir": str(tmp_path / "out")}, quiet=True)
    message = str(info.value)
    assert message.startswith(f"search space {path}: {key} = 'os.system' was refused: ")
    assert "cannot be allowed" in message and "\n" not in message
    assert not marker.exists()
    assert not (tmp_path / "out").exists()


def test_optimize_command_refuses_in_one_line_and_trust_allows(tmp_path: Path) -> None:
    """`maze-lab optimize` refuses a space naming a module of someone's own in one line that says how to allow it;
    with --trust that module the study runs (its trial builds the env through it). os.system cannot be allowed;
    a study directory's search_space.yaml given back as --space is checked the same way."""
    marker = tmp_path / "command_ran"
    (tmp_path / "my_envs.py").write_text("from maze_lab.core.wrappers.gym_maze_env import make_gym_maze_env\n")
    own = {"_target_": "my_envs.make_gym_maze_env", "name": "CartPole-v1"}
    path = space_file(tmp_path, lambda space: space["overrides"].update(env=own))
    study_dir = tmp_path / "study"
    refused = maze_lab("optimize", "--space", str(path), "--study-dir", str(study_dir), cwd=tmp_path,
                       pythonpath=tmp_path)
    line = one_line(refused, "optimize")
    assert f"search space {path}: overrides.env._target_ = 'my_envs.make_gym_maze_env' was refused" in line
    assert "allow it with `maze-lab optimize --trust my_envs`" in line
    assert not study_dir.exists()

    trusted = maze_lab("optimize", "--space", str(path), "--study-dir", str(study_dir), "--trust", "my_envs",
                       cwd=tmp_path, pythonpath=tmp_path, timeout=300)
    assert trusted.returncode == 0, trusted.stderr[-3000:]
    config = yaml.safe_load((study_dir / "best_config.yaml").read_text())
    assert config["env"]["_target_"] == "my_envs.make_gym_maze_env"

    # the study directory's copy of the space, edited by someone, given back as a search space
    copied = yaml.safe_load((study_dir / "search_space.yaml").read_text())
    copied["overrides"]["env.evil"] = command(marker)
    (study_dir / "search_space.yaml").write_text(yaml.safe_dump(copied))
    again = maze_lab("optimize", "--space", str(study_dir / "search_space.yaml"), "--study-dir", str(study_dir),
                     "--trust", "my_envs", "--trials", "2", cwd=tmp_path, pythonpath=tmp_path)
    line = one_line(again, "optimize")
    assert "overrides.env.evil._target_ = 'os.system' was refused" in line and "cannot be allowed" in line
    assert not marker.exists()
    assert not (study_dir / "trial_0001").exists()


def test_check_space_trust_semantics(tmp_path: Path) -> None:
    """maze-lab's own names, torch.nn and Gymnasium need no trust; a trusted module admits its names; a Gymnasium id
    ``module:EnvId`` imports its module, so that module is checked; text that merely has dots is left alone."""
    from maze_lab.run.optimize import SearchSpaceTrustError, check_space_trust, load_search_space

    def space(overrides: dict, choices: list | None = None):
        params = {"algorithm.lr": {"type": "categorical", "choices": choices or [0.001]}}
        return load_search_space({"name": "s", "overrides": overrides, "params": params})

    check_space_trust(space({"model.policy.networks.non_lin": "torch.nn.Tanh", "env.name": "CartPole-v1",
                             "log_base_dir": "no_such_package.v2"}))
    with pytest.raises(SearchSpaceTrustError, match=r"overrides\.env\.name = 'json:Evil-v0' was refused: Gymnasium "
                                                   r"would import the module 'json'.*--trust json"):
        check_space_trust(space({"env.name": "json:Evil-v0"}))
    check_space_trust(space({"env.name": "json:Evil-v0"}), trust=["json"])
    with pytest.raises(SearchSpaceTrustError, match=r"params\.algorithm\.lr = 'subprocess\.Popen' was refused"):
        check_space_trust(space({}, ["subprocess.Popen"]))
    with pytest.raises(SearchSpaceTrustError, match=r"overrides\.wrappers\.subprocess\.Popen = 'subprocess\.Popen'"):
        check_space_trust(space({"wrappers": {"subprocess.Popen": {"args": ["true"]}}}))
    with pytest.raises(ConfigurationError, match=r"trust entry 'os' cannot be trusted"):
        check_space_trust(space({"env._target_": "os.system"}), trust=["os"])


# ---- study directories ---------------------------------------------------------------------------------------------
def _corrupt(db: Path) -> None:
    db.write_bytes(b"this is not an SQLite database " * 64)


def _truncated(db: Path) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="other", storage=f"sqlite:///{db}")
    for i in range(30):
        trial = study.ask()
        trial.suggest_float("x", 0, 1)
        study.tell(trial, float(i))
    data = db.read_bytes()
    db.write_bytes(data[:len(data) // 2])


def _directory(db: Path) -> None:
    db.mkdir()


DAMAGED = {"corrupt": (_corrupt, "(file is not a database)"), "truncated": (_truncated, "malformed"),
           "directory": (_directory, "is a directory, not a regular file")}


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_damaged_study_db_is_one_line(tmp_path: Path, damage: str) -> None:
    """A corrupt, truncated or directory study.db: one line naming the file, the cause and what to do (it was a
    77-122 line sqlalchemy traceback that did not name the file); --debug shows the traceback."""
    study_dir = tmp_path / "study"
    study_dir.mkdir()
    make, cause = DAMAGED[damage]
    make(study_dir / "study.db")
    path = space_file(tmp_path)
    line = one_line(maze_lab("optimize", "--space", str(path), "--study-dir", str(study_dir), cwd=tmp_path),
                    "optimize")
    assert str(study_dir / "study.db") in line and cause in line
    assert "move it away" in line and "another study_dir" in line
    assert not (study_dir / "trial_0000").exists()
    if damage == "corrupt":
        debug = maze_lab("optimize", "--space", str(path), "--study-dir", str(study_dir), "--debug", cwd=tmp_path)
        assert debug.returncode == 2 and "Traceback" in debug.stderr


@pytest.fixture
def locked_db(tmp_path: Path) -> Iterator[Path]:
    """A study.db that another process holds with an exclusive SQLite lock until the test ends."""
    db = tmp_path / "study" / "study.db"
    db.parent.mkdir()
    sqlite3.connect(db).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys\n"
                               f"db = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
                               "db.execute('CREATE TABLE t (x)')\n"
                               "db.execute('BEGIN EXCLUSIVE')\n"
                               "print('locked', flush=True)\n"
                               "sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"  # returns once the lock is held (or the holder died)
        yield db
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_locked_study_db_fails_fast(tmp_path: Path, locked_db: Path) -> None:
    """A study.db locked by another process waited silently for about 45 s; now a short bounded wait, then one line
    saying another process holds it."""
    started = time.monotonic()
    proc = maze_lab("optimize", "--space", str(space_file(tmp_path)), "--study-dir", str(locked_db.parent),
                    cwd=tmp_path, timeout=40)
    took = time.monotonic() - started
    line = one_line(proc, "optimize")
    assert str(locked_db) in line and "locked" in line and "another process holds it" in line
    assert took < 30, took


def _fifo(path: Path, outside: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path, outside: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()


def _device(path: Path, outside: Path) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # as /dev/zero
    except PermissionError:
        pytest.skip("no permission to make a device node here")


def _symlink_out(path: Path, outside: Path) -> None:
    path.symlink_to(outside)


ENTRIES = {
    "study.db FIFO": ("study.db", _fifo, "is a FIFO (named pipe), not a regular file"),
    "study.db socket": ("study.db", _socket, "is a socket, not a regular file"),
    "study.db device": ("study.db", _device, "is a character device, not a regular file"),
    "study.db symlink out": ("study.db", _symlink_out, "outside"),
    "journal symlink out": ("study.db-journal", _symlink_out, "outside"),
    "lock symlink out": (".optimize.lock", _symlink_out, "outside"),
    "search_space.yaml symlink out": ("search_space.yaml", _symlink_out, "outside"),
    "search_space.yaml FIFO": ("search_space.yaml", _fifo, "is a FIFO (named pipe), not a regular file"),
    "best_config.yaml symlink out": ("best_config.yaml", _symlink_out, "outside"),
    "trial directory symlink out": ("trial_0000", _symlink_out, "outside"),
}


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_study_directory_entries_are_regular_files_inside(tmp_path: Path, entry: str) -> None:
    """What maze-lab or SQLite reads or writes in a study directory is a regular file (directory) inside it; a
    symlink leaving it, a FIFO (which hung the study), a socket or a device is refused in one line naming the path,
    and the file outside is left as it was."""
    study_dir = tmp_path / "study"
    study_dir.mkdir()
    name, make, what = ENTRIES[entry]
    outside = tmp_path / "precious"
    if name.startswith("trial_"):
        outside.mkdir()
    else:
        outside.write_text("precious\n")
    make(study_dir / name, outside)
    proc = maze_lab("optimize", "--space", str(space_file(tmp_path)), "--study-dir", str(study_dir), cwd=tmp_path,
                    timeout=60)
    line = one_line(proc, "optimize")
    assert str(study_dir / name) in line and what in line, line
    if outside.is_dir():
        assert not list(outside.iterdir())
    else:
        assert outside.read_text() == "precious\n"


def test_resumed_study_reads_its_trials_from_its_own_directory(tmp_path: Path) -> None:
    """study.db records where each trial's run directory was made; a copied study, or a tampered study.db, points
    elsewhere. A resumed study reads its best trial (best_config.yaml) and lists its trials from its own
    trial_<number> directories."""
    from maze_lab.run.optimize import optimize

    study_dir = tmp_path / "study"
    result = optimize(str(space_file(tmp_path)), study_dir=study_dir, quiet=True)
    assert result.best_trial == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "config.yaml").write_text(yaml.safe_dump({"secret": "from elsewhere"}))
    db = sqlite3.connect(study_dir / "study.db")
    with db:
        changed = db.execute("UPDATE trial_user_attributes SET value_json = ? WHERE key = 'run_dir'",
                             (f'"{elsewhere}"',)).rowcount
    db.close()
    assert changed == 1
    again = optimize(str(space_file(tmp_path)), study_dir=study_dir, quiet=True)
    assert again.ran == []
    assert list(again.table.run_dir) == [str(study_dir.resolve() / "trial_0000")]
    assert "from elsewhere" not in (study_dir / "best_config.yaml").read_text()
    assert yaml.safe_load((study_dir / "best_config.yaml").read_text())["algorithm"]["lr"] == \
        again.best_params["algorithm.lr"]
