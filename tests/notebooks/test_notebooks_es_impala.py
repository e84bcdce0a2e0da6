"""notebooks/15_es_cartpole.ipynb (evolution strategies on CartPole: one update by hand, the run with two worker
processes and the cockpit, ES's own statistics, the run read back): executed once with its defaults, asserting on
its summary line, its outputs and the run directory it wrote."""

from __future__ import annotations

import pytest
from notebook_utils import cell_with, cells, execute_with_summary, mime_types, parameters_source, text_of

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PLOTLY = "application/vnd.plotly.v1+json"
ES_CARTPOLE = "15_es_cartpole.ipynb"


@pytest.fixture(scope="module")
def es_cartpole(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """15 executed once with its defaults: (run directory, executed notebook, summary)."""
    return execute_with_summary(ES_CARTPOLE, tmp_path_factory)


def test_15_committed_notebook_is_clean_and_parameterised() -> None:
    src = parameters_source(ES_CARTPOLE)
    for param in ("n_epochs", "n_workers", "seed", "run_dir", "log_base_dir"):
        assert f"{param} =" in src
    for line in src.strip().splitlines():
        assert "#" in line, f"every default explains itself in a comment: {line!r}"


@pytest.mark.slow
def test_15_es_learns_cartpole(es_cartpole: tuple) -> None:
    run_dir, nb, summary = es_cartpole
    assert summary["status"] == "done" and summary["epochs"] == 10
    assert summary["run_dir"] == str(run_dir)
    # measured with the default seed: the untrained deterministic policy drops the pole within ~10 steps, the
    # evaluation after epoch 10 keeps it up for all 500 steps of every episode
    assert summary["untrained_reward"] < 50, summary
    assert summary["trained_reward"] >= 195, summary
    assert summary["eval_rewards"][-1] >= 195 and summary["loaded_policy_return"] >= 195
    # every update played at least n_rollouts_per_update = 10 episodes (five antithetic pairs)
    assert summary["episodes_per_update"] == [10] * 10
    # the hand computation of section 1: (-2/3 * eps_1 + 2/3 * eps_2) / 4
    assert summary["gradient"] == pytest.approx([-1 / 6, -1 / 6, -1 / 6])


@pytest.mark.slow
def test_15_cockpit_and_es_statistics_were_shown(es_cartpole: tuple) -> None:
    run_dir, nb, summary = es_cartpole
    assert WIDGET_VIEW in mime_types(cell_with(nb, "TrainingDashboard(handle)"))
    assert PLOTLY in mime_types(cell_with(nb, "make_subplots("))
    assert "the table is the same: True" in text_of(cell_with(nb, "NoiseTable(seed=seed"))
    assert "worker processes: 2" in text_of(cell_with(nb, "untrained = rc.evaluate()"))
    assert "Traceback" not in "".join(text_of(c) for c in cells(nb))


@pytest.mark.slow
def test_15_run_directory_has_stats_checkpoints_and_worker_event_logs(es_cartpole: tuple) -> None:
    run_dir, nb, summary = es_cartpole
    assert (run_dir / "stats.arrows").is_file()
    assert (run_dir / "checkpoints" / "state_dict_best.pt").is_file()
    assert (run_dir / "checkpoints" / "state_dict_last.pt").is_file()
    assert sorted(p.name for p in (run_dir / "event_logs").iterdir() if p.name.startswith("train_")) == [
        "train_0", "train_1"]
    assert "status: done" in text_of(cell_with(nb, "load_run(rc.run_dir)"))


# ---- notebooks/16_impala.ipynb -----------------------------------------------------------------------------------
# IMPALA on CartPole: V-trace by hand, the run with four actors in two processes and the cockpit, the policy lag and
# importance weights, the run read back

IMPALA_CARTPOLE = "16_impala.ipynb"


@pytest.fixture(scope="module")
def impala_cartpole(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """16 executed once with its defaults: (run directory, executed notebook, summary)."""
    return execute_with_summary(IMPALA_CARTPOLE, tmp_path_factory)


def test_16_committed_notebook_is_clean_and_parameterised() -> None:
    src = parameters_source(IMPALA_CARTPOLE)
    for param in ("n_epochs", "num_actors", "actor_processes", "seed", "run_dir", "log_base_dir"):
        assert f"{param} =" in src
    for line in src.strip().splitlines():
        assert "#" in line, f"every default explains itself in a comment: {line!r}"


@pytest.mark.slow
def test_16_impala_learns_cartpole_and_vtrace_matches_the_hand_computation(impala_cartpole: tuple) -> None:
    run_dir, nb, summary = impala_cartpole
    assert summary["status"] == "done" and summary["epochs"] == 10
    assert summary["run_dir"] == str(run_dir)
    assert summary["env_steps"] == 10 * 10 * 8 * 32  # epochs x updates x trajectories x steps
    # measured with the default seed: the untrained deterministic policy drops the pole within ~10 steps; the
    # evaluations passed 195 after epoch 3 and after epoch 7 in two runs (asynchronous actors: no two runs are the
    # same, hence the best evaluation of the 10 epochs)
    assert summary["untrained_reward"] < 50, summary
    assert max(summary["eval_rewards"]) >= 195, summary
    # the best checkpoint read back from the run directory: its one episode on another seed is not the mean of the
    # four that selected it (measured 194 once where the selection saw 237, and 147 in a CI run on a loaded machine:
    # the actors are asynchronous, so the weights differ from run to run), but far above the untrained policy's
    # ~10 (which the assertion above bounds by 50)
    assert summary["loaded_policy_return"] >= 100, summary
    # the actors pick up new weights: the lag stays at a few updates instead of growing with the 100 updates
    assert all(0 <= lag <= 4 for lag in summary["policy_lag_max"]), summary["policy_lag_max"]
    assert all(0.5 < w < 1.5 for w in summary["importance_weight"]), summary["importance_weight"]
    # section 1: V-trace by hand equals vtrace(), and on-policy it is the n-step return
    assert summary["vtrace"] == pytest.approx(summary["vtrace_by_hand"], abs=1e-9)
    assert summary["on_policy_vs"] == pytest.approx(summary["n_step_returns"], abs=1e-9)


@pytest.mark.slow
def test_16_cockpit_and_impala_statistics_were_shown(impala_cartpole: tuple) -> None:
    run_dir, nb, summary = impala_cartpole
    assert WIDGET_VIEW in mime_types(cell_with(nb, "TrainingDashboard(handle)"))
    assert PLOTLY in mime_types(cell_with(nb, "make_subplots("))
    assert "the same: True" in text_of(cell_with(nb, "from maze_lab.train.trainers.impala.vtrace import vtrace"))
    assert "actor processes: 2" in text_of(cell_with(nb, "untrained = rc.evaluate()"))
    assert "Traceback" not in "".join(text_of(c) for c in cells(nb))


@pytest.mark.slow
def test_16_run_directory_has_stats_checkpoints_and_actor_event_logs(impala_cartpole: tuple) -> None:
    run_dir, nb, summary = impala_cartpole
    assert (run_dir / "stats.arrows").is_file()
    assert (run_dir / "checkpoints" / "state_dict_best.pt").is_file()
    assert (run_dir / "checkpoints" / "state_dict_last.pt").is_file()
    assert sorted(p.name for p in (run_dir / "event_logs").iterdir() if p.name.startswith("train_")) == [
        "train_0", "train_1", "train_2", "train_3"]
    assert "status: done" in text_of(cell_with(nb, "load_run(rc.run_dir)"))
