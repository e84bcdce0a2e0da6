"""Notebooks 08 (models), 09 (wrappers and normalization) and 12 (plain-Python A2C), executed with papermill with
their default parameters, asserting on the numbers they printed, the widgets they showed and the runs they wrote;
plus the library behaviour notebook 09 relies on: a relative ``statistics_dump`` lives in the run directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from notebook_utils import (
    cell_with,
    execute_with_summary,
    mime_types,
    parameters_source,
    text_of,
)
from run_utils import TINY

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


# ---- the library: normalization statistics of a run are kept in its run directory ------------------------------
def test_relative_statistics_dump_is_written_to_and_read_from_the_run_directory(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative ``statistics_dump`` of the ObservationNormalizationWrapper names a file in the run directory (as in
    Maze, whose runs write into their output directory), not in the working directory, where it would be picked up
    by every later run started there; a run loaded with ``load_run`` reads the statistics back from it."""
    from maze_lab import RunContext, load_run
    from maze_lab.core.wrappers.observation_normalization import (
        ObservationNormalizationWrapper,
        load_normalization_statistics,
    )

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    wrappers = {"ObservationNormalizationWrapper": {"statistics_dump": "normalization_statistics.json",
                                                    "n_samples": 50, "default_strategy_config": {"axis": [0]}}}
    rc = RunContext(wrappers=wrappers, overrides={**TINY, "log_base_dir": str(tmp_path / "runs")}, silent=True)
    rc.train()
    rc.close()
    dump = rc.run_dir / "normalization_statistics.json"
    assert dump.is_file(), sorted(p.name for p in rc.run_dir.iterdir())
    assert not list(cwd.iterdir()), "nothing may be written to the working directory"
    # the config keeps the relative name: the run directory stays movable
    assert rc.config.wrappers.ObservationNormalizationWrapper.statistics_dump == "normalization_statistics.json"

    env = load_run(rc.run_dir).env_factory().build_env()
    norm = env.get_wrapper(ObservationNormalizationWrapper)
    assert norm.has_all_statistics(), "the loaded run's env must take the statistics from the run directory"
    saved = load_normalization_statistics(dump)
    for stat in ("mean", "std"):
        assert norm.get_normalization_statistics()["observation"][stat].tolist() == saved["observation"][stat].tolist()
    env.close()


# ---- the committed notebooks ---------------------------------------------------------------------------------------
NAMES = ["08_models.ipynb", "09_wrappers_and_normalization.ipynb", "12_plain_python_training.ipynb"]


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_is_clean_and_parameterised(name: str) -> None:
    src = parameters_source(name)
    for param in ("seed", "run_dir", "log_base_dir"):
        assert f"{param} =" in src
    # every default is explained by a comment
    assert all("#" in line for line in src.splitlines() if "=" in line)


# ---- 08: models ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """``08_models.ipynb`` executed once with its defaults: (run directory, executed notebook, summary)."""
    return execute_with_summary("08_models.ipynb", tmp_path_factory)


def _n_params(module) -> int:  # noqa: ANN001
    return sum(p.numel() for p in module.parameters())


@pytest.mark.slow
def test_08_template_models_match_the_built_composers(models: tuple) -> None:
    """The parameter counts and output shapes the notebook printed are those of the template models built here from
    the same config groups (CartPole with ``vector_obs``, the flat Cutting-2D env with ``cutting2d_flat``)."""
    from omegaconf import OmegaConf

    from maze_lab import GymMazeEnv
    from maze_lab.agent.composers import build_model_composer
    from maze_lab.core.utils.factory import Factory
    from maze_lab.run.config import compose_config

    _, nb, summary = models
    env = GymMazeEnv("CartPole-v1")
    composer = build_model_composer(OmegaConf.to_container(compose_config({"model": "vector_obs"}).model),
                                    env.action_spaces_dict, env.observation_spaces_dict)
    assert summary["template_params"] == {"policy": _n_params(composer.policy.networks[0]),
                                          "critic": _n_params(composer.critic.networks[0])}
    assert summary["template_shapes"] == {"action_logits": [2], "value": [1]}

    cfg = compose_config({"env": "cutting2d_flat", "model": "cutting2d_flat"})
    cutting_env = Factory().instantiate(OmegaConf.to_container(cfg.env))
    cutting = build_model_composer(OmegaConf.to_container(cfg.model), cutting_env.action_spaces_dict,
                                   cutting_env.observation_spaces_dict)
    assert summary["cutting_params"] == {"policy": _n_params(cutting.policy.networks[0]),
                                         "critic": _n_params(cutting.critic.networks[0])}
    max_pieces = cutting_env.observation_spaces_dict[0]["inventory"].shape[0]
    assert summary["cutting_shapes"] == {"cut_order": [2], "cut_rotation": [2], "piece_idx": [max_pieces]}
    # both templates are drawn inline, the blocks printed
    assert "image/svg+xml" in mime_types(cell_with(nb, "template.graph()"))
    assert "image/svg+xml" in mime_types(cell_with(nb, "cutting.graph()"))
    printed = text_of(cell_with(nb, "template = build_model_composer("))
    assert "LinearOutputBlock ['latent'] -> ['action'] [(2,)]" in printed
    assert "ShapeError: ConcatenationBlock" in text_of(cell_with(nb, "except ShapeError"))


