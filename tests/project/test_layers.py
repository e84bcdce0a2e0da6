"""The layers of DESIGN.md hold: import-linter checks the contracts of pyproject.toml on maze_lab's modules, and a
deliberately wrong import breaks them; the packages installed into maze_lab's namespace from other folders
(widgets/, examples/) are checked by reading their imports, since import-linter sees only the maze_lab folder."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} is missing: the dev set-up installs import-linter (scripts/setup.sh --dev)")
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold() -> None:
    result = _lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def _copy_of_the_package(tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(REPO / "maze_lab", root / "maze_lab", ignore=shutil.ignore_patterns("__pycache__", "conf"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


@pytest.mark.parametrize("module, code, broken", [
    ("maze_lab/core/wrong.py", "from maze_lab.run import runs\n",
     "maze_lab.core is not allowed to import maze_lab.run"),
    ("maze_lab/train/wrong.py", "import maze_lab.cli\n", "maze_lab.train is not allowed to import maze_lab.cli"),
    ("maze_lab/distributed/wrong.py", "from maze_lab.train import vector_env\n",
     "maze_lab.distributed is not allowed to import maze_lab.train"),
    ("maze_lab/perception/wrong.py", "from maze_lab.agent import torch_policy\n",
     "maze_lab.perception is not allowed to import maze_lab.agent"),
    ("maze_lab/agent/wrong.py", "from maze_lab.train.trainers import ppo\n",
     "maze_lab.agent is not allowed to import maze_lab.train"),
    ("maze_lab/perception/wrong.py", "import plotly.graph_objects\n",
     "maze_lab.perception is not allowed to import plotly"),
])
def test_a_wrong_import_breaks_the_contracts(tmp_path: Path, module: str, code: str, broken: str) -> None:
    root = _copy_of_the_package(tmp_path)
    assert _lint_imports(root).returncode == 0  # the copy as it is keeps them
    (root / module).write_text(code)
    result = _lint_imports(root)
    assert result.returncode != 0
    text = " ".join(result.stdout.split())
    assert broken in text and module.removesuffix(".py").replace("/", ".") in text, result.stdout


def _imports(path: Path) -> list[str]:
    """The absolute names a module imports (relative imports stay within their own package and are left out)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def _under(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_widgets_and_examples_keep_their_places() -> None:
    """widgets/ (maze_lab.widgets) is the top layer below the command line: nothing else of maze_lab imports it (the
    command line may: ``maze-lab report``), and it never imports the CLI; the example env (maze_lab.examples) is user
    code: it uses the engine (core, agent, perception, distributions), never a trainer or a run."""
    wrong = []
    for path in (REPO / "maze_lab").rglob("*.py"):
        above = ("maze_lab.examples",) if path.is_relative_to(REPO / "maze_lab" / "cli") else \
            ("maze_lab.widgets", "maze_lab.examples")
        wrong += [f"{path.relative_to(REPO)} imports {n}" for n in _imports(path) if _under(n, *above)]
    for path in (REPO / "widgets").rglob("*.py"):
        wrong += [f"{path.relative_to(REPO)} imports {n}" for n in _imports(path) if _under(n, "maze_lab.cli")]
    for path in (REPO / "examples").rglob("*.py"):
        wrong += [f"{path.relative_to(REPO)} imports {n}" for n in _imports(path)
                  if _under(n, "maze_lab") and not _under(n, "maze_lab.core", "maze_lab.agent", "maze_lab.perception",
                                                           "maze_lab.distributions", "maze_lab.examples")]
    assert not wrong, wrong


def test_the_layer_check_reads_relative_and_nested_imports(tmp_path: Path) -> None:
    """The reader above sees imports inside functions (as import-linter does), so a lazy import is no way around."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from maze_lab.widgets import dashboard\n    import maze_lab.cli as c\n")
    assert _imports(module) == ["maze_lab.widgets", "maze_lab.cli"]
