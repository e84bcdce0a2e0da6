"""The runs of a grid outside this process: :func:`train_config_in_worker` trains one composed config in a local
worker process or a Ray task, and :func:`train_configs_as_ray_tasks` trains a grid's configs as Ray tasks (the jobs
themselves are run by :mod:`maze_lab.run.ray_tasks`). ``RunContext(multirun=True)`` and ``maze-lab sweep`` use
them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from maze_lab.distributed.ray_runtime import ensure_ray
from maze_lab.run.handle import RunFailedError
from maze_lab.run.ray_tasks import JobLost, mark_lost, portable_error, run_as_ray_tasks
from maze_lab.run.run_dir import new_run_dir
from maze_lab.run.training_run import _Run


def train_config_in_worker(config: dict, n_epochs: int | None, run_dir: str | None = None,
                           summary: dict[str, Any] | None = None) -> tuple[str, BaseException | None]:
    """One run of a grid in a worker process or a Ray task: train a composed config (a plain dict) into ``run_dir``
    (None: a new one); returns the run directory and the error where the run failed (its summary records the
    traceback; an error that cannot be sent back comes as a RunFailedError with its text).

    :param summary: fields for the run's summary (the sweep id and index).
    """
    import torch

    threads = config.get("torch_threads", 1)
    # grid workers share the machine: one thread each unless the config asks for more
    torch.set_num_threads(1 if threads is None else int(threads))
    run = _Run(OmegaConf.create(config), {}, None if run_dir is None else Path(run_dir), silent=True, summary=summary)
    try:
        run.train(n_epochs)
    except Exception as err:  # noqa: BLE001 - reported to the grid, which goes on with the other runs
        return str(run.run_directory.path), portable_error(err, RunFailedError)
    finally:
        run.close()
    return str(run.run_directory.path), None


def train_configs_as_ray_tasks(configs: Sequence[dict], n_epochs: int | None, n_jobs: int,
                               address: str | None = None, summaries: Sequence[dict] | None = None,
                               group: str | None = None, on_done: Callable[[int, Any], None] | None = None
                               ) -> list[tuple[Path, BaseException | None]]:
    """Train each composed config (plain dicts) as a Ray task (:func:`train_config_in_worker`, as local
    grid workers do), ``n_jobs`` at a time; returns per config its run directory and its error (None where it
    trained). ``summaries``: per config, fields for its run's summary (the sweep id and index); ``on_done``: see
    :func:`~maze_lab.run.ray_tasks.run_as_ray_tasks`.

    The run directories are made here, before the tasks start, so that a task whose worker dies still has its run
    directory, which is then marked ``failed`` with the reason. Interrupted, the runs in flight are recorded
    ``interrupted`` and the directories of those that never started are removed (see
    :func:`~maze_lab.run.ray_tasks.run_as_ray_tasks`).
    """
    # Ray first: an address that cannot be joined leaves no empty run directories behind
    ensure_ray(address, num_cpus=max(n_jobs, os.cpu_count() or 1) if address is None else None)
    run_dirs = [new_run_dir(cfg["log_base_dir"], cfg["experiment_name"]) for cfg in configs]
    summaries = list(summaries) if summaries is not None else [{} for _ in configs]
    try:
        results = run_as_ray_tasks(train_config_in_worker,
                                   [(cfg, n_epochs, str(path), summary) for cfg, path, summary in
                                    zip(configs, run_dirs, summaries, strict=True)], n_jobs, address,
                                   run_dir_of=lambda index: run_dirs[index], what="sweep", group=group,
                                   on_done=on_done)
    except BaseException:
        for path in run_dirs:  # a run that never started leaves no empty directory behind (rmdir: only empty ones)
            with contextlib.suppress(OSError):
                path.rmdir()
        raise
    out: list[tuple[Path, BaseException | None]] = []
    for path, result in zip(run_dirs, results, strict=True):
        if isinstance(result, JobLost):
            mark_lost(path, str(result))
            out.append((path, result))
        else:
            out.append((Path(result[0]), result[1]))
    return out