@pytest.mark.slow
def test_08_custom_model_trains_and_its_graph_widget_shows_its_blocks(models: tuple) -> None:
    """The custom model's run wrote a drawing of policy and critic; the widget shows them, their blocks are the
    notebook's perception blocks, and their parameters add up to those of the built networks."""
    from maze_lab.widgets.model_graph import read_run_graphs

    run_dir, nb, summary = models
    assert summary["run_dir"] == str(run_dir)
    assert WIDGET_VIEW in mime_types(cell_with(nb, "ModelGraphView("))
    graphs, problems = read_run_graphs(run_dir)
    assert not problems and set(graphs) == {"policy_0", "critic_0"}
    layout = ["cart", "pole", "cart_embedding", "pole_embedding", "joint", "latent"]
    assert [b.name for b in graphs["policy_0"].blocks] == summary["graph_blocks"]["policy_0"] == [*layout, "action"]
    assert [b.name for b in graphs["critic_0"].blocks] == summary["graph_blocks"]["critic_0"] == [*layout, "value"]
    for role in ("policy", "critic"):
        assert graphs[f"{role}_0"].total_params == summary["graph_params"][role] == summary["custom_params"][role]
    assert graphs["policy_0"].output_tensors() == {"action": (2,)}
    # a few seconds of PPO: the training reward rises (measured with the defaults: 24.5 -> 256.6 over 4 epochs)
    rewards = summary["train_reward"]
    assert len(rewards) == 4 and rewards[-1] > rewards[0] + 100, rewards


@pytest.mark.slow
def test_08_distribution_mapper_choices(models: tuple) -> None:
    """The defaults per action space and the overrides (space entry, then head entries beating it) are as the
    notebook says; the Gaussian leaves the bounds, the squashed Gaussian and the Beta never do."""
    _, nb, summary = models
    assert summary["default_distributions"] == {
        "gear": "CategoricalProbabilityDistribution", "lights": "BernoulliProbabilityDistribution",
        "steer": "SquashedGaussianProbabilityDistribution", "throttle": "SquashedGaussianProbabilityDistribution",
        "nudge": "DiagonalGaussianProbabilityDistribution"}
    assert summary["custom_distributions"] == {
        **summary["default_distributions"], "throttle": "BetaProbabilityDistribution"}
    assert "action head 'nudge'" in text_of(cell_with(nb, "except ConfigurationError"))
    assert summary["vehicle_logits"] == {"gear": [5], "lights": [2], "nudge": [2], "steer": [4], "throttle": [2]}
    # zero logits: a unit normal, two thirds of it outside [0, 1] (measured 0.664)
    assert 0.5 < summary["outside_bounds"]["gaussian"] < 0.8
    assert summary["outside_bounds"]["squashed_gaussian"] == summary["outside_bounds"]["beta"] == 0.0
    assert "image/png" in mime_types(cell_with(nb, "plt.subplots(1, 3"))
    assert "in the action space: True" in text_of(cell_with(nb, "dist.sample()"))


# ---- 09: wrappers and normalization --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def wrappers(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """``09_wrappers_and_normalization.ipynb`` executed once with its defaults."""
    return execute_with_summary("09_wrappers_and_normalization.ipynb", tmp_path_factory)


@pytest.mark.slow
def test_09_wrapper_stack_and_pre_processing(wrappers: tuple) -> None:
    _, nb, summary = wrappers
    assert "ended by the time limit: True" in text_of(cell_with(nb, "TimeLimitWrapper.wrap(env"))
    assert "same episode: True" in text_of(cell_with(nb, "wrap_env(GymMazeEnv"))
    assert summary["one_hot_shape"] == [16]
    assert "image/png" in mime_types(cell_with(nb, "one_hot_lake = PreProcessingWrapper"))
    # the custom area pre-processor and the flattening replaced the inventory table
    assert summary["cutting_observations"] == {"inventory_size": [1], "ordered_piece": [2],
                                               "inventory-piece_area": [50], "inventory-flatten": [100]}


