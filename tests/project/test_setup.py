"""The README's set-up on a stock Debian PATH: a virtual environment of its own whose stock ``python3`` kernel runs the
notebooks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STOCK_PATH = "/usr/local/bin:/usr/bin:/bin"


def test_every_notebook_runs_in_the_stock_python3_kernel() -> None:
    """Notebooks (and so papermill runs and the Lab app) name Jupyter's stock ``python3`` kernel, which every
    environment with ipykernel has: a wheel install needs no kernel that only the checkout's set-up installs."""
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert notebooks
    for path in notebooks:
        spec = json.loads(path.read_text())["metadata"]["kernelspec"]
        assert spec["name"] == "python3", f"{path.name} uses kernel {spec['name']!r}"


def test_the_python3_kernel_starts_this_environments_python() -> None:
    """In the project's environment the ``python3`` kernel is the environment's own (its kernel spec comes before a
    user-wide one) and starts this environment's Python."""
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    assert Path(spec.resource_dir).resolve().is_relative_to(Path(sys.prefix).resolve()), spec.resource_dir
    command = KernelManager(kernel_name="python3").format_kernel_cmd()
    assert Path(command[0]).resolve() == Path(sys.executable).resolve(), command
    assert command[command.index("-m") + 1] == "ipykernel_launcher"


def test_setup_refuses_an_unsupported_python_with_a_clear_message(tmp_path: Path) -> None:
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    env = {"HOME": str(tmp_path), "PATH": STOCK_PATH, "MAZE_LAB_PYTHON": str(fake),
           "MAZE_LAB_VENV": str(tmp_path / "venv")}
    proc = subprocess.run(["bash", "scripts/setup.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1
    assert "maze-lab needs Python 3.10-3.13" in proc.stderr and "MAZE_LAB_PYTHON" in proc.stderr
    assert not (tmp_path / "venv").exists()


def test_setup_rejects_unknown_options() -> None:
    proc = subprocess.run(["bash", "scripts/setup.sh", "--devv"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "unknown option '--devv' (valid: --dev, --help)" in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(not Path("/usr/bin/python3").exists() or shutil.which("bash") is None,
                    reason="needs Debian's /usr/bin/python3")
def test_setup_on_a_stock_path_installs_into_its_own_environment(tmp_path: Path) -> None:
    """``env -i HOME=… PATH=/usr/local/bin:/usr/bin:/bin bash scripts/setup.sh`` with no ``python`` command.

    To keep the test short, the environment is prepared as the script would create it and sees this
    environment's already installed dependencies through a ``.pth`` file; the script then installs maze-lab
    into it, and the notebooks' ``python3`` kernel starts its Python. Nothing may be written to the user's home
    (no user-wide kernels, no pip --user).
    """
    home = tmp_path / "home"
    home.mkdir()
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True, timeout=120)
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run([str(venv / "bin" / "python"), "-c", purelib], check=True, capture_output=True,
                          text=True).stdout.strip()
    if subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; assert sys.version_info[:2] == "
                       f"{tuple(sys.version_info[:2])}"]).returncode != 0:
        pytest.skip("/usr/bin/python3 is another Python version than the test environment's")
    Path(site, "_deps_of_test_env.pth").write_text(sysconfig.get_path("purelib") + "\n")

    env = {"HOME": str(home), "PATH": STOCK_PATH, "MAZE_LAB_VENV": str(venv)}
    for key in ("PIP_FIND_LINKS", "PIP_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        if key in os.environ:
            env[key] = os.environ[key]
    assert "python" not in subprocess.run(["bash", "-c", "compgen -c python; true"], env=env, capture_output=True,
                                          text=True).stdout.split()
    proc = subprocess.run(["bash", "scripts/setup.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "setup: done" in proc.stdout

    kernel = ("from jupyter_client import KernelManager\n"
              "print(KernelManager(kernel_name='python3').format_kernel_cmd()[0])")
    command = subprocess.run([str(venv / "bin" / "python"), "-c", kernel], env=env, capture_output=True,
                             text=True, timeout=120)
    assert command.returncode == 0 and Path(command.stdout.strip()) == venv / "bin" / "python", command
    assert not (venv / "share" / "jupyter" / "kernels" / "maze-lab").exists()  # no kernel of its own
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())
    assert not [p for p in written if "jupyter" in p or "site-packages" in p], written

    out = subprocess.run([str(venv / "bin" / "maze-lab"), "--help"], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "train" in out.stdout
    warnings = [line for line in (proc.stdout + proc.stderr).splitlines()
                if "TOML table is deprecated" in line or "Package would be ignored" in line]
    assert not warnings
