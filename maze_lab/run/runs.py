"""The runs API: list run directories as a DataFrame, compare them, load one back (config, stats, policy)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from maze_lab.core.utils.factory import TrustPolicy
from maze_lab.core.utils.safe_files import UnsafeFileError, check_write_dir, open_regular, read_at_most
from maze_lab.run.run_dir import MARKER, DamagedRunError, RunDirectory
from maze_lab.run.run_status import RunControlError, read_small_json, resolve_status


def list_runs(base_dir: str | Path | None = None, group: str | None = None) -> Any:
    """All run directories under ``base_dir`` (newest first) with status, seed and metrics, and the ``group`` of runs
    made together (a notebook batch, a sweep, an Optuna study: see :func:`run_group`).

    A run directory whose files cannot be read (an empty or invalid summary, an invalid ``config.yaml``, truncated
    statistics) is listed with status ``damaged`` and the ``reason``; the others list as usual. ``live`` says whether
    a process trains the run now; a run whose summary says it trains but whose process is gone is ``died``, with
    ``last_seen`` (its last heartbeat) and the reason (see :mod:`maze_lab.run.run_status`).

    :param base_dir: default: the default location of runs (``$MAZE_LAB_OUTPUTS``, else ``<project root>/outputs``;
        see ``maze_lab.run.run_dir.default_outputs_dir``), where the CLI and notebooks put them.
    :param group: only the runs of this group (``sweep:…``, ``batch:…``, ``study:…``, or the id alone).
    """
    import pandas as pd

    from maze_lab.run.run_dir import default_outputs_dir

    base = Path(base_dir) if base_dir is not None else default_outputs_dir()
    rows = [row for row in (_row(RunDirectory(path)) for path in _run_dirs(base)) if not _vanished(row)]
    df = pd.DataFrame(rows, columns=_COLUMNS)
    if group is not None:
        df = df[df.group.map(lambda g: in_group(g, group))]
    return df.sort_values("created", ascending=False).reset_index(drop=True) if not df.empty else df


def _run_dirs(base: Path) -> Iterator[Path]:
    """The directories under ``base`` (itself included) that hold a run summary; symlinked directories are not
    entered, and a directory deleted while it is walked is passed over (another process may delete runs)."""
    for dirpath, dirnames, filenames in os.walk(base, onerror=lambda _err: None):
        if MARKER in filenames or MARKER in dirnames:
            yield Path(dirpath)


def _vanished(row: dict[str, Any]) -> bool:
    """Whether a row is that of a run deleted while it was read (not listed: it is no damaged run)."""
    return row["status"] == "damaged" and not os.path.lexists(Path(row["run_dir"]) / MARKER)


_COLUMNS = ["run_dir", "experiment", "group", "status", "live", "created", "seed", "algorithm", "env", "epoch",
            "env_steps", "best_eval_reward", "last_eval_reward", "final_train_reward", "reason", "last_seen", "tags",
            "archived"]

_SUMMARY_FIELDS = ("experiment", "status", "created", "seed", "epoch", "env_steps", "best_eval_reward",
                   "last_eval_reward", "final_train_reward")


def _get(cfg: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(cfg, Mapping):
            return None
        cfg = cfg.get(key)
    return cfg


def _short(value: Any) -> str | None:
    return str(value).rsplit(".", 1)[-1] or None if value else None


def _row(run: RunDirectory) -> dict[str, Any]:
    """One row of the runs table; a run whose files cannot be read is ``damaged`` with the reason."""
    row: dict[str, Any] = dict.fromkeys(_COLUMNS)
    row["run_dir"] = str(run.path)
    try:
        summary = run.read_summary()
        row.update({k: summary.get(k) for k in _SUMMARY_FIELDS})
        state = resolve_status(run.path, summary)  # a live status whose process is gone reads `died`
        row.update(status=state["status"], reason=state["reason"], live=state["live"], last_seen=state["last_seen"])
        row["group"] = run_group(summary)
        labels = run_labels(run.path)
        row["tags"], row["archived"] = labels["tags"], labels["archived"]
        if row["created"] is not None:
            row["created"] = str(row["created"])  # sortable, whatever the file holds
        if run.config_file.exists():
            cfg = run.read_config()
            row["algorithm"] = _short(_get(cfg, "algorithm", "_target_"))
            row["env"] = _get(cfg, "env", "name") or _short(_get(cfg, "env", "_target_"))
        run.check_statistics()
    except (DamagedRunError, OSError) as err:
        row["status"], row["reason"] = "damaged", " ".join(str(err).split())
    return row


LABELS_FILE = "labels.json"
"""A run's tags and whether it is archived: a file of its own, so that labelling a live run never races the
summary its process writes."""

MAX_TAGS, MAX_TAG_LENGTH = 20, 40


def run_labels(run_dir: str | Path) -> dict[str, Any]:
    """``{"tags": [...], "archived": bool}`` of a run (none and False where it has no labels file, or one that is
    not a small JSON object of that shape: labels are a convenience, never a reason to refuse a run)."""
    data = read_small_json(Path(run_dir) / LABELS_FILE) or {}
    tags = data.get("tags")
    tags = [t for t in tags if isinstance(t, str)][:MAX_TAGS] if isinstance(tags, list) else []
    return {"tags": tags, "archived": data.get("archived") is True}


def label_run(run_dir: str | Path, tags: Iterable[str] | None = None, archived: bool | None = None) -> dict[str, Any]:
    """Set a run's tags (replacing them) and/or whether it is archived (archived runs are hidden from the Lab app's
    list unless asked for); returns the labels. A tag is a short word: letters, digits, ``-``, ``_``, ``.``, ``:``."""
    import json
    import re

    from maze_lab.core.utils.atomic import write_atomic

    directory = RunDirectory.open(run_dir)
    labels = run_labels(directory.path)
    if tags is not None:
        tags = list(dict.fromkeys(str(t).strip() for t in tags if str(t).strip()))
        bad = [t for t in tags if len(t) > MAX_TAG_LENGTH or not re.fullmatch(r"[\w.:-]+", t)]
        if bad or len(tags) > MAX_TAGS:
            raise ValueError(f"tags must be at most {MAX_TAGS} words of letters, digits, '-', '_', '.' or ':' (at most "
                             f"{MAX_TAG_LENGTH} characters each); refused: {', '.join(map(repr, bad)) or 'too many'}")
        labels["tags"] = tags
    if archived is not None:
        labels["archived"] = bool(archived)
    write_atomic(directory.path / LABELS_FILE, json.dumps(labels).encode())
    return labels


def delete_run(run_dir: str | Path) -> Path:
    """Delete a run directory with everything in it; a live run is refused (stop it first: ``maze-lab stop``), as is
    anything that is not a run directory (no summary, a symlink)."""
    import shutil

    path = Path(run_dir)
    if path.is_symlink() or not path.is_dir() or not (path / MARKER).is_file():
        raise ValueError(f"{path} is not a run directory (a directory holding {MARKER}); nothing was deleted")
    try:
        summary = RunDirectory(path).read_summary()
    except (DamagedRunError, OSError):  # a damaged run can be deleted; whether it is live its owner file says
        summary = {}
    if resolve_status(path, summary)["live"]:
        raise RunControlError(f"{path} is live (a process trains it); stop it first, then delete it")
    shutil.rmtree(path)
    return path


def run_group(summary: Mapping[str, Any]) -> str | None:
    """The group a run belongs to, from its summary: ``batch:<id>`` (a notebook batch), ``sweep:<id>`` (a grid of
    ``maze-lab sweep`` / ``RunContext(multirun=True)``), ``study:<name>`` (an Optuna trial of ``maze-lab
    optimize``); None for a single run."""
    if summary.get("batch_id"):
        return f"batch:{summary['batch_id']}"
    if summary.get("sweep_id"):
        return f"sweep:{summary['sweep_id']}"
    optuna = summary.get("optuna")
    if isinstance(optuna, Mapping) and optuna.get("study"):
        return f"study:{optuna['study']}"
    return None


def in_group(run_group_name: str | None, group: str) -> bool:
    """Whether a run of group ``run_group_name`` (see :func:`run_group`) is in ``group`` (``sweep:<id>`` or the id
    alone)."""
    return run_group_name is not None and group in (run_group_name, run_group_name.split(":", 1)[1])


def compare_runs(run_dirs: Iterable[str | Path], params: Iterable[str] = ()) -> Any:
    """One row per run with the given config parameters (dotted keys) and the run's metrics."""
    import pandas as pd

    rows = []
    for d in run_dirs:
        run = RunDirectory.open(d)
        row = _row(run)
        try:
            cfg = OmegaConf.create(run.read_config())
        except (DamagedRunError, OSError):
            cfg = OmegaConf.create({})  # the row says why
        for key in params:
            row[key] = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        rows.append(row)
    return pd.DataFrame(rows)


