"""The README is for users: short, its links stay inside the repository and resolve, no issue numbers, and CI runs
exactly the test command it gives."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= 200, len(README.splitlines())


def test_every_link_of_the_readme_stays_inside_the_repository_and_resolves() -> None:
    targets = LINK.findall(README)
    assert targets, "the README links to its docs"
    outside = []
    for target in targets:
        if re.match(r"^[a-z]+://", target) or target.startswith("#"):
            continue  # a web page or a heading of the README itself
        path = (ROOT / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(ROOT) or not path.exists():
            outside.append(target)
    assert not outside, f"links that leave the repository or do not resolve: {outside}"
    assert "../" not in README and "shared/" not in README


def test_the_readme_names_no_issue_numbers() -> None:
    assert not re.search(r"(?i)\bissues?\s*#?\d+|(?<![\w&])#\d+\b", README)


def test_ci_runs_the_test_command_of_the_readme() -> None:
    commands = [line for line in README.splitlines() if line.startswith("bash scripts/setup.sh")]
    assert len(commands) == 2, commands  # one runs the main job, one the tests
    main_job, tests = commands
    assert "maze-lab run notebooks/train.ipynb" in main_job and "pytest" in tests
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests in ci.splitlines(), ci
