"""A regular (wheel) install imports maze_lab.widgets and maze_lab.examples.cutting2d and finds the configs; the
wheel carries the license and the metadata an index shows."""

from __future__ import annotations

import email
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels)], check=True, capture_output=True, timeout=300)
    return next(wheels.glob("maze_lab-*.whl"))


@pytest.mark.slow
def test_the_wheel_carries_the_license_and_the_metadata(wheel: Path) -> None:
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


@pytest.mark.slow
def test_wheel_install_imports_mapped_packages_and_configs(tmp_path, wheel):
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