class LoadedRun:
    """A finished (or running) run read back from its directory; nothing in it is executed as code.

    Its ``config.yaml`` is untrusted input: building the run's env and policy instantiates only what the allow-list
    of :class:`~maze_lab.core.utils.factory.TrustPolicy` holds (maze-lab's own classes and env factories, torch.nn
    modules, Gymnasium spaces and env ids) plus the modules or names in ``trust``.

    :param trust: modules or dotted names of your own whose classes the run's config may name (``["my_project"]``).
    """

    def __init__(self, path: str | Path, trust: Iterable[str] | str | None = None,
                 env_factory: Callable[[], Any] | None = None):
        self.directory = RunDirectory.open(path)
        self.path = self.directory.path
        self._env_factory = env_factory
        self.trust = TrustPolicy(trust, source=str(self.directory.config_file),
                                 how_to_allow="load_run(run_dir, trust=['{name}']) or `maze-lab rollout RUN_DIR "
                                              "--trust {name}`")

    @property
    def summary(self) -> dict[str, Any]:
        """Status, seed, versions, metrics; the status as a reader must show it (``died`` where the process that
        trained the run is gone: see :func:`maze_lab.run.run_status.resolve_status`), with ``live``."""
        summary = self.directory.read_summary()
        return {**summary, **resolve_status(self.path, summary)}

    @property
    def status(self) -> str | None:
        """The status a reader shows: ``running``, ``paused``, ``done``, ``stopped``, ``died``, ... (see summary)."""
        return self.summary.get("status")

    @property
    def config(self) -> Any:
        """The composed configuration (data only: nothing in it is instantiated by reading it)."""
        return OmegaConf.create(self.directory.read_config())

    @property
    def stats(self) -> Any:
        """The StatsStore of the run."""
        from maze_lab.core.log_stats.writers import StatsStore

        try:
            return StatsStore.load(self.path)
        except (ValueError, OSError) as err:
            if isinstance(err, FileNotFoundError):
                raise
            raise DamagedRunError(f"the statistics of {self.path} cannot be read: {err}") from err

    def _checked_config(self, sections: tuple[str, ...]) -> dict[str, Any]:
        """``config.yaml`` with every ``_target_`` and wrapper name of ``sections`` checked against the allow-list."""
        cfg = self.directory.read_config()
        for section in sections:
            if section != "wrappers" and not isinstance(cfg.get(section), Mapping):
                raise DamagedRunError(f"{self.directory.config_file}: '{section}' must be a mapping with a '_target_', "
                                      f"got {cfg.get(section)!r}")
        self.trust.check_config(cfg, sections)
        return cfg

    def env_factory(self) -> Any:
        """A factory of the run's env with its configured wrappers (no statistics wrappers); it builds only what the
        allow-list (and ``trust``) permits."""
        cfg = self._checked_config(("env", "wrappers"))
        from maze_lab.run.env_factory import RunEnvFactory, wrappers_in_run_dir

        user_factory = self._env_factory
        if user_factory is None and "_object_" in cfg["env"]:
            user_factory = self._recorded_env_factory(cfg)
        # the run's normalization statistics (a relative statistics_dump) are read from its directory
        return RunEnvFactory(cfg["env"], wrappers_in_run_dir(cfg.get("wrappers") or {}, self.path), user_factory,
                           log_dir=None, trust=self.trust, trust_config=cfg)

    def _recorded_env_factory(self, cfg: Mapping[str, Any]) -> Any:
        """The env factory a run trained with, imported by the name it recorded where the caller trusts its module
        (TrustError otherwise); a factory that could not be recorded by name must be given back."""
        from maze_lab.core.utils.factory import locate

        name = cfg["env"].get("factory")
        if not isinstance(name, str):
            raise ValueError(f"{self.path}: the run used a Python env factory ({cfg['env']['_object_']}) that cannot "
                             f"be imported by name (a lambda, or a function defined in a notebook or script); give it "
                             f"back: load_run(dir, env_factory=make_env)")
        self.trust.check_path(name)
        factory = self.trust.run(lambda: locate(name), cfg)
        self.trust.check_object(name, factory)
        return factory

    def policy(self, which: str = "best") -> Any:
        """Rebuild the model from the config and load the ``best`` or ``last`` weights; returns the policy."""
        from maze_lab.agent.composers import build_model_composer
        from maze_lab.train.trainers.common.checkpoints import CheckpointError, check_weights_fit

        cfg = self._checked_config(("env", "wrappers", "model"))
        if "_object_" in cfg["model"]:
            raise ValueError(f"{self.path}: the run used a Python model object; rebuild it yourself and "
                             f"load {self.directory.best_checkpoint} with load_state_dict")
        path, state = self._checkpoint(which)
        env = self.env_factory().build_env()
        try:
            model = self.trust.run(lambda: build_model_composer(
                cfg["model"], env.action_spaces_dict, env.observation_spaces_dict,
                env.agent_counts_dict).actor_critic(), cfg)
        finally:
            env.close()
        check_weights_fit(model, state.get("model"), str(path),
                          advice=f"The checkpoint and {self.directory.config_file.name} of the run directory do not "
                                 f"belong together (one of them was replaced or edited)")
        try:
            model.load_state_dict(state["model"])
        except (RuntimeError, TypeError, KeyError) as err:
            raise CheckpointError(f"{path} does not fit the model that {self.directory.config_file} describes: "
                                  f"{' '.join(str(err).split())[:500]}") from None
        model.eval()
        return model.policy

    def _checkpoint(self, which: str) -> tuple[Path, dict[str, Any]]:
        """The path and contents of the ``best`` or ``last`` checkpoint (read with weights only)."""
        from maze_lab.train.trainers.common.checkpoints import read_checkpoint

        if which not in ("best", "last"):
            raise ValueError(f"which='{which}' is not a checkpoint; valid: 'best', 'last'")
        path = self.directory.best_checkpoint if which == "best" else self.directory.last_checkpoint
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist (which='{which}'; valid: 'best', 'last')")
        with corrupt_checkpoint_errors(path, self.path):
            return path, read_checkpoint(path)  # a refused or truncated file raises CheckpointError

    def deployment(self, which: str = "best", **kwargs: Any) -> Any:
        """The run's policy (``best`` or ``last`` weights) acting in its env wrapper stack behind an
        :class:`~maze_lab.agent.deployment.AgentDeployment` (``kwargs``: its other parameters)."""
        from maze_lab.agent.deployment import AgentDeployment

        return AgentDeployment.from_run(self, which, **kwargs)

    def normalization_statistics(self, which: str = "best") -> dict[str, Any] | None:
        """The observation normalization statistics saved with the ``best`` or ``last`` checkpoint, as the
        ObservationNormalizationWrapper's ``set_normalization_statistics`` takes them (None: the run had none)."""
        from maze_lab.train.trainers.common.actor_critic import _to_numpy  # the inverse of how checkpoints store them

        stats = self._checkpoint(which)[1].get("normalization_statistics")
        if not stats and which == "best" and self.directory.last_checkpoint.exists():
            # the best checkpoint keeps the weights only; the statistics are fixed once estimated: take the last's
            stats = self._checkpoint("last")[1].get("normalization_statistics")
        return _to_numpy(stats) if stats else None

    def rollout(self, n_episodes: int = 1, which: str = "best", deterministic: bool = True,
                seed: int | None = None, record_trajectory: bool = True, record_frames: bool | None = None,
                on_episode: Any = None) -> Any:
        """Roll out the run's ``best`` or ``last`` policy on its env; episodes are recorded into the run's
        ``trajectories/`` directory (open them with ``TrajectoryViewer(run.directory.trajectory_dir)``), with the
        env's RGB frames where ``record_frames`` (None: where the env renders frames and has no renderer that can
        redraw a recorded state). ``on_episode(reward, length)`` is called as each episode ends."""
        from maze_lab.core.rollout import SequentialRolloutRunner

        if record_trajectory:
            self.checked_trajectory_dir()  # before the policy is built: nothing is written outside the run
        runner = SequentialRolloutRunner(self.env_factory().build_env, self.policy(which), n_episodes,
                                         record_trajectory=record_trajectory,
                                         trajectory_dir=self.directory.trajectory_dir, deterministic=deterministic,
                                         seed=seed, writers=[], record_frames=record_frames,
                                         on_episode=on_episode)
        result = runner.run()
        self.directory.write_summary(last_rollout={"episodes": n_episodes, "policy": which,
                                                   "deterministic": deterministic,
                                                   "mean_reward": result.mean_reward})
        return result

    def checked_trajectory_dir(self) -> Path:
        """The run's ``trajectories/``, where episodes are written and read, after checking that it is (where it
        exists) a directory inside the run: a symlink leading out of the run, or an entry that is not a directory,
        raises DamagedRunError naming it. A missing one is not made here (the first episode written makes it)."""
        path = self.directory.trajectory_dir
        if not os.path.lexists(path):
            return path
        try:
            return check_write_dir(path, self.path, create=False, what="trajectory directory")
        except (UnsafeFileError, FileNotFoundError) as err:  # FileNotFoundError: a symlink leading nowhere
            raise DamagedRunError(str(err)) from None

    def trajectories(self) -> list[Path]:
        """The recorded episode files of the run (oldest first); files that are not regular files inside
        ``trajectories/`` are left out, with a warning naming each (see ``maze_lab.core.trajectory.list_episodes``)."""
        from maze_lab.core.trajectory import list_episodes

        d = self.checked_trajectory_dir()
        return list_episodes(d) if d.exists() else []


