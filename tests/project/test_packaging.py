"""One build configuration (pyproject.toml) and what a user gets from the wheel alone: a fresh virtual environment with
the wheel installed runs ``maze-lab notebooks``, ``maze-lab run`` on a shipped notebook in the stock ``python3`` kernel
and ``maze-lab lab``; without the notebook extra ``import maze_lab.widgets`` says what to install. The sdist holds
what its tests need; the wheel carries the license and the metadata an index shows."""

from __future__ import annotations

import email
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import urllib.request
import zipfile
from pathlib import Path

import pytest
import tomllib
from browser_utils import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
NOTEBOOK_EXTRA = ("ipywidgets", "plotly", "anywidget")


def _folder_packages() -> set[str]:
    """The packages the folders hold: Python packages and the config groups' data-only folders."""
    found = {"maze_lab.notebooks"}
    for folder, name in (("maze_lab", "maze_lab"), ("widgets", "maze_lab.widgets"), ("examples", "maze_lab.examples")):
        for d in [ROOT / folder, *(ROOT / folder).rglob("*")]:
            if d.is_dir() and "__pycache__" not in d.parts and ((d / "__init__.py").exists() or any(d.glob("*.yaml"))):
                rel = d.relative_to(ROOT / folder)
                found.add(".".join([name, *rel.parts]))
    return found


def test_one_build_configuration_lists_every_package() -> None:
    """pyproject.toml is the only build configuration, and its package list is the folders' (a new subpackage that
    is not listed would be missing from the wheel)."""
    assert not (ROOT / "setup.py").exists() and not (ROOT / "setup.cfg").exists()
    tool = PYPROJECT["tool"]["setuptools"]
    assert set(tool["packages"]) == _folder_packages(), set(tool["packages"]) ^ _folder_packages()
    assert tool["package-dir"] == {"maze_lab": "maze_lab", "maze_lab.widgets": "widgets",
                                   "maze_lab.examples": "examples", "maze_lab.notebooks": "notebooks"}


def test_the_conda_environment_lists_nothing_that_pyproject_lists() -> None:
    """environment.yml brings Python, pip and PyTorch and installs the project through pip, so that the dependencies
    are listed once (its conda route is documented as untested)."""
    import yaml

    spec = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = {re.split(r"[<>=\s]", d, maxsplit=1)[0] for d in spec["dependencies"] if isinstance(d, str)}
    assert conda == {"python", "pip", "pytorch"}, conda
    pip = [d["pip"] for d in spec["dependencies"] if isinstance(d, dict)]
    assert pip == [["-e .[notebook,scale]"]], pip
    assert "not tested" in (ROOT / "docs" / "setup.md").read_text()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels)], check=True, capture_output=True, timeout=300)
    return next(wheels.glob("maze_lab-*.whl"))


