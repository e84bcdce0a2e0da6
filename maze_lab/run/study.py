"""The study of a search: its directory (every file maze-lab or SQLite reads or writes there checked to be a regular
file inside it), its SQLite database (refused in one line where damaged or locked), the lock that keeps a second
``optimize`` off it, the Optuna sampler, pruner and storage, and what a resumed study records and repairs (the search
space, trials left running by an interrupted driver)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.core.utils.log import get_logger
from maze_lab.run.search_space import SearchSpace

_log = get_logger(__name__)

FINISHED = ("COMPLETE", "PRUNED", "FAIL")
"""The states of a finished trial (those not marked ``interrupted`` count towards the study's trials)."""
TRIAL_DIR = "trial_{:04d}"
"""The run directory of trial ``number`` inside the study directory."""
STUDY_DB = "study.db"
"""The study's SQLite file inside the study directory."""
DB_LOCK_WAIT_S = 3.0
"""How long opening a study waits for a ``study.db`` that another process holds locked before it says so."""
_TRIAL_DIR_NAME = re.compile(r"trial_\d{4,}")
_STUDY_FILES = (STUDY_DB, f"{STUDY_DB}-journal", f"{STUDY_DB}-wal", f"{STUDY_DB}-shm", ".optimize.lock",
                "search_space.yaml", "best_config.yaml", "best_params.yaml")
"""The files maze-lab (and SQLite) read or write in a study directory."""


def make_sampler(settings: dict[str, Any], seed_offset: int = 0, parallel: bool = False) -> Any:
    """The Optuna sampler of ``study.sampler``; a resumed study draws from ``seed + seed_offset``, not the values of
    its first trials again. With trials in ``parallel``, TPE counts the running ones as poor (constant liar), so that
    trials started together do not get near-identical values."""
    import optuna

    kwargs = {k: v for k, v in settings.items() if k != "type" and v is not None}
    if "seed" in kwargs:
        kwargs["seed"] = int(kwargs["seed"]) + seed_offset
    if settings["type"] == "random":
        return optuna.samplers.RandomSampler(**kwargs)
    with warnings.catch_warnings():  # constant_liar is marked experimental in Optuna
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(**kwargs, constant_liar=parallel)


def make_pruner(settings: dict[str, Any]) -> Any:
    """The Optuna pruner of ``study.pruner`` (it judges the evaluation reward after each epoch)."""
    import optuna

    kwargs = {k: v for k, v in settings.items() if k != "type" and v is not None}
    if settings["type"] == "median":
        return optuna.pruners.MedianPruner(**kwargs)
    if settings["type"] == "threshold":
        return optuna.pruners.ThresholdPruner(**kwargs)
    return optuna.pruners.NopPruner()


def study_storage(study_dir: Path) -> Any:
    """The study's SQLite storage (Optuna's RDB storage with its in-process cache)."""
    import optuna

    url = f"sqlite:///{(study_dir / STUDY_DB).resolve()}"
    # one process opens the file (see the module docstring); the timeout covers the driver's own threads
    return optuna.storages.get_storage(optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}}))


def study_entry(study_dir: Path, name: str, what: str, directory: bool = False) -> Path:
    """``study_dir/name`` where it is missing, or a regular file (``directory``: a directory) whose real path lies
    inside the study directory; anything else (a symlink leaving it, a FIFO, a device, a socket) is refused."""
    from maze_lab.core.utils.safe_files import UnsafeFileError, check_inside, file_kind

    path = study_dir / name
    if not os.path.lexists(path):
        return path
    todo = "move it away or give another study_dir"
    try:
        check_inside(path, study_dir, what=what)
        info = os.stat(path)
    except UnsafeFileError as err:
        raise ConfigurationError(f"{' '.join(str(err).split())}; {todo}") from None
    except FileNotFoundError:
        return path  # a symlink to a file of the study directory that is not there yet: it is made there
    except OSError as err:
        raise ConfigurationError(f"{path} cannot be used as the study's {what}: {err.strerror or err}; {todo}") \
            from None
    expected = "directory" if directory else "regular file"
    if (stat.S_ISDIR if directory else stat.S_ISREG)(info.st_mode):
        return path
    raise ConfigurationError(f"{path} is a {file_kind(info.st_mode)}, not a {expected}: maze-lab reads and writes "
                             f"the study's {what} only as a {expected} inside the study directory; {todo}")