_TORCH_ZIP = b"PK\x03\x04"
"""How a checkpoint written by ``torch.save`` begins (a zip archive)."""

_TORCH_LEGACY = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"
"""How a checkpoint of torch's older format begins (a pickle protocol 2 header with torch's magic number)."""


def check_checkpoint_file(path: str | Path, base: str | Path | None = None) -> None:
    """Refuse (CheckpointError, one line naming ``path``) a checkpoint that is not a regular file inside ``base``
    (default: the run directory above ``checkpoints/``, else the directory holding it) or that does not begin as a
    torch checkpoint does: a FIFO, a device, a symlink leading out of the run, an empty or a text file. Only the
    first bytes are read; a missing file raises FileNotFoundError."""
    from maze_lab.train.trainers.common.checkpoints import CheckpointError

    path = Path(path)
    if base is None:
        base = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    try:
        with open_regular(path, base, what="checkpoint") as fh:
            head = read_at_most(fh, len(_TORCH_LEGACY))
    except UnsafeFileError as err:
        raise CheckpointError(str(err)) from None
    if not head:
        raise CheckpointError(f"{path} is empty (0 bytes): it is not a checkpoint and was not loaded")
    if not head.startswith(_TORCH_ZIP) and head != _TORCH_LEGACY:
        raise CheckpointError(f"{path} is not a checkpoint: a checkpoint is a zip archive written by torch.save, this "
                              f"file begins with {head!r}; it was not loaded")


