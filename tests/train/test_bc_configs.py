"""Behavioural cloning from configs (``algorithm=bc``) and PPO fine-tuning from the BC run directory (issue 13)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from training_utils import cartpole_factory

from maze_lab.agent import DummyCartPolePolicy
from maze_lab.cli import main
from maze_lab.core.rollout import SequentialRolloutRunner
from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.run.run_context import RunContext
from maze_lab.run.run_dir import RunDirectory
from maze_lab.train.trainers.common.checkpoints import read_checkpoint

BC_EPOCHS = 6
"""Passes over 4 heuristic episodes (about 1,600 training samples): the evaluation reached 500 from epoch 5 on."""


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def heuristic_dir(tmp_path_factory) -> Path:
    """Four CartPole episodes of the heuristic policy (500 steps each on seed 0)."""
    directory = tmp_path_factory.mktemp("heuristic")
    result = SequentialRolloutRunner(cartpole_factory, DummyCartPolePolicy(), n_episodes=4, trajectory_dir=directory,
                                     seed=0, writers=[]).run()
    assert result.episode_rewards == [500.0] * 4
    return directory


def _bc(tmp_path: Path, dataset: Path | str, **more) -> dict:
    return {"algorithm.dataset": str(dataset), "algorithm.lr": 0.01, "algorithm.batch_size": 64,
            "algorithm.eval_every_k_iterations": None, "algorithm.n_eval_episodes": 1, "seed": 0,
            "log_base_dir": str(tmp_path / "outputs"), **more}


def _ppo(tmp_path: Path, **more) -> dict:
    return {"n_epochs": 2, "algorithm.epoch_length": 2, "algorithm.n_rollout_steps": 32, "algorithm.eval_repeats": 2,
            "algorithm.deterministic_eval": True, "seed": 0, "log_base_dir": str(tmp_path / "outputs"), **more}


def _eval_rewards(rc: RunContext) -> list[float]:
    df = rc.stats
    sel = df[(df.prefix == "eval") & (df.event == "reward") & (df.name == "mean")].sort_values("epoch")
    return sel.value.tolist()


@pytest.fixture(scope="module")
def bc_run(heuristic_dir, tmp_path_factory) -> Path:
    """A BC run from configs, trained to the heuristic's level (measured: 6.2 s)."""
    tmp = tmp_path_factory.mktemp("bc_run")
    rc = RunContext(algorithm="bc", overrides=_bc(tmp, heuristic_dir, n_epochs=BC_EPOCHS), silent=True)
    assert rc.training_plan() == (f"training for {BC_EPOCHS} epochs, each a pass over the recorded episodes of "
                                  "algorithm.dataset")
    start = time.perf_counter()
    rc.train()
    print(f"BC from configs: {time.perf_counter() - start:.1f} s, evaluations {_eval_rewards(rc)}")
    assert rc._single().train_env is None  # BC reads its dataset: no training env was built
    rc.close()
    return rc.run_dir


def test_bc_from_configs_clones_the_heuristic_and_writes_its_run_directory(bc_run):
    run = RunDirectory.open(bc_run)
    summary = run.read_summary()
    assert summary["status"] == "done" and summary["epoch"] == BC_EPOCHS and summary["env_steps"] == 0
    # the heuristic gets 500 (the episode limit); the clone gets as far on the evaluation seed
    assert summary["best_eval_reward"] >= 450, summary
    config = run.read_config()
    assert config["algorithm"]["_target_"] == "maze_lab.train.trainers.bc.BCAlgorithmConfig"
    assert run.last_checkpoint.exists() and run.best_checkpoint.exists()
    last = read_checkpoint(run.last_checkpoint)
    assert last["trainer"] == "BC" and last["epoch"] == BC_EPOCHS and "optimizer" in last
    stats = load_stats(bc_run)
    events = set(zip(stats.prefix, stats.event, strict=True))
    assert {("train", "policy_loss"), ("train", "discrete_accuracy"), ("train", "policy_grad_norm"),
            ("validation", "policy_loss"), ("validation", "discrete_accuracy"), ("eval", "reward")} <= events
    val_acc = stats[(stats.prefix == "validation") & (stats.event == "discrete_accuracy")].sort_values("epoch")
    assert len(val_acc) == BC_EPOCHS and val_acc.value.iloc[-1] >= 0.93  # measured 0.96-0.97
    loss = stats[(stats.prefix == "train") & (stats.event == "policy_loss")].sort_values("epoch").value.tolist()
    assert loss[-1] < 0.8 * loss[0]  # measured 0.42 after the first epoch, 0.29 after the sixth


def load_stats(run_dir: Path):
    from maze_lab.core.log_stats.writers import StatsStore

    return StatsStore.load(run_dir).to_dataframe()


def test_ppo_fine_tunes_from_the_bc_run(bc_run, tmp_path):
    scratch = RunContext(algorithm="ppo", overrides=_ppo(tmp_path), silent=True)
    scratch.train()
    scratch.close()
    tuned = RunContext(algorithm="ppo", overrides=_ppo(tmp_path, input_dir=str(bc_run)), silent=True)
    trainer = tuned.trainer
    # the BC run's best weights, policy and critic, reach PPO; its counters and optimizer state do not
    best = read_checkpoint(RunDirectory(bc_run).best_checkpoint)["model"]
    for net, params in trainer.model.state_dict().items():
        for name, value in params.items():
            assert torch.equal(value, best[net][name]), (net, name)
    assert (trainer.epoch, trainer.updates, trainer.env_steps) == (0, 0, 0)
    assert trainer.model_selection.best_epoch is None
    summary = RunDirectory(tuned.run_dir).read_summary()
    assert summary["resumed_from"] == str(bc_run) and summary["resumed_epoch"] == 0
    assert summary["fine_tuned_from"] == {"trainer": "BC", "checkpoint": "state_dict_best.pt"}
    tuned.train()
    tuned.close()
    first_tuned, first_scratch = _eval_rewards(tuned)[0], _eval_rewards(scratch)[0]
    print(f"first evaluation: fine-tuned {first_tuned}, from scratch {first_scratch}")
    assert first_tuned >= 300 and first_scratch <= 100  # measured 438 and 8.5 (seed 0)
    assert trainer.epoch == 2 and trainer.env_steps > 0  # it goes on training with its own counters
    changed = [(net, name) for net, params in trainer.model.state_dict().items() for name, value in params.items()
               if not torch.equal(value, best[net][name])]
    assert changed
    ppo_last = read_checkpoint(RunDirectory(tuned.run_dir).last_checkpoint)
    assert ppo_last["trainer"] == "PPO" and ppo_last["epoch"] == 2