@pytest.mark.slow
def test_09_normalized_observations_have_mean_zero_std_one(wrappers: tuple) -> None:
    """Fresh random episodes (other seeds than the estimate): each normalized entry has mean about 0 and std about
    1 (measured: means -0.13 .. 0.03, stds 0.92 .. 1.00), while the raw entries' stds span a factor of ten."""
    _, nb, summary = wrappers
    for mean, std in zip(summary["normalized_mean"], summary["normalized_std"], strict=True):
        assert abs(mean) < 0.2 and 0.85 < std < 1.15, summary
    assert max(summary["raw_std"]) > 5 * min(summary["raw_std"])
    assert "image/png" in mime_types(cell_with(nb, "plt.subplots(2, 4"))


@pytest.mark.slow
def test_09_statistics_are_stored_in_the_run_and_reused(wrappers: tuple) -> None:
    import numpy as np

    from maze_lab.core.wrappers.observation_normalization import load_normalization_statistics
    from maze_lab.train.trainers.common.checkpoints import read_checkpoint

    run_dir, _, summary = wrappers
    assert summary["run_dir"] == str(run_dir)
    path = run_dir / "normalization_statistics.json"
    assert summary["statistics_file"] == str(path) and path.is_file()
    saved = load_normalization_statistics(path)["observation"]
    np.testing.assert_allclose(saved["mean"], summary["estimated_mean"], atol=1e-5)
    np.testing.assert_allclose(saved["std"], summary["estimated_std"], atol=1e-5)
    in_checkpoint = read_checkpoint(run_dir / "checkpoints" / "state_dict_last.pt")["normalization_statistics"]
    np.testing.assert_allclose(np.asarray(in_checkpoint["observation"]["std"]), saved["std"], rtol=1e-6)
    assert summary["same_as_estimate"] is True and summary["loaded_without_sampling"] is True


@pytest.mark.slow
def test_09_distribution_widget_shows_original_and_normalized(wrappers: tuple) -> None:
    _, nb, summary = wrappers
    assert WIDGET_VIEW in mime_types(cell_with(nb, "DistributionsView(rc)"))
    panels = summary["widget_panels"]
    for dim in range(4):
        assert any(f"[{dim}], original" in p for p in panels), panels
        assert any(f"[{dim}], processed" in p for p in panels), panels
    # what the policy received was normalized: no entry keeps the raw spread of the pole angle (std about 0.09)
    assert all(0.3 < std < 3.0 for std in summary["widget_processed_std"]), summary["widget_processed_std"]


# ---- 12: plain Python training -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def plain_python(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """``12_plain_python_training.ipynb`` executed once with its defaults."""
    return execute_with_summary("12_plain_python_training.ipynb", tmp_path_factory)


@pytest.mark.slow
def test_12_plain_python_a2c_learns_cartpole(plain_python: tuple) -> None:
    """A2C built by hand reaches the threshold on the default seed: the best weights, saved and loaded into fresh
    networks, balance the pole in 10 seeded episodes (measured: 500.0 in every episode; best evaluation 500.0 in
    epoch 6; a random policy gets about 20)."""
    run_dir, nb, summary = plain_python
    assert summary["final_reward"] >= 400, summary
    assert summary["best_eval_reward"] >= 400, summary
    assert summary["epochs"] == 10 and summary["env_steps"] == 20_000
    assert summary["eval_curve"][0] < 100  # it starts from a policy that does not balance
    assert "equal to the best state: True" in text_of(cell_with(nb, "load_state_dict(torch.load("))


@pytest.mark.slow
def test_12_weights_logs_and_curve(plain_python: tuple) -> None:
    run_dir, nb, summary = plain_python
    params = Path(summary["params_file"])
    assert params == run_dir / "params.pt" and params.is_file()
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert "application/vnd.plotly.v1+json" in mime_types(cell_with(nb, "px.line("))
    assert "policy_loss" in text_of(cell_with(nb, "ActorCriticEvents"))
    assert "observation (20, 4, 4)   -> action logits (20, 4, 2)" in text_of(cell_with(nb, "TorchModelBlock(in_keys"))
