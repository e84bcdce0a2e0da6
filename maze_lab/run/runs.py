"""The runs API: list run directories as a DataFrame, compare them, load one back (config, stats, policy)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from maze_lab.run.run_dir import MARKER, RunDirectory


def list_runs(base_dir: str | Path | None = None) -> Any:
    """All run directories under ``base_dir`` (newest first) with status, seed and metrics.

    :param base_dir: default: the default location of runs (``$MAZE_LAB_OUTPUTS``, else ``<project root>/outputs``;
        see ``maze_lab.run.run_dir.default_outputs_dir``), where the CLI and notebooks put them.
    """
    import pandas as pd

    from maze_lab.run.run_dir import default_outputs_dir

    base = Path(base_dir) if base_dir is not None else default_outputs_dir()
    rows = [_row(RunDirectory(p.parent)) for p in base.glob(f"**/{MARKER}")] if base.exists() else []
    df = pd.DataFrame(rows, columns=_COLUMNS)
    return df.sort_values("created", ascending=False).reset_index(drop=True) if not df.empty else df


_COLUMNS = ["run_dir", "experiment", "status", "created", "seed", "algorithm", "env", "epoch", "env_steps",
            "best_eval_reward", "last_eval_reward", "final_train_reward"]


def _row(run: RunDirectory) -> dict[str, Any]:
    summary = run.read_summary()
    algorithm = env = None
    if run.config_file.exists():
        cfg = OmegaConf.load(run.config_file)
        algorithm = str(OmegaConf.select(cfg, "algorithm._target_", default="")).rsplit(".", 1)[-1] or None
        env = OmegaConf.select(cfg, "env.name", default=None) or \
            str(OmegaConf.select(cfg, "env._target_", default="")).rsplit(".", 1)[-1] or None
    return {"run_dir": str(run.path), "experiment": summary.get("experiment"), "status": summary.get("status"),
            "created": summary.get("created"), "seed": summary.get("seed"), "algorithm": algorithm, "env": env,
            "epoch": summary.get("epoch"), "env_steps": summary.get("env_steps"),
            "best_eval_reward": summary.get("best_eval_reward"), "last_eval_reward": summary.get("last_eval_reward"),
            "final_train_reward": summary.get("final_train_reward")}


def compare_runs(run_dirs: Iterable[str | Path], params: Iterable[str] = ()) -> Any:
    """One row per run with the given config parameters (dotted keys) and the run's metrics."""
    import pandas as pd

    rows = []
    for d in run_dirs:
        run = RunDirectory.open(d)
        row = _row(run)
        cfg = OmegaConf.load(run.config_file)
        for key in params:
            row[key] = OmegaConf.select(cfg, key, default=None)
        rows.append(row)
    return pd.DataFrame(rows)


class LoadedRun:
    """A finished (or running) run read back from its directory; nothing in it is executed as code."""

    def __init__(self, path: str | Path):
        self.directory = RunDirectory.open(path)
        self.path = self.directory.path

    @property
    def summary(self) -> dict[str, Any]:
        """Status, seed, versions, metrics."""
        return self.directory.read_summary()

    @property
    def config(self) -> Any:
        """The composed configuration."""
        return OmegaConf.load(self.directory.config_file)

    @property
    def stats(self) -> Any:
        """The StatsStore of the run."""
        from maze_lab.core.log_stats.writers import StatsStore

        return StatsStore.load(self.path)

    def env_factory(self) -> Any:
        """A factory of the run's env with its configured wrappers (no statistics wrappers)."""
        cfg = self.config
        if "_object_" in cfg.env:
            raise ValueError(f"{self.path}: the run used a Python env factory ({cfg.env._object_}); pass your "
                             f"factory to SequentialRolloutRunner yourself")
        from maze_lab.run.run_context import _EnvFactory

        return _EnvFactory(OmegaConf.to_container(cfg.env), OmegaConf.to_container(cfg.wrappers) or {}, None,
                           log_dir=None)

    def policy(self, which: str = "best") -> Any:
        """Rebuild the model from the config and load the ``best`` or ``last`` weights; returns the policy."""
        import torch

        from maze_lab.perception.composers import build_model_composer

        if which not in ("best", "last"):
            raise ValueError(f"which='{which}' is not a checkpoint; valid: 'best', 'last'")
        cfg = self.config
        if "_object_" in cfg.model:
            raise ValueError(f"{self.path}: the run used a Python model object; rebuild it yourself and "
                             f"load {self.directory.best_checkpoint} with load_state_dict")
        env = self.env_factory().build_env()
        composer = build_model_composer(OmegaConf.to_container(cfg.model), env.action_spaces_dict,
                                        env.observation_spaces_dict, env.agent_counts_dict)
        model = composer.actor_critic()
        path = self.directory.best_checkpoint if which == "best" else self.directory.last_checkpoint
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist (which='{which}'; valid: 'best', 'last')")
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        model.eval()
        env.close()
        return model.policy

    def rollout(self, n_episodes: int = 1, which: str = "best", deterministic: bool = True,
                seed: int | None = None, record_trajectory: bool = True) -> Any:
        """Roll out the run's ``best`` or ``last`` policy on its env; episodes are recorded into the run's
        ``trajectories/`` directory (open them with ``TrajectoryViewer(run.directory.trajectory_dir)``)."""
        from maze_lab.core.rollout import SequentialRolloutRunner

        runner = SequentialRolloutRunner(self.env_factory().build_env, self.policy(which), n_episodes,
                                         record_trajectory=record_trajectory,
                                         trajectory_dir=self.directory.trajectory_dir, deterministic=deterministic,
                                         seed=seed, writers=[])
        result = runner.run()
        self.directory.write_summary(last_rollout={"episodes": n_episodes, "policy": which,
                                                   "deterministic": deterministic,
                                                   "mean_reward": result.mean_reward})
        return result

    def trajectories(self) -> list[Path]:
        """The recorded episode files of the run (oldest first)."""
        from maze_lab.core.trajectory import list_episodes

        d = self.directory.trajectory_dir
        return list_episodes(d) if d.exists() else []


def load_run(path: str | Path) -> LoadedRun:
    """Open a run directory (refused with a clear message when it is not a maze-lab run)."""
    return LoadedRun(path)