def test_bc_dataset_from_a_run_directory(bc_run, tmp_path):
    """A run directory as the dataset: the episodes its rollouts recorded into trajectories/."""
    source = RunContext(algorithm="ppo", overrides=_ppo(tmp_path, input_dir=str(bc_run)), silent=True)
    source.rollout(n_episodes=2, seed=0)
    source.close()
    rc = RunContext(algorithm="bc", overrides=_bc(tmp_path, source.run_dir, n_epochs=1), silent=True)
    dataset = rc.trainer.dataset
    assert len(dataset) == 2 and dataset.trajectory_dir == source.run_dir / "trajectories"
    rc.close()


def test_bc_train_async_stop_and_resume(heuristic_dir, tmp_path):
    overrides = _bc(tmp_path, heuristic_dir, n_epochs=0, **{"algorithm.n_eval_episodes": 0})
    rc = RunContext(algorithm="bc", overrides=overrides, silent=True)
    assert rc.training_plan().startswith("no n_epochs given: passes over the recorded episodes")
    handle = rc.train_async()
    deadline = time.monotonic() + 60
    while handle.progress["epoch"] < 2 and handle.running and time.monotonic() < deadline:
        handle._done.wait(0.05)  # the run ends only by stop(); wait on the epoch counter
    assert handle.progress["epoch"] >= 2, handle.progress
    handle.stop()
    assert handle.wait() == "stopped"
    stopped_at = rc.trainer.epoch
    rc.close()
    assert read_checkpoint(RunDirectory(rc.run_dir).last_checkpoint)["epoch"] == stopped_at
    resumed = RunContext(algorithm="bc", overrides={**overrides, "input_dir": str(rc.run_dir)}, run_dir=rc.run_dir,
                         silent=True)
    assert resumed.trainer.epoch == stopped_at  # the same trainer: counters and optimizer state go on
    assert RunDirectory(rc.run_dir).read_summary()["resumed_epoch"] == stopped_at
    resumed.train(1)
    resumed.close()
    assert resumed.trainer.epoch == stopped_at + 1
    stats = load_stats(rc.run_dir)
    epochs = sorted(set(stats[(stats.prefix == "train") & (stats.event == "policy_loss")].epoch))
    assert epochs == list(range(1, stopped_at + 2))


def test_cli_trains_bc(heuristic_dir, tmp_path, capsys):
    assert main(["train", "algorithm=bc", f"algorithm.dataset={heuristic_dir}", "n_epochs=1",
                 "algorithm.n_eval_episodes=1", "algorithm.eval_every_k_iterations=null",
                 f"log_base_dir={tmp_path}", "--silent"]) == 0
    out = capsys.readouterr().out
    assert "training for 1 epoch, each a pass over the recorded episodes" in out
    run_dir = next(tmp_path.glob("default/*"))
    summary = RunDirectory(run_dir).read_summary()
    assert summary["status"] == "done" and summary["epoch"] == 1
    assert f"evaluation reward: final {summary['last_eval_reward']:.4g}" in out


@pytest.mark.parametrize("dataset, message", [
    (None, "algorithm.dataset is not set; behavioural cloning needs a directory of recorded episodes"),
    ("missing", r"algorithm.dataset=.*missing: .*missing does not exist; expected a directory of recorded episodes"),
    ("empty", r"algorithm.dataset=.*empty: .*empty holds no recorded episodes \(it is empty\)"),
    ("other", r"holds no recorded episodes \(it holds \['notes.txt'\]\); expected a directory of recorded episodes "
              r"\(\*.trajectory.zip files\)"),
    ("run", r"the run directory .*run has no recorded episodes in trajectories/; record episodes with `maze-lab "
            r"rollout RUN_DIR"),
    ("file", r"algorithm.dataset=.*notes.txt: .* is a file, not a directory"),
])
def test_missing_or_empty_dataset_names_the_key(tmp_path, dataset, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("not an episode")
    (tmp_path / "run").mkdir()
    RunDirectory(tmp_path / "run").write_summary(status="done")
    paths = {"file": tmp_path / "other" / "notes.txt"}
    value = None if dataset is None else str(paths.get(dataset, tmp_path / dataset))
    overrides = {"log_base_dir": str(tmp_path / "outputs")}
    if value is not None:
        overrides["algorithm.dataset"] = value
    with pytest.raises(ConfigurationError, match=message):
        RunContext(algorithm="bc", overrides=overrides, silent=True)
    assert not (tmp_path / "outputs").exists()  # refused before a run directory was made


def test_cli_reports_a_missing_dataset(tmp_path, capsys):
    assert main(["train", "algorithm=bc", f"algorithm.dataset={tmp_path / 'nowhere'}", f"log_base_dir={tmp_path}"]) == 2
    assert "algorithm.dataset=" in capsys.readouterr().err
