"""Behavioural cloning from episode files whose objects (the env's own maze states and actions) are not on the
allow-list: one warning for the whole directory, which says that training is not affected, instead of one per
file with advice that cannot be applied where the user is (``RunContext(algorithm="bc")``)."""

from __future__ import annotations

import warnings
from pathlib import Path

from maze_lab.core.rollout import SequentialRolloutRunner
from maze_lab.core.trajectory import ClassAllowList, UntrustedClassWarning
from maze_lab.examples.cutting2d import SIMPLE_PROBLEM, make_masked_env
from maze_lab.examples.cutting2d.policies import GreedyPolicy
from maze_lab.train.trainers.bc.dataset import InMemoryImitationDataset


def test_one_warning_for_all_files(tmp_path: Path) -> None:
    SequentialRolloutRunner(lambda: make_masked_env(**{**SIMPLE_PROBLEM, "max_steps": 4}), GreedyPolicy(),
                            n_episodes=6, trajectory_dir=tmp_path, seed=0, writers=[]).run()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dataset = InMemoryImitationDataset(tmp_path, allowed_classes=ClassAllowList(include_defaults=False))
    untrusted = [str(w.message) for w in caught if w.category is UntrustedClassWarning]
    assert len(untrusted) == 1, untrusted
    assert "6 of 6 episode files" in untrusted[0] and "training is not affected" in untrusted[0]
    assert "Cutting2DMazeState" in untrusted[0]
    assert len(dataset) > 0