@pytest.mark.slow
def test_the_wheel_carries_the_license_the_metadata_and_the_notebooks(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n.rsplit("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(archive.read(f"{info}/METADATA"))
        license_text = archive.read(next(n for n in names if n.startswith(info) and n.endswith("LICENSE"))).decode()
    assert license_text.startswith("MIT License") and (ROOT / "LICENSE").read_text() == license_text
    assert meta["License-Expression"] == "MIT" and meta["License-File"] == "LICENSE"
    assert meta["Requires-Python"] == ">=3.10"  # no cap: nothing known breaks on a newer Python
    classifiers = meta.get_all("Classifier")
    assert "Framework :: Jupyter :: JupyterLab" in classifiers and meta["Author"], classifiers
    optuna = [r for r in meta.get_all("Requires-Dist") if r.startswith("optuna")]
    assert optuna and ">=4.2" in optuna[0], optuna  # run_grpc_proxy_server, which the parallel search uses
    shipped = sorted(n.split("/")[-1] for n in names if n.startswith("maze_lab/notebooks/"))
    assert shipped == sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert "maze_lab/conf/algorithm/ppo.yaml" in names and "maze_lab/widgets/dashboard.py" in names
    assert "maze_lab/examples/cutting2d/conf/env/cutting2d_struct_masked.yaml" in names


@pytest.mark.slow
def test_the_sdist_holds_what_its_tests_need(tmp_path: Path) -> None:
    """The sdist (built by setuptools' own build hook, as ``python -m build --sdist`` calls it) holds every file of the
    checkout's tests, notebooks, docs, scripts and packages."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    code = f"from setuptools import build_meta; print(build_meta.build_sdist({str(tmp_path)!r}))"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, timeout=300)
    with tarfile.open(next(tmp_path.glob("maze_lab-*.tar.gz"))) as archive:
        held = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    tracked = set(subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True,
                                 timeout=60).stdout.split())
    assert tracked - held <= {".ci/run", ".gitattributes", ".gitignore"}, sorted(tracked - held)
    assert {"tests/conftest.py", "tests/benchmarks/ppo_cartpole.py", "notebooks/train.ipynb", "docs/conf.py",
            "scripts/setup.sh", "constraints.txt"} <= held


def _fresh_venv(path: Path, site: Path) -> Path:
    """A new virtual environment that sees the packages of ``site`` (through a .pth file) and nothing of this one."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "_deps_of_test_env.pth").write_text(f"{site}\n")
    return python


def _install(python: Path, wheel: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=300)


def _user_env(venv: Path, home: Path) -> dict[str, str]:
    """A user's shell with the fresh environment activated: its bin/ first on PATH, a home of its own. The data files
    that the lent packages installed into this environment's ``share/jupyter`` (voila's templates, JupyterLab's
    assets, ipykernel's kernel spec) are lent too, as the .pth file lends their code."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "MAZE_LAB", "PYTHON", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), PATH=f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", VIRTUAL_ENV=str(venv),
               JUPYTER_PATH=str(Path(sys.prefix) / "share" / "jupyter"))
    return env


@pytest.mark.slow
def test_the_wheel_alone_runs_the_shipped_notebooks_and_the_lab_app(tmp_path: Path, wheel: Path) -> None:
    """No checkout: the wheel in a fresh virtual environment (its dependencies lent by this one). The shipped
    notebooks are copied out, ``train.ipynb`` runs by its name in the stock ``python3`` kernel (the environment has
    no kernel spec of its own: Jupyter's native one starts the environment's Python), and the Lab app serves."""
    venv = tmp_path / "venv"
    python = _fresh_venv(venv, Path(sysconfig.get_path("purelib")))
    _install(python, wheel)
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = _user_env(venv, home)
    maze_lab = str(venv / "bin" / "maze-lab")

    where = subprocess.run([str(python), "-c", "import maze_lab; print(maze_lab.__file__)"], env=env, cwd=work,
                           capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    assert where.startswith(str(venv)), where  # the wheel's package, not the checkout

    copied = subprocess.run([maze_lab, "notebooks", "nbs"], env=env, cwd=work, capture_output=True, text=True,
                            timeout=300)
    assert copied.returncode == 0, copied.stderr
    assert sorted(p.name for p in (work / "nbs").glob("*.ipynb")) == \
        sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    again = subprocess.run([maze_lab, "notebooks", "nbs"], env=env, cwd=work, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0 and "0 notebooks copied" in again.stdout and "kept" in again.stdout, again.stdout

    run = subprocess.run([maze_lab, "run", "train.ipynb", "-p", "n_epochs", "1", "-p", "epoch_length", "2",
                          "--log-base-dir", str(work / "runs")], env=env, cwd=work, capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "the notebook that ships with maze-lab" in run.stdout, run.stdout
    summaries = list((work / "runs").rglob("maze_lab_run.json"))
    assert len(summaries) == 1 and json.loads(summaries[0].read_text())["status"] == "done"
    executed = json.loads(next((work / "runs").rglob("*.ipynb")).read_text())
    assert executed["metadata"]["kernelspec"]["name"] == "python3"
    missing = subprocess.run([maze_lab, "run", "no_such_notebook"], env=env, cwd=work, capture_output=True,
                             text=True, timeout=300)
    assert missing.returncode == 2 and "train.ipynb" in missing.stderr, missing.stderr

    port = free_port()
    lab = subprocess.Popen([maze_lab, "lab", "--no-browser", "--port", str(port), "--base", str(work / "runs")],
                           env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def page() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=120) as response:
                    return response.read().decode()
            except OSError:
                assert lab.poll() is None, f"maze-lab lab ended: {lab.stdout.read() if lab.stdout else ''}"
                return None

        html = wait_until(page, timeout=300, what="the Lab app's page")
        # voila executed lab.ipynb in the python3 kernel: the app is a widget view, and no cell failed
        assert "application/vnd.jupyter.widget-view+json" in html
        assert "Traceback" not in html and "ModuleNotFoundError" not in html
    finally:
        lab.terminate()
        try:
            lab.wait(timeout=60)
        except subprocess.TimeoutExpired:
            lab.kill()


def _without_the_notebook_extra(dest: Path) -> Path:
    """A site folder of links to this environment's packages, less those of the notebook extra's widgets."""
    purelib = Path(sysconfig.get_path("purelib"))
    left_out = set()
    for name in NOTEBOOK_EXTRA:
        for file in importlib.metadata.distribution(name).files or []:
            left_out.add(file.parts[0])
    dest.mkdir()
    for entry in purelib.iterdir():
        if entry.name not in left_out and not entry.name.endswith(".pth"):
            (dest / entry.name).symlink_to(entry)
    return dest


@pytest.mark.slow
def test_widgets_without_the_notebook_extra_say_what_to_install(tmp_path: Path, wheel: Path) -> None:
    venv = tmp_path / "venv"
    python = _fresh_venv(venv, _without_the_notebook_extra(tmp_path / "site"))
    _install(python, wheel)
    env = _user_env(venv, tmp_path)
    engine = subprocess.run([str(python), "-c", "from maze_lab.run.run_context import RunContext; print('ok')"],
                            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert engine.returncode == 0 and engine.stdout.strip() == "ok", engine.stderr  # the engine needs no widgets
    widgets = subprocess.run([str(python), "-c", "import maze_lab.widgets"], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
    last = widgets.stderr.strip().splitlines()[-1]
    assert widgets.returncode == 1 and last.startswith("ImportError: maze_lab.widgets needs the notebook extra"), \
        widgets.stderr
    assert "ipywidgets, plotly, anywidget are not installed" in last and 'pip install "maze-lab[notebook]"' in last
