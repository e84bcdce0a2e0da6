"""maze-lab's notices and warnings go through the ``maze_lab`` logger hierarchy: shown on stderr by default as the
command line prints them, and an application can silence, filter or redirect them with ``logging`` alone."""

from __future__ import annotations

import logging

import pytest

from maze_lab.core.utils import log
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.train.trainers.common.actor_critic import _for_action_spaces
from maze_lab.train.trainers.common.config import PPOAlgorithmConfig

NOTICE = "every action head is a bounded Box: training with algorithm.bounded_box"


def _notice() -> None:
    """A trainer's notice: PPO on an env whose action heads are bounded Boxes takes its bounded_box values."""
    env = GymMazeEnv("Pendulum-v1")
    try:
        _, changes = _for_action_spaces(PPOAlgorithmConfig(), env)
    finally:
        env.close()
    assert changes


@pytest.fixture
def restored():
    """The maze_lab logger's level and handlers as they were before the test."""
    root = logging.getLogger(log.ROOT)
    level, handlers = root.level, list(root.handlers)
    yield root
    root.setLevel(level)
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    log._default = next((h for h in handlers if isinstance(h, log._StderrHandler)), None)


def test_a_notice_is_shown_on_stderr_by_default_and_comes_from_the_maze_lab_hierarchy(
        restored, capsys, caplog) -> None:
    with caplog.at_level(logging.INFO, logger=log.ROOT):
        _notice()
    assert f"maze-lab: {NOTICE}" in capsys.readouterr().err
    records = [r for r in caplog.records if NOTICE in r.getMessage()]
    assert records and records[0].name == "maze_lab.train.trainers.common.actor_critic"
    assert records[0].levelno == logging.INFO


def test_an_application_silences_the_notices(restored, capsys) -> None:
    restored.setLevel(logging.WARNING)
    _notice()
    assert NOTICE not in capsys.readouterr().err
    log.get_logger("maze_lab.train.trainers.es.es").warning("a worker died")
    assert "maze-lab: WARNING a worker died" in capsys.readouterr().err  # warnings still show


def test_an_application_redirects_them_to_its_own_handler(restored, capsys) -> None:
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    log.use_default_handler(False)
    restored.addHandler(Collect())
    _notice()
    assert any(NOTICE in message for message in seen)
    assert NOTICE not in capsys.readouterr().err
    log.use_default_handler(True)
    _notice()
    assert NOTICE in capsys.readouterr().err


def test_the_default_handler_belongs_to_maze_lab_only() -> None:
    """Nothing is added to the root logger, which stays the application's."""
    assert not any(isinstance(h, log._StderrHandler) for h in logging.getLogger().handlers)
    assert any(isinstance(h, log._StderrHandler) for h in logging.getLogger(log.ROOT).handlers)