@contextlib.contextmanager
def corrupt_checkpoint_errors(path: str | Path, base: str | Path | None = None) -> Iterator[None]:
    """Check the checkpoint file first (see :func:`check_checkpoint_file`: a FIFO, a device, a symlink leading out
    of the run, an empty or a text file is refused before torch reads it), then report an I/O error of torch's zip
    reader (what a truncated checkpoint of some sizes gives) as the CheckpointError of a corrupt file; a missing or
    unreadable file keeps its own error."""
    from maze_lab.train.trainers.common.checkpoints import CheckpointError

    check_checkpoint_file(path, base)
    try:
        yield
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except OSError as err:
        raise CheckpointError(f"{path} is truncated or corrupt and was not loaded ({type(err).__name__}: "
                              f"{' '.join(str(err).split())[:200]})") from None


def load_run(path: str | Path, trust: Iterable[str] | str | None = None,
             env_factory: Callable[[], Any] | None = None) -> LoadedRun:
    """Open a run directory (refused with a clear message when it is not a maze-lab run).

    :param trust: modules or dotted names of your own that the run's ``config.yaml`` may instantiate (e.g.
        ``["my_project"]``); maze-lab's own classes, torch.nn modules and Gymnasium env ids need no trust. A run
        trained with an env factory of yours (``RunContext(env=make_env)``) recorded its name: trust its module.
    :param env_factory: the env factory to build the run's env with instead of its configuration (for a run whose
        factory cannot be imported by name: a lambda, a function of a notebook); the run's wrappers still apply.
    """
    return LoadedRun(path, trust, env_factory)


