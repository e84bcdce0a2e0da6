"""notebooks/10_imitation_and_fine_tuning.ipynb (record the heuristic, behavioural cloning, PPO fine-tuning) and
notebooks/11_experiments.ipynb (config groups, overrides, experiment files, a grid, the comparison widget, papermill
runs of train.ipynb, resuming a run): each executed once with its defaults, asserting on what it printed and wrote."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from conf_options import listed_options
from notebook_utils import (
    cell_with,
    execute_with_summary,
    mime_types,
    parameters_source,
    text_of,
)

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PLOTLY = "application/vnd.plotly.v1+json"
IMITATION = "10_imitation_and_fine_tuning.ipynb"
EXPERIMENTS = "11_experiments.ipynb"


@pytest.mark.parametrize("name, names", [
    (IMITATION, ("n_episodes", "bc_epochs", "ppo_epochs", "seed", "run_dir", "log_base_dir")),
    (EXPERIMENTS, ("n_epochs", "epoch_length", "lrs", "optimization_epochs", "notebook_algorithms", "seed",
                   "run_dir", "log_base_dir")),
])
def test_committed_notebook_is_clean_and_parameterised(name: str, names: tuple[str, ...]) -> None:
    src = parameters_source(name)
    for param in names:
        assert f"{param} =" in src, param


def _values(array: object) -> list:
    """The values of a plotly array in a figure's JSON: a list, or plotly's base64 typed array (``bdata``)."""
    if isinstance(array, dict) and "bdata" in array:
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)


# ---- 10: imitation learning and fine-tuning ------------------------------------------------------------------
@pytest.fixture(scope="module")
def imitation(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """The imitation notebook executed once with its defaults: (run directory, executed notebook, summary)."""
    return execute_with_summary(IMITATION, tmp_path_factory)


@pytest.mark.slow
def test_10_clone_matches_the_heuristic(imitation: tuple) -> None:
    run_dir, nb, summary = imitation
    assert summary["run_dir"] == str(run_dir)
    # the greedy heuristic is optimal on the simple problem (31 raw pieces: reward -30); the untrained network picks
    # pieces the order does not fit into at every step (-360 with the default seed)
    assert summary["heuristic_reward"] == -30.0
    assert summary["untrained_reward"] <= -100.0, summary
    # the clone plays like the teacher: measured -30.0 (the optimum) from BC epoch 19 of 25 on, accuracy 1.0 per head
    assert summary["cloned_reward"] >= summary["heuristic_reward"] - 1.0, summary
    assert summary["bc_best_reward"] >= summary["heuristic_reward"] - 1.0, summary
    assert set(summary["bc_accuracy"]) == {"0/piece_idx", "1/cut_rotation", "1/cut_order"}
    assert min(summary["bc_accuracy"].values()) >= 0.9, summary
    assert summary["teacher_episodes"] == 4
    assert "heuristic: -30.0" in text_of(cell_with(nb, "clone = SequentialRolloutRunner("))


@pytest.mark.slow
def test_10_fine_tuning_keeps_the_clone_and_beats_scratch(imitation: tuple) -> None:
    _, nb, summary = imitation
    assert summary["ppo_status"] == "done" and summary["ppo_epochs"] == 8
    fine = summary["fine_tuned_rewards"]
    assert len(fine) == 8
    # fine-tuning starts at the clone's level and keeps it within one raw piece: measured -30 in the three burn-in
    # epochs, then -31 (PPO's first policy updates trade one raw piece; the teacher is already optimal here)
    assert fine[0] >= summary["heuristic_reward"] - 1.0, fine
    assert min(fine) >= summary["heuristic_reward"] - 1.0, fine
    # PPO from scratch, same settings and budget, has not learned to pick fitting pieces: measured -360 throughout
    assert summary["fine_tuned_final"] > summary["scratch_rewards"][-1] + 100, summary
    assert "fine-tuning done after 8 epochs" in text_of(cell_with(nb, "await handle.wait_async()"))


@pytest.mark.slow
def test_10_both_phases_wrote_their_statistics(imitation: tuple) -> None:
    from maze_lab import load_run
    from maze_lab.core.log_stats.writers import StatsStore

    run_dir, _, summary = imitation
    bc = StatsStore.load(run_dir / "imitation").to_dataframe()
    assert {"train", "validation", "eval"} <= set(bc.prefix)
    assert bc[bc.prefix == "train"].epoch.max() == summary["bc_epochs"] == 25
    val_loss = bc[(bc.prefix == "validation") & (bc.event == "policy_loss")]
    assert set(val_loss.name) == {"0", "1"} and len(val_loss) == 2 * summary["bc_epochs"]
    assert val_loss[val_loss.epoch == 25].value.max() < val_loss[val_loss.epoch == 1].value.min()
    # epoch 0 is the untrained network's evaluation, then one per BC epoch
    evals = bc[(bc.prefix == "eval") & (bc.event == "reward") & (bc.name == "mean")]
    assert sorted(evals.epoch.unique()) == list(range(26))
    assert (run_dir / "imitation" / "checkpoints" / "state_dict_best.pt").is_file()
    assert len(list((run_dir / "imitation" / "trajectories").glob("*.trajectory.zip"))) == 4

    for path in (run_dir, run_dir / "from_scratch"):
        run = load_run(path)
        assert run.summary["status"] == "done" and run.summary["epoch"] == 8
        stats = run.stats.to_dataframe()
        ppo_evals = stats[(stats.prefix == "eval") & (stats.event == "reward") & (stats.name == "mean")]
        assert sorted(ppo_evals.epoch.unique()) == list(range(1, 9))
    # the fine-tuning run trained the cloned model object it was given
    assert "_object_" in load_run(run_dir).config.model


@pytest.mark.slow
def test_10_pictures_and_widgets_were_shown(imitation: tuple) -> None:
    _, nb, summary = imitation
    assert WIDGET_VIEW in mime_types(cell_with(nb, "TrajectoryViewer(files[0])"))
    assert WIDGET_VIEW in mime_types(cell_with(nb, "TrainingDashboard(handle)"))
    figure = cell_with(nb, "make_subplots(")
    assert PLOTLY in mime_types(figure)
    data = next(o["data"][PLOTLY] for o in figure["outputs"] if PLOTLY in o.get("data", {}))
    assert [t["name"] for t in data["data"]] == ["cloned policy", "PPO from the clone", "PPO from scratch"]
    assert len(_values(data["data"][0]["x"])) == 26 and len(_values(data["data"][1]["x"])) == 9
    # the fine-tuned curve starts (PPO epoch 0) at the clone's reward, the one from scratch at the untrained one's
    assert _values(data["data"][1]["y"])[0] == summary["cloned_reward"]
    assert _values(data["data"][2]["y"])[0] == summary["untrained_reward"]
    assert "text/html" in mime_types(cell_with(nb, "bc_table = "))


# ---- 11: experiments ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def experiments(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """The experiments notebook executed once with its defaults: (run directory, executed notebook, summary)."""
    return execute_with_summary(EXPERIMENTS, tmp_path_factory)


@pytest.mark.slow
def test_11_overrides_and_refusals(experiments: tuple) -> None:
    _, nb, summary = experiments
    assert summary["same_config_from_cli"] is True
    key_error, option_error = summary["refusals"]
    assert key_error.startswith("unknown config key 'algorithm.learning_rate'; valid keys in 'algorithm': ")
    assert " lr, " in key_error
    assert option_error.startswith("unknown option 'rainbow' for config group 'algorithm'; "
                                   f"valid options: {listed_options('algorithm')}")
    assert "ConfigurationError" in text_of(cell_with(nb, "except ConfigurationError as err"))
    # the experiment file's changes are listed against the defaults
    changes = text_of(cell_with(nb, "differing_params([default_config, experiment_config])"))
    assert "runner.concurrency" in changes and "experiment" in changes and "default -> cartpole_ppo" in changes
    assert "cartpole_tiny" in text_of(cell_with(nb, "available_options([\"my_experiments\"])"))


@pytest.mark.slow
def test_11_grid_made_one_run_per_combination(experiments: tuple) -> None:
    from omegaconf import OmegaConf

    run_dir, _, summary = experiments
    assert summary["run_dir"] == str(run_dir)
    assert summary["grid_keys"] == ["algorithm.lr", "algorithm.n_optimization_epochs"]
    assert summary["grid_status"] == ["done"]
    runs = summary["grid_runs"]
    dirs = {Path(r["run_dir"]) for r in runs}
    assert len(dirs) == 4 and all(d.parent == run_dir / "grid" / "cartpole_tiny" for d in dirs)
    found = set()
    for path in dirs:
        cfg = OmegaConf.load(path / "config.yaml")
        found.add((cfg.algorithm.lr, cfg.algorithm.n_optimization_epochs))
        assert cfg.experiment_name == "cartpole_tiny" and cfg.n_epochs == 2
        assert (path / "checkpoints" / "state_dict_last.pt").is_file()
    assert found == set(itertools.product([0.001, 0.0003], [4, 10]))


@pytest.mark.slow
def test_11_comparison_lists_exactly_the_differing_hyperparameters(experiments: tuple) -> None:
    from maze_lab.widgets.comparison import METRIC_COLUMNS

    _, nb, summary = experiments
    assert WIDGET_VIEW in mime_types(cell_with(nb, "RunComparison(table)"))
    assert summary["comparison_params"] == ["algorithm.lr", "algorithm.n_optimization_epochs"]
    assert summary["comparison_rows"] == 4
    shown = text_of(cell_with(nb, "compared = comparison.table()"))
    header = shown.splitlines()[0]
    assert "hyperparameters that differ: ['algorithm.lr', 'algorithm.n_optimization_epochs']" in header
    # the table's columns: the metrics, then exactly the grid keys (nothing the runs share, e.g. seed or gamma)
    for column in METRIC_COLUMNS:
        assert column in shown
    assert "algorithm.gamma" not in shown and "seed" not in shown


@pytest.mark.slow
def test_11_papermill_runs_applied_their_parameters(experiments: tuple) -> None:
    from omegaconf import OmegaConf

    run_dir, nb, summary = experiments
    runs = summary["notebook_runs"]
    assert [r["algorithm"] for r in runs] == ["ppo", "a2c"]
    for r in runs:
        path = Path(r["run_dir"])
        assert path.parent == run_dir / "papermill" / "notebook"
        executed = Path(r["executed"])
        assert executed == path / "train.ipynb" and executed.is_file()
        cfg = OmegaConf.load(path / "config.yaml")
        expected = {"ppo": "PPOAlgorithmConfig", "a2c": "A2CAlgorithmConfig"}[r["algorithm"]]
        assert cfg.algorithm._target_.endswith(expected) and r["target"] == cfg.algorithm._target_
        assert cfg.n_epochs == 2 and cfg.algorithm.n_rollout_steps == 32
        executed_nb = json.loads(executed.read_text())
        injected = [c for c in executed_nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
        assert len(injected) == 1 and f'algorithm = "{r["algorithm"]}"' in "".join(injected[0]["source"])
        assert "run done" in text_of(cell_with(executed_nb, "await handle.wait_async()"))
        assert json.loads((path / "maze_lab_run.json").read_text())["status"] == "done"
    assert 'algorithm = "a2c"' in text_of(cell_with(nb, "injected-parameters"))


@pytest.mark.slow
def test_11_resumed_run_continued_from_the_first(experiments: tuple) -> None:
    from maze_lab import load_run

    _, nb, summary = experiments
    resumed = summary["resumed"]
    first = load_run(resumed["from"])
    assert resumed["start_epoch"] == first.summary["epoch"] == 2
    assert resumed["same_weights"] is True
    assert resumed["epochs"] == [3, 4]
    run = load_run(resumed["run_dir"])
    assert run.summary["status"] == "done" and run.summary["epoch"] == 4
    assert run.summary["resumed_from"] == resumed["from"] and run.summary["resumed_epoch"] == 2
    assert sorted(run.stats.to_dataframe().epoch.unique()) == [3, 4]
    assert "same weights as its last checkpoint: True" in text_of(cell_with(nb, "resumed.train()"))


# ---- library: the greedy heuristic acts on a vector env's batched observations -------------------------------------
def test_greedy_policy_evaluates_on_a_vector_env() -> None:
    """A RolloutEvaluator (what BC and the trainers evaluate with) hands a policy the observations of all its envs at
    once; the heuristic answers each row as it answers a single observation (it raised a TypeError before)."""
    from cutting2d_training import OPTIMUM_REWARD, masked_env_factory

    from maze_lab.examples.cutting2d import GreedyPolicy
    from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
    from maze_lab.train.vector_env import SequentialVectorEnv

    env = SequentialVectorEnv([masked_env_factory] * 2, logging_prefix="eval", writers=[])
    try:
        reward = RolloutEvaluator(env, n_episodes=2, deterministic=True).evaluate(GreedyPolicy(), seed=0)
    finally:
        env.close()
    assert reward == OPTIMUM_REWARD

    single = masked_env_factory()
    obs, _ = single.reset(seed=0)
    batch = {k: np.stack([v, v]) for k, v in obs.items()}
    action = GreedyPolicy().compute_action(batch)
    assert set(action) == {"piece_idx"} and action["piece_idx"].shape == (2,)
    assert action["piece_idx"].tolist() == [GreedyPolicy().compute_action(obs)["piece_idx"]] * 2
