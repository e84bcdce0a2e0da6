"""The results of a study: the table of its trials (:func:`trials_table`, :func:`format_table`), the best trial's
``best_config.yaml`` and ``best_params.yaml`` in the study directory, and :class:`OptimizeResult`, what
:func:`maze_lab.run.optimize.optimize` returns."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from maze_lab.run.search_space import SearchSpace
from maze_lab.run.study import TRIAL_DIR, study_entry


@dataclasses.dataclass
class OptimizeResult:
    """What :func:`~maze_lab.run.optimize.optimize` returns: the study, the best trial's values and the files
    written."""

    study: Any
    study_dir: Path
    table: Any
    """One row per trial: number, state, value, the searched keys, epochs, run directory."""
    best_params: dict[str, Any] | None
    best_value: float | None
    best_trial: int | None
    best_config_path: Path | None
    best_params_path: Path | None
    ran: list[int]
    """The numbers of the trials this call ran."""

    @property
    def run_dirs(self) -> list[Path]:
        """The run directories of all trials of the study (for RunComparison)."""
        return [Path(p) for p in self.table["run_dir"] if isinstance(p, str) and Path(p).is_dir()]


def finish_study(study: Any, spec: SearchSpace, study_dir: Path, ran: list[int]) -> OptimizeResult:
    """Write ``best_config.yaml`` and ``best_params.yaml`` of the best trial and build the table of trials."""
    from maze_lab.run.run_dir import RunDirectory

    table = trials_table(study, list(spec.params), study_dir)
    try:
        best = study.best_trial
    except ValueError:  # no trial completed
        return OptimizeResult(study, study_dir, table, None, None, None, None, None, ran)
    # the trial's directory in this study directory (study.db records where it was made: a copied study moved)
    run_dir = RunDirectory(study_entry(study_dir, TRIAL_DIR.format(best.number), "trial directory", directory=True))
    header = (f"# best trial {best.number} of study {study.study_name} ({spec.study.objective} {best.value:g}); "
              f"run directory {run_dir.path}\n")
    config_path = study_entry(study_dir, "best_config.yaml", "best_config.yaml")
    config = OmegaConf.create(run_dir.read_config())
    config_path.write_text(f"{header}# the composed configuration of that run\n{OmegaConf.to_yaml(config)}")
    params_path = study_entry(study_dir, "best_params.yaml", "best_params.yaml")
    params_path.write_text(f"{header}# the searched values, usable as overrides\n"
                           f"{yaml.safe_dump(dict(best.params), sort_keys=False)}")
    return OptimizeResult(study, study_dir, table, dict(best.params), float(best.value), best.number, config_path,
                          params_path, ran)


def trials_table(study: Any, keys: list[str], study_dir: Path | None = None) -> Any:
    """One row per trial: number, state, value, the searched keys, epochs trained, run directory, error.

    :param study_dir: the study directory: the run directories are its ``trial_<number>`` (default: where the study
        recorded them, which is elsewhere for a study that was copied or moved)."""
    import pandas as pd

    rows = []
    for t in study.get_trials(deepcopy=False):
        row = {"trial": t.number, "state": t.state.name.lower(), "value": t.value}
        if t.value is None and t.intermediate_values:  # a pruned or failed trial: its last reported reward
            row["value"] = t.intermediate_values[max(t.intermediate_values)]
        row.update({k: t.params.get(k) for k in keys})
        row["epochs"] = t.user_attrs.get("epochs")
        row["run_dir"] = str(study_dir / TRIAL_DIR.format(t.number)) if study_dir is not None else \
            t.user_attrs.get("run_dir")
        row["error"] = t.user_attrs.get("error")
        rows.append(row)
    return pd.DataFrame(rows, columns=["trial", "state", "value", *keys, "epochs", "run_dir", "error"])


def format_table(table: Any) -> str:
    """The table of trials as text (the error column only where a trial failed)."""
    if table.empty:
        return "(no trials)"
    shown = table if table["error"].notna().any() else table.drop(columns=["error"])
    return shown.to_string(index=False, float_format=lambda v: f"{v:.4g}")
