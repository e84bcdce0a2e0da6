"""notebooks/06_cutting2d_training.ipynb (PPO on the masked Cutting-2D env, the cockpit, the trained policy against
the greedy heuristic, both replayed in the trajectory viewer) and notebooks/07_structured_and_masked.ipynb (the
structured env, step-conditional masks and what they do to the action distribution, training to the optimum, the
distribution widget): each executed once with its defaults, asserting on its summary line, its outputs and the run
directory it wrote."""

from __future__ import annotations

import pytest
from notebook_utils import (
    cell_with,
    cells,
    execute_with_summary,
    mime_types,
    parameters_source,
    text_of,
)

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PLOTLY = "application/vnd.plotly.v1+json"
TRAINING = "06_cutting2d_training.ipynb"
MASKED = "07_structured_and_masked.ipynb"
OPTIMUM = -30.0
"""Reward of the optimum of the simple problem: 31 raw pieces in 180 steps, the first one free."""


@pytest.fixture(scope="module")
def training(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """06 executed once with its defaults: (run directory, executed notebook, summary)."""
    return execute_with_summary(TRAINING, tmp_path_factory)


@pytest.fixture(scope="module")
def masked(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """07 executed once with its defaults: (run directory, executed notebook, summary)."""
    return execute_with_summary(MASKED, tmp_path_factory)


@pytest.mark.parametrize("name", [TRAINING, MASKED])
def test_committed_notebook_is_clean_and_parameterised(name: str) -> None:
    src = parameters_source(name)
    for param in ("n_epochs", "seed", "run_dir", "log_base_dir"):
        assert f"{param} =" in src
    for line in src.strip().splitlines():
        assert "#" in line, f"every default explains itself in a comment: {line!r}"


# ---- 06: training, the greedy heuristic, the viewer ----------------------------------------------------------------
@pytest.mark.slow
def test_06_trained_policy_reaches_the_optimum(training: tuple) -> None:
    run_dir, nb, summary = training
    assert summary["status"] == "done" and summary["epochs"] == 6
    # the untrained deterministic policy of the default seed cuts every order from a fresh raw piece (-180)
    assert summary["untrained_reward"] <= 2 * OPTIMUM, summary
    # measured: the evaluation after the last epoch is the optimum, -30 (reached after the first update)
    assert summary["trained_eval_reward"] >= OPTIMUM, summary
    assert summary["trained_reward"] >= OPTIMUM  # every seeded rollout episode optimal too
    assert summary["trained_raw_pieces"] == 31.0
    assert summary["loaded_policy_reward"] >= OPTIMUM  # the best policy read back with load_run
    assert "run done after 6 epochs" in text_of(cell_with(nb, "await handle.wait_async()"))
    assert summary["run_dir"] == str(run_dir)


@pytest.mark.slow
def test_06_trained_policy_is_compared_with_the_greedy_heuristic(training: tuple) -> None:
    _, nb, summary = training
    # on the training problem the greedy rule is optimal as well: 31 raw pieces, 31/180 raw pieces per step
    assert summary["greedy_reward"] == OPTIMUM and summary["greedy_raw_pieces"] == 31.0
    assert summary["trained_kpi"] == summary["greedy_kpi"] == round(31 / 180, 4)
    # orders drawn at random (never seen in training): measured -30.67 (trained) against -31.67 (greedy)
    assert -40.0 < summary["random_trained_reward"] <= summary["random_greedy_reward"] + 1.0, summary
    assert -40.0 < summary["random_greedy_reward"] < -25.0
    table = cell_with(nb, "comparison = pd.DataFrame(")
    assert "text/html" in mime_types(table)
    text = text_of(table)
    for label in ("orders in turn", "orders at random", "trained PPO", "greedy", "raw pieces"):
        assert label in text
    per_episode = text_of(cell_with(nb, "per_episode = pd.DataFrame("))
    assert "greedy, in turn" in per_episode and "trained, at random" in per_episode


@pytest.mark.slow
def test_06_cockpit_curves_and_viewers_were_shown(training: tuple) -> None:
    run_dir, nb, summary = training
    assert WIDGET_VIEW in mime_types(cell_with(nb, "TrainingDashboard(handle)"))
    assert PLOTLY in mime_types(cell_with(nb, "make_subplots("))
    assert WIDGET_VIEW in mime_types(cell_with(nb, "TrajectoryViewer(trained_result"))
    assert WIDGET_VIEW in mime_types(cell_with(nb, "TrajectoryViewer(greedy_result"))
    # both recorded episodes are drawn by the env's renderer (no recorded frames), 180 steps each
    assert summary["viewer_kind"] == ["renderer", "renderer"]
    assert summary["viewer_steps"] == [180, 180]
    # the viewers drew the first three steps of each episode, shown as one picture
    assert summary["rendered"] == 6
    grid = cell_with(nb, "viewer.render_png(step)")
    assert "image/png" in mime_types(grid)
    assert "6 steps drawn by the env's renderer" in text_of(grid)
    assert summary["trajectory_files"] == {"trained": 3, "greedy": 3}
    assert len(list((run_dir / "trajectories").glob("*.trajectory.zip"))) == 3
    assert len(list((run_dir / "greedy_trajectories").glob("*.trajectory.zip"))) == 3
    assert "Traceback" not in "".join(text_of(c) for c in cells(nb))


@pytest.mark.slow
def test_06_run_directory_reads_back(training: tuple) -> None:
    from maze_lab import load_run

    run_dir, nb, _ = training
    run = load_run(run_dir)
    assert run.summary["status"] == "done"
    assert run.config.experiment_name == "cutting2d_masked_ppo"
    stats = run.stats.to_dataframe()
    evals = stats[(stats.prefix == "eval") & (stats.event == "reward") & (stats.name == "mean")]
    per_epoch = evals.groupby("epoch").value.last()
    # epoch 0: the evaluation before training; then one per epoch, the last one optimal
    assert list(per_epoch.index) == list(range(0, 7))
    assert per_epoch.iloc[0] <= 2 * OPTIMUM and per_epoch.iloc[-1] == OPTIMUM
    kpis = stats[(stats.prefix == "eval") & (stats.event == "kpi") & (stats.name == "mean/raw_piece_usage_per_step")]
    assert abs(kpis.groupby("epoch").value.last().iloc[-1] - 31 / 180) < 1e-9
    assert (run_dir / "checkpoints" / "state_dict_best.pt").is_file()
    listing = text_of(cell_with(nb, "load_run(rc.run_dir)"))
    assert "status: done" in listing and "greedy_trajectories/" in listing


# ---- 07: structured env, masks, distributions, training ---------------------------------------------------------
@pytest.mark.slow
def test_07_structured_env_has_two_policy_keys(masked: tuple) -> None:
    _, nb, _ = masked
    spaces = text_of(cell_with(nb, "struct.action_spaces_dict"))
    assert "policy key 0: actions Dict('piece_idx': Discrete(50))" in spaces
    assert "policy key 1: actions Dict('cut_order': Discrete(2), 'cut_rotation': Discrete(2))" in spaces
    assert "joint choices per step: 200" in spaces
    cycle = text_of(cell_with(nb, "struct.reset(seed=seed)"))
    assert cycle.count("actor (0, 0)") == 2 and cycle.count("actor (1, 0)") == 2
    masks = text_of(cell_with(nb, "class AllowedRandomPolicy"))
    assert "'inventory_mask': (50,)" in masks and "'cutting_mask': (2,)" in masks


@pytest.mark.slow
def test_07_masked_probabilities_are_zero_exactly_on_masked_actions(masked: tuple) -> None:
    _, nb, summary = masked
    allowed = summary["allowed_slots"]
    # the example state: some pieces of the inventory do not fit the order, and every empty slot is masked
    assert 0 < len(allowed) < summary["n_pieces"]
    assert summary["masked_prob_outside_mask"] == 0.0  # exactly zero, not small
    assert summary["masked_prob_inside_min"] > 0.0
    assert summary["masked_prob_sum"] == pytest.approx(1.0, abs=1e-5)
    # without the mask the (near-uniform) untrained policy puts most probability on slots that do not fit
    assert summary["unmasked_prob_outside_mask"] > 0.5
    # the step-conditional cutting mask of the selected piece allows one rotation: the other gets probability 0
    mask, probs = summary["cutting_mask"], summary["cut_rotation_masked"]
    assert sorted(mask) == [0.0, 1.0]
    assert probs[mask.index(0.0)] == 0.0 and probs[mask.index(1.0)] == pytest.approx(1.0)
    assert summary["trained_prob_outside_mask"] == 0.0  # training cannot move probability onto masked slots
    assert "largest probability of a masked slot: 0.0" in text_of(cell_with(nb, "def head_probs("))
    assert "image/png" in mime_types(cell_with(nb, "def draw_selection_mask("))
    assert PLOTLY in mime_types(cell_with(nb, 'name="with inventory_mask"'))


@pytest.mark.slow
def test_07_masks_rule_out_invalid_choices_in_whole_episodes(masked: tuple) -> None:
    _, nb, summary = masked
    # one random episode without masks: mostly invalid choices (measured -348, 173 invalid)
    assert summary["random_unmasked_reward"] < -300 and summary["random_unmasked_invalid"] > 150
    # random among the allowed values: no invalid choice, close to the optimum (measured -31)
    assert -40.0 < summary["random_allowed_reward"] <= OPTIMUM + 1.0
    assert summary["train_invalid_cuts"] == 0.0
    assert "text/html" in mime_types(cell_with(nb, "random_episodes = pd.DataFrame("))


@pytest.mark.slow
def test_07_training_reaches_the_optimum(masked: tuple) -> None:
    from maze_lab import load_run

    run_dir, nb, summary = masked
    assert summary["status"] == "done" and summary["epochs"] == 4
    rewards = summary["eval_rewards"]
    assert len(rewards) == 5  # epoch 0 (untrained) and one evaluation per epoch
    # measured with the defaults: -31 (untrained), then -30, -31, -30, -30
    assert OPTIMUM in rewards[1:], rewards
    assert summary["final_reward"] >= OPTIMUM - 1.0, rewards
    assert summary["final_raw_pieces"] <= 32.0
    assert WIDGET_VIEW in mime_types(cell_with(nb, "TrainingDashboard(handle)"))
    assert "run done after 4 epochs" in text_of(cell_with(nb, "await handle.wait_async()"))
    run = load_run(run_dir)
    assert run.summary["status"] == "done"
    assert summary["run_dir"] == str(run_dir)


@pytest.mark.slow
def test_07_distribution_widget_shows_the_runs_actions(masked: tuple) -> None:
    from maze_lab.core.log_stats.writers import StatsStore

    run_dir, nb, summary = masked
    assert WIDGET_VIEW in mime_types(cell_with(nb, "DistributionsView(rc.run_dir)"))
    assert summary["distribution_heads"] == ["0/piece_idx", "1/cut_order", "1/cut_rotation"]
    # each policy key with the observations of its own sub-step (the cutting sub-step never sees the inventory)
    assert summary["distribution_observations"] == [
        "0/inventory", "0/inventory_mask", "0/inventory_size", "0/ordered_piece",
        "1/cutting_mask", "1/ordered_piece", "1/selected_piece"]
    assert summary["distribution_epochs"] >= 1
    # 8 envs finished their 180-step episodes in the last epoch with samples: one piece choice per step
    assert summary["piece_idx_counts_last_epoch"] == 8 * 180
    counts = text_of(cell_with(nb, 'distributions.action_counts(epoch, "0/piece_idx"'))
    assert "piece_idx chosen 1440 times" in counts and "cut_rotation" in counts
    samples = StatsStore.load(run_dir).samples()
    assert any(s[4] == "0/piece_idx" and s[1] == "train" for s in samples)
    assert PLOTLY in mime_types(cell_with(nb, 'name="trained, masked"'))
    assert "Traceback" not in "".join(text_of(c) for c in cells(nb))


# ---- the library fix the distribution widget of 07 showed ------------------------------------------------------
def test_monitoring_records_no_flat_observation_as_the_cutting_sub_steps_original() -> None:
    """The structured Cutting-2D env is a wrapper around the flat MazeEnv: the MazeEnv's last observation is the
    flat one (inventory, inventory_size, ordered_piece), which the cutting sub-step (policy key 1) never observes.
    It was recorded as policy key 1's original observation (the widget of 07 listed 1/inventory); policy key 1
    has only what the structured env returns, and policy key 0 keeps the flat observation as its original."""
    from maze_lab.core.log_stats.base_events import ObservationEvents
    from maze_lab.core.wrappers.monitoring_wrapper import MazeEnvMonitoringWrapper
    from maze_lab.examples.cutting2d import SIMPLE_PROBLEM, GreedyPolicy, make_masked_env

    env = MazeEnvMonitoringWrapper.wrap(make_masked_env(**SIMPLE_PROBLEM))
    policy = GreedyPolicy()
    obs, _ = env.reset(seed=0)
    for _ in range(6):  # three env steps: selection, cutting, ...
        obs, *_ = env.step(policy.compute_action(obs, actor_id=env.actor_id(), env=env))
    buffers = env.pop_episode_buffers()
    original = {key for event, key in buffers if event == ObservationEvents.observation_original}
    processed = {key for event, key in buffers if event == ObservationEvents.observation_processed}
    assert original == {(0, "inventory"), (0, "inventory_size"), (0, "ordered_piece")}
    assert {(1, "selected_piece"), (1, "ordered_piece"), (1, "cutting_mask"), (0, "inventory_mask")} <= processed
    assert not {k for k in processed if k[0] == 1} - {(1, "selected_piece"), (1, "ordered_piece"),
                                                        (1, "cutting_mask")}
    # one observation per sub-step: the reset and three selections for key 0, three cuttings for key 1
    assert len(buffers[(ObservationEvents.observation_original, (0, "inventory"))]) == 4
    assert len(buffers[(ObservationEvents.observation_processed, (1, "cutting_mask"))]) == 3
