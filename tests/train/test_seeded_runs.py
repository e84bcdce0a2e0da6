"""A seeded run gives the same numbers on a quiet and on a loaded machine.

The SAC notebook's training (experiment ``pendulum_sac``, its network sizes, a shorter budget) runs twice: once
blocking on a quiet process, once in the background (``train_async``, the notebook's way) while processes that
spin on every core load the machine and the calling thread keeps working. Every statistic that is not a time and
every weight of the final checkpoint must be equal, bit for bit.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from maze_lab import RunContext

Q_NETWORK = {"_target_": "maze_lab.perception.models.built_in.flatten_concat.FlattenConcatStateActionValueNet",
             "non_lin": "torch.nn.ReLU", "hidden_units": [128, 128]}
OVERRIDES = {"seed": 1234, "n_epochs": 2, "algorithm.epoch_length": 150, "algorithm.batch_size": 64,
             "algorithm.eval_repeats": 2, "algorithm.initial_buffer_size": 100,
             "model.policy.networks.hidden_units": [128, 128], "model.critic.networks": [Q_NETWORK]}
TIMING_EVENTS = ("time", "per_second", "throughput", "elapsed", "duration", "wait")


def _spin(stop: multiprocessing.synchronize.Event) -> None:
    x = 0
    while not stop.is_set():
        for i in range(100_000):
            x += i * i


def _numbers(rc: RunContext) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    stats = rc.stats
    keep = ~stats.event.str.contains("|".join(TIMING_EVENTS)) & ~stats.name.str.contains("|".join(TIMING_EVENTS))
    values = {f"{row.epoch}/{row.prefix}/{row.topic}/{row.event}/{row.name}": float(row.value)
              for row in stats[keep].itertuples()}
    state = torch.load(Path(rc.run_dir) / "checkpoints" / "state_dict_last.pt", weights_only=True)
    weights: dict[str, np.ndarray] = {}

    def collect(prefix: str, value: object) -> None:
        if torch.is_tensor(value):
            weights[prefix] = value.numpy().copy()
        elif isinstance(value, dict):
            for key, inner in value.items():
                collect(f"{prefix}.{key}", inner)

    collect("", {"model": state["model"], "log_alpha": state["log_alpha"]})
    return values, weights


@pytest.mark.slow
def test_seeded_sac_run_is_the_same_quiet_and_under_load(tmp_path: Path) -> None:
    quiet = RunContext(experiment="pendulum_sac", overrides=OVERRIDES, run_dir=tmp_path / "quiet", silent=True)
    quiet.train()
    quiet_values, quiet_weights = _numbers(quiet)
    quiet.close()

    stop = multiprocessing.get_context("spawn").Event()
    spinners = [multiprocessing.get_context("spawn").Process(target=_spin, args=(stop,), daemon=True)
                for _ in range(max(2, os.cpu_count() or 2))]
    for p in spinners:
        p.start()
    try:
        loaded = RunContext(experiment="pendulum_sac", overrides=OVERRIDES, run_dir=tmp_path / "loaded",
                            silent=True)
        handle = loaded.train_async()
        busy = 0.0
        while handle.running:  # the calling thread works too, as a notebook's cells would
            busy += float(np.linalg.norm(np.random.default_rng(len(str(busy))).normal(size=(200, 200)) @
                                         np.ones((200, 200))))
        assert handle.wait() == "done", handle.status
    finally:
        stop.set()
        for p in spinners:
            p.join(timeout=30)
    loaded_values, loaded_weights = _numbers(loaded)
    loaded.close()

    assert len(quiet_values) > 20, sorted(quiet_values)
    assert any("reward" in key for key in quiet_values), sorted(quiet_values)
    differing = {k: (quiet_values[k], loaded_values.get(k)) for k in quiet_values
                 if loaded_values.get(k) != quiet_values[k]}
    assert not differing and set(loaded_values) == set(quiet_values), differing
    assert quiet_weights and set(quiet_weights) == set(loaded_weights)
    for key, value in quiet_weights.items():
        assert np.array_equal(value, loaded_weights[key]), key
