"""notebooks/14_sac_pendulum.ipynb: SAC trained on Pendulum-v1 with the cockpit, evaluated deterministically, then
SACfD trained from recorded swing-up demonstrations and both runs compared; executed once with papermill in the
``maze-lab`` kernel with its default parameters, asserting on the numbers it printed and the runs it wrote."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from notebook_utils import (
    all_text,
    cell_with,
    execute_with_summary,
    mime_types,
    parameters_source,
    text_of,
)

NAME = "14_sac_pendulum.ipynb"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

N_EPOCHS, EPOCH_LENGTH, N_DEMONSTRATIONS = 8, 500, 5
"""The notebook's defaults (the test checks that they are still the defaults)."""
INITIAL_RANDOM_STEPS = 100
"""The experiment file's ``initial_buffer_size``: SAC's random steps before its first gradient step."""


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """The notebook executed once with its defaults: (run directory, executed notebook, summary line)."""
    return execute_with_summary(NAME, tmp_path_factory)


def test_committed_notebook_is_clean_and_parameterised() -> None:
    src = parameters_source(NAME)
    for name in ("seed", "n_epochs", "epoch_length", "n_demonstrations", "run_dir", "log_base_dir"):
        assert f"{name} =" in src
    # every default is explained by a comment
    assert all("#" in line for line in src.splitlines() if "=" in line)
    assert f"n_epochs = {N_EPOCHS} " in src and f"epoch_length = {EPOCH_LENGTH} " in src
    assert f"n_demonstrations = {N_DEMONSTRATIONS} " in src


@pytest.mark.slow
def test_sac_learns_to_swing_the_pendulum_up(executed: tuple) -> None:
    """On the default seed and budget (4,100 env steps) the trained policy, evaluated deterministically, is far
    better than the untrained one on the same five start states. Measured: untrained -1,243, SAC -285 (with sampled
    actions -210), SACfD -171, the swing-up controller -175; random torques get about -1,200. (With 3,000 env steps
    this seed gave -671 and the bound failed: on seeds 1-5 that budget spread from -180 to -1,077, this one from
    -126 to -610. The seeded result is the same quiet and under load, see test_seeded_runs.py; constraints.txt pins
    the libraries whose releases change it.)"""
    _, nb, summary = executed
    assert summary["untrained_reward"] < -1000, summary
    assert summary["sac_reward"] > -600, summary
    assert summary["sac_reward"] > summary["untrained_reward"] + 500, summary
    assert summary["status"] == ["done", "done"]
    assert summary["epochs"] == [N_EPOCHS, N_EPOCHS]
    # the evaluation after every epoch: the curve ends far above where it starts (measured -1,805 -> -200)
    curve = summary["eval_curves"]["SAC"]
    assert len(curve) == N_EPOCHS and curve[-1] > curve[0] + 500, curve
    assert f"SAC run done after {N_EPOCHS} epochs" in text_of(cell_with(nb, "await handle.wait_async()"))


@pytest.mark.slow
def test_sacfd_buffer_starts_with_the_demonstrations(executed: tuple) -> None:
    """The recorded episodes are swing-ups; every recorded transition but the last of each episode (cut by the time
    limit, without a next observation) is in SACfD's replay buffer, which got no random steps, while SAC's buffer
    started with the experiment's random ones. The runs' own buffer-size statistics say the same."""
    from omegaconf import OmegaConf

    from maze_lab import load_run
    from maze_lab.core.trajectory import list_episodes, load_episode

    run_dir, _, summary = executed
    demo_dir = Path(summary["demo_dir"])
    assert demo_dir == run_dir / "demonstrations"
    files = list_episodes(demo_dir)
    assert len(files) == N_DEMONSTRATIONS == summary["demo_episodes"]
    episodes = [load_episode(path) for path in files]
    assert sum(e.n_steps for e in episodes) == summary["demo_steps"] == N_DEMONSTRATIONS * 200
    # the controller swings up (measured: -179 on average; random torques get about -1,200)
    assert sum(e.total_reward for e in episodes) / len(episodes) > -400

    transitions = sum(e.n_steps - 1 for e in episodes)
    assert summary["demonstration_transitions"] == transitions
    assert summary["sacfd_env_steps"] == N_EPOCHS * EPOCH_LENGTH  # no random steps before learning
    assert summary["sacfd_buffer_size"] == transitions + summary["sacfd_env_steps"]
    assert summary["sac_env_steps"] == INITIAL_RANDOM_STEPS + N_EPOCHS * EPOCH_LENGTH == summary["sac_buffer_size"]

    def first_epoch_buffer(path: Path) -> float:
        stats = load_run(path).stats.to_dataframe()
        rows = stats[(stats.topic == "SACEvents") & (stats.event == "buffer_size") & (stats.epoch == 1)]
        return float(rows.value.iloc[-1])

    # mean buffer size over the first epoch's updates: the start (demonstrations / random steps) plus 1 .. 500
    assert first_epoch_buffer(Path(summary["sacfd_run_dir"])) == transitions + (EPOCH_LENGTH + 1) / 2
    assert first_epoch_buffer(run_dir) == INITIAL_RANDOM_STEPS + (EPOCH_LENGTH + 1) / 2

    config = OmegaConf.load(Path(summary["sacfd_run_dir"]) / "config.yaml")
    assert config.algorithm.from_demonstrations is True
    assert Path(config.algorithm.demonstrations) == demo_dir


@pytest.mark.slow
def test_both_run_directories_hold_their_runs(executed: tuple) -> None:
    """The SAC run is the notebook's run directory, the SACfD run its ``sacfd/`` folder: statistics, checkpoints and
    an evaluation after every epoch that the comparison read back unchanged."""
    from maze_lab import load_run

    run_dir, _, summary = executed
    assert summary["run_dir"] == str(run_dir)
    assert summary["sacfd_run_dir"] == str(run_dir / "sacfd")
    assert (run_dir / NAME).is_file()
    for name, path in (("SAC", run_dir), ("SACfD", run_dir / "sacfd")):
        assert (path / "stats.arrows").is_file(), name
        assert (path / "checkpoints" / "state_dict_last.pt").is_file(), name
        assert (path / "checkpoints" / "state_dict_best.pt").is_file(), name
        run = load_run(path)
        assert run.summary["status"] == "done", name
        stats = run.stats.to_dataframe()
        evals = stats[(stats.prefix == "eval") & (stats.event == "reward") & (stats.name == "mean")]
        per_epoch = evals.groupby("epoch").value.last()
        assert list(per_epoch.index) == list(range(1, N_EPOCHS + 1)), name
        assert per_epoch.tolist() == pytest.approx(summary["eval_curves"][name]), name


@pytest.mark.slow
def test_cockpits_plot_and_comparison_are_shown(executed: tuple) -> None:
    _, nb, summary = executed
    assert WIDGET_VIEW in mime_types(cell_with(nb, "TrainingDashboard(handle)"))
    assert WIDGET_VIEW in mime_types(cell_with(nb, "TrainingDashboard(handle_fd)"))
    assert WIDGET_VIEW in mime_types(cell_with(nb, "RunComparison(["))
    assert "image/png" in mime_types(cell_with(nb, "plt.subplots("))
    # the comparison names the settings in which the runs differ: the demonstrations
    assert summary["comparison_runs"] == 2
    assert "algorithm.demonstrations" in summary["comparison_params"]
    assert "Traceback" not in all_text(nb)
