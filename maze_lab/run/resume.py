"""Resuming and replacing runs: the checks of a run directory to resume from (``input_dir``), what to do with the
results of an earlier run in the chosen run directory (none, continue, replace), and starting a trainer from the
checkpoints of ``input_dir`` (resume the same trainer, or fine-tune another from its best weights)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf

from maze_lab.core.utils.factory import TrustPolicy, config_names
from maze_lab.run.run_dir import MARKER, RUN_OUTPUTS, DamagedRunError, ExistingRunError, RunDirectory

Previous = Literal["none", "continue", "replace"]
"""What a run does with the results of an earlier run in its directory (see :func:`previous_results`)."""


def check_resume_source(source: RunDirectory, cfg: DictConfig, trust: Iterable[str] | str | None,
                        config_modules: list[str]) -> None:
    """Refuse to resume from a run whose ``config.yaml`` names anything off the allow-list.

    Resuming reads only the earlier run's checkpoint (weights only) and builds everything from this run's own
    configuration; the check keeps one rule for everything read from a run directory. Trusted besides the
    allow-list: ``trust``, the packages of ``config_modules`` and every name this run's configuration uses.
    """
    if not source.config_file.exists():
        raise DamagedRunError(f"{source.path} has no config.yaml; a run directory to resume from holds the "
                              f"config.yaml and checkpoints its run wrote")
    own = [name for _, name in config_names(OmegaConf.to_container(cfg), ("env", "wrappers", "model"))
           if isinstance(name, str)]
    policy = TrustPolicy(trust, source=str(source.config_file),
                         how_to_allow="RunContext(..., trust=['{name}']) or `maze-lab train input_dir=RUN_DIR "
                                      "--trust {name}`")
    policy = policy.extended([*own, *(m.split(".", 1)[0] for m in config_modules)])
    policy.check_config(source.read_config(), ("env", "wrappers", "model"))


def previous_results(run_dir: Path, cfg: DictConfig, overwrite: bool) -> Previous:
    """What to do with the results of an earlier run in ``run_dir``: none there, continue them (this run resumes from
    that directory) or replace them (``overwrite=True``); anything else is refused."""
    existing = RunDirectory(run_dir)
    if not existing.has_results():
        return "none"
    source = cfg.get("input_dir")
    if source and Path(source).resolve() == run_dir.resolve():
        return "continue"
    if overwrite:
        return "replace"
    status = "unknown"
    if existing.summary_file.exists():
        with contextlib.suppress(DamagedRunError, OSError):
            status = existing.read_summary().get("status", "unknown")
    raise ExistingRunError(
        f"run_dir {run_dir} already holds a run (status {status}); training into it would overwrite its statistics "
        f"and checkpoints. Give a new run_dir (or none: a fresh <log_base_dir>/<experiment_name>/<timestamp>), "
        f"resume from it with overrides={{'input_dir': '{run_dir}'}}, or pass overwrite=True to replace it")


def remove_results(run_directory: RunDirectory) -> None:
    """Delete what an earlier run wrote into ``run_directory`` (``overwrite=True``): only maze-lab's own files."""
    import shutil

    for name in (*RUN_OUTPUTS, MARKER):
        target = run_directory.path / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()


def previous_statistics(path: Path) -> Any:
    """The statistics of the run in ``path`` as a StatsStore that goes on appending to ``path`` (None: none yet)."""
    from maze_lab.core.log_stats.writers import StatsStore

    try:
        store = StatsStore.load(path)
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as err:
        raise DamagedRunError(f"cannot continue the statistics of {path}: {err}") from err
    store.persist_to(path)  # writes the earlier epochs first, then every new one
    return store


def start_from_input_dir(trainer: Any, input_dir: str, run_directory: RunDirectory) -> None:
    """Resume the run of ``input_dir`` (same trainer), or fine-tune from its best weights (another trainer); the
    summary in ``run_directory`` records which."""
    from maze_lab.run.runs import corrupt_checkpoint_errors
    from maze_lab.train.trainers.common.checkpoints import check_weights_fit, read_checkpoint

    source = RunDirectory.open(input_dir)
    with corrupt_checkpoint_errors(source.last_checkpoint):
        last = read_checkpoint(source.last_checkpoint, trainer.device)
    origin = last.get("trainer") if isinstance(last.get("trainer"), str) else None
    if origin is not None and origin != type(trainer).__name__:
        # fine-tuning (e.g. PPO from a BC run): the other trainer's best weights, policy and critic as
        # that run has them; epochs, updates, env steps, best reward and optimizer state start afresh,
        # since they count and score another algorithm's training
        weights = source.best_checkpoint if source.best_checkpoint.exists() else source.last_checkpoint
        with corrupt_checkpoint_errors(weights):
            state = read_checkpoint(weights, trainer.device)
        # weights of another env's spaces: one line naming the input run, the parameter and both shapes
        check_weights_fit(trainer.model, state.get("model"), f"input_dir={source.path}: its checkpoint "
                                                             f"{weights.name}")
        trainer.load_state(state, weights_only=True)
        run_directory.write_summary(resumed_from=str(source.path), resumed_epoch=0,
                                    fine_tuned_from={"trainer": origin, "checkpoint": weights.name})
    else:
        check_weights_fit(trainer.model, last.get("model"), f"input_dir={source.path}: its checkpoint "
                                                            f"{source.last_checkpoint.name}")
        trainer.load_state(last)
        run_directory.write_summary(resumed_from=str(source.path), resumed_epoch=trainer.epoch)