def study_directory(study_dir: Path) -> Path:
    """The study directory (made where missing, resolved) with every file maze-lab or SQLite reads or writes there,
    and every trial directory, checked by :func:`study_entry`."""
    from maze_lab.core.utils.safe_files import UnsafeFileError, check_write_dir

    try:
        study_dir = check_write_dir(study_dir, what="study directory").resolve()
    except UnsafeFileError as err:
        raise ConfigurationError(f"{' '.join(str(err).split())}; give another study_dir") from None
    whats = {STUDY_DB: "database", ".optimize.lock": "lock file"}
    for name in _STUDY_FILES:
        study_entry(study_dir, name, whats.get(name, "journal" if name.startswith(STUDY_DB) else name))
    for entry in sorted(os.listdir(study_dir)):
        if _TRIAL_DIR_NAME.fullmatch(entry):
            study_entry(study_dir, entry, "trial directory", directory=True)
    return study_dir


def _db_refusal(path: Path, err: BaseException) -> ConfigurationError:
    """One line for a ``study.db`` that cannot be used: locked by another process, or not a (sound) database."""
    cause = " ".join(str(getattr(err, "orig", None) or err).split()) or type(err).__name__
    if "locked" in cause or "busy" in cause:
        return ConfigurationError(f"{path}: the study database is locked: another process holds it (it was still "
                                  f"locked after {DB_LOCK_WAIT_S:g} s); end the program that has the study open "
                                  f"(another optimize, a script or an Optuna dashboard) and run again, or give "
                                  f"another study_dir")
    return ConfigurationError(f"{path} cannot be read as the study's database ({cause}): it is damaged, truncated "
                              f"or not an Optuna study; move it away (a new study then starts there) or give "
                              f"another study_dir")


def _check_study_db(path: Path) -> None:
    """Refuse a ``study.db`` that is not a sound SQLite database, or that another process holds locked (after
    :data:`DB_LOCK_WAIT_S`), before Optuna opens it (it would wait for a minute and fail with a long traceback)."""
    import sqlite3

    if not path.exists() or path.stat().st_size == 0:  # a regular file (checked): a new study starts in it
        return
    try:
        with contextlib.closing(sqlite3.connect(str(path), timeout=DB_LOCK_WAIT_S, isolation_level=None)) as db:
            db.execute("BEGIN IMMEDIATE")  # the write lock Optuna needs: waits DB_LOCK_WAIT_S at most
            try:
                problems = [row[0] for row in db.execute("PRAGMA quick_check(1)")]
            finally:
                db.execute("ROLLBACK")
    except sqlite3.Error as err:
        raise _db_refusal(path, err) from None
    if problems != ["ok"]:
        raise _db_refusal(path, ValueError(problems[0] if problems else "no answer to its integrity check"))


def open_study(study_dir: Path, study_name: str, spec: SearchSpace) -> tuple[Any, Any]:
    """The study's storage and study (made where new); a damaged or locked ``study.db`` is refused in one line."""
    import optuna
    import sqlalchemy.exc

    path = study_dir / STUDY_DB
    _check_study_db(path)
    try:
        storage = study_storage(study_dir)
        study = optuna.create_study(study_name=study_name, storage=storage, direction=spec.study.direction,
                                    pruner=make_pruner(spec.study.pruner), load_if_exists=True)
    except (sqlalchemy.exc.DatabaseError, optuna.exceptions.StorageInternalError) as err:
        raise _db_refusal(path, err) from err
    return storage, study


@contextlib.contextmanager
def study_lock(study_dir: Path) -> Iterator[None]:
    """Hold the study directory for this driver: a second ``optimize`` on the same study is refused, so that trials
    left ``RUNNING`` by an interrupted driver can safely be marked failed."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock
        yield
        return
    with open(study_entry(study_dir, ".optimize.lock", "lock file"), "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ConfigurationError(f"another maze-lab optimize is running on the study in {study_dir}; wait for it "
                                     f"or give another study_dir") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)



def note_space(study: Any, spec: SearchSpace, study_dir: Path, say: Any) -> None:
    """Record the search space with the study (and in ``search_space.yaml``); warn where a resumed study searched
    another space."""
    data = json.loads(json.dumps(spec.to_dict(), default=str))
    earlier = study.user_attrs.get("search_space")  # read back from study.db: data, compared only
    if isinstance(earlier, dict) and earlier.get("params") != data["params"]:
        _log.warning(f"the study in {study_dir} was started with other params ({sorted(earlier.get('params', {}))}); "
                     f"its earlier trials searched those")
    study.set_user_attr("search_space", data)
    study_entry(study_dir, "search_space.yaml", "search_space.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def fail_stale_trials(study: Any, say: Any) -> None:
    """Trials left running by an interrupted driver are marked failed (``interrupted``) and do not count."""
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
        study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
        study._storage.set_trial_user_attr(t._trial_id, "error", "interrupted: the optimize that ran it ended early")
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        say(f"maze-lab optimize: trial {t.number} was left running by an interrupted optimize: marked failed")

