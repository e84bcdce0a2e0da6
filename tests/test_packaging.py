"""A regular (wheel) install imports maze_lab.widgets and maze_lab.examples.cutting2d and finds the configs."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_install_imports_mapped_packages_and_configs(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels)], check=True, capture_output=True, timeout=300)
    wheel = next(wheels.glob("maze_lab-*.whl"))
    venv = tmp_path / "venv"
    # the test runs inside the project's own virtual environment, whose packages --system-site-packages would not
    # see (it names the base interpreter's); a .pth file lends the new venv this environment's dependencies
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], check=True,
                          capture_output=True, text=True).stdout.strip()
    Path(site, "_deps_of_test_env.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], check=True,
                   capture_output=True, timeout=300)
    code = (
        "import maze_lab, maze_lab.widgets, maze_lab.examples.cutting2d as c\n"
        "from maze_lab.run.config import compose_config\n"
        "cfg = compose_config({'env': 'cutting2d_struct_masked'}, {})\n"
        "print(maze_lab.__file__); print(c.__file__); print(cfg.env._target_)\n"
    )
    out = subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True, cwd=tmp_path,
                         timeout=120).stdout.splitlines()
    assert str(venv) in out[0] and str(venv) in out[1], out  # imported from the installed wheel, not the checkout
    assert out[2] == "maze_lab.examples.cutting2d.make_masked_env"