# ---- comparing runs as data (used by maze_lab.widgets.comparison; no widgets here) -----------------------------

RUN_TABLE_COLUMNS = tuple(_COLUMNS)
"""The columns of :func:`list_runs` and :func:`compare_runs` before any config parameters."""

RUN_SPECIFIC_KEYS = ("log_base_dir", "run_dir", "input_dir")
"""Config keys that name where a run lives rather than how it trains: never a difference between runs."""


def flatten_config(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested configuration as ``{dotted key: leaf}``; mappings are walked, lists and scalars are leaves
    (an empty mapping is a leaf ``{}``, so that its presence still shows)."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten_config(value, f"{dotted}."))
        else:
            out[dotted] = value
    return out


def _comparable(value: Any) -> Any:
    """A hashable stand-in of a config leaf (lists and mappings compare by their contents)."""
    import json

    if isinstance(value, list | tuple | Mapping):
        return json.dumps(value, sort_keys=True, default=str)
    return value


def differing_params(configs: Iterable[Mapping[str, Any]],
                     ignore: Iterable[str] = RUN_SPECIFIC_KEYS) -> list[str]:
    """The dotted keys whose values are not the same in all of ``configs`` (a key missing from some counts as
    differing); keys in ``ignore`` (and keys under them) are left out. Empty configs (runs whose ``config.yaml``
    could not be read) take no part: they would make every key differ.

    :param configs: nested configurations (as ``RunDirectory.read_config`` returns them) or already flat ones.
    """
    flats = [flatten_config(c) for c in configs if c]
    if len(flats) < 2:
        return []
    skip = tuple(ignore)
    keys = sorted({k for f in flats for k in f})
    missing = object()
    out = []
    for key in keys:
        if any(key == s or key.startswith(f"{s}.") for s in skip):
            continue
        values = {_comparable(f[key]) if key in f else missing for f in flats}
        if len(values) > 1:
            out.append(key)
    return out


def find_run_dirs(base_dir: str | Path, experiment: str | None = None, group: str | None = None) -> list[Path]:
    """The run directories under ``base_dir`` (those holding a ``maze_lab_run.json``), oldest path first; with
    ``experiment``, only those of that experiment (the summary's ``experiment``, or for a summary that cannot be
    read, the name of the directory above the run, as ``<log_base_dir>/<experiment_name>/<timestamp>`` lays them out);
    with ``group``, only the runs of that sweep, notebook batch or Optuna study (see :func:`run_group`)."""
    base = Path(base_dir)
    if not base.is_dir():
        return []
    found = sorted(p.parent for p in base.glob(f"**/{MARKER}"))
    if experiment is None and group is None:
        return found
    out = []
    for path in found:
        try:
            summary = RunDirectory(path).read_summary()
        except (DamagedRunError, OSError):
            summary = None
        if experiment is not None:
            name = summary.get("experiment") if summary is not None else None
            if (name if name is not None else path.parent.name) != experiment:
                continue
        if group is not None and not in_group(run_group(summary) if summary is not None else None, group):
            continue
        out.append(path)
    return out
