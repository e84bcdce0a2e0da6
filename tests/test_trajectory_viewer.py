"""The trajectory viewer: the slider shows the right step, frames are drawn, HTML export works in Chromium,
and the viewer notebook runs top to bottom in a real kernel."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from maze_lab.core.agent.random_policy import RandomPolicy
from maze_lab.core.rollout import SequentialRolloutRunner
from maze_lab.core.trajectory import list_episodes, load_episode
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.examples.cutting2d import SIMPLE_PROBLEM, Cutting2DMazeAction, GreedyPolicy, make_masked_env

pytest.importorskip("ipywidgets")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PNG = b"\x89PNG\r\n\x1a\n"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cutting_dir(tmp_path_factory) -> Path:
    """Two recorded greedy episodes of 8 steps on the masked structured Cutting-2D env."""
    path = tmp_path_factory.mktemp("cutting")
    SequentialRolloutRunner(lambda: make_masked_env(**{**SIMPLE_PROBLEM, "max_steps": 8}), GreedyPolicy(),
                            n_episodes=2, trajectory_dir=path, seed=0, writers=[]).run()
    return path


def _cell_text(html: str, css_class: str) -> str:
    match = re.search(rf"class='{css_class}'>(.*?)</td>", html, re.S)
    assert match, f"no {css_class} cell in the panel"
    return re.sub(r"<[^>]+>", "", match.group(1)).strip()


def test_slider_shows_the_recorded_step(cutting_dir):
    """Moving the slider shows that step's reward, cumulative reward, actions and a rendered frame."""
    from maze_lab.widgets.trajectory_viewer import TrajectoryViewer

    viewer = TrajectoryViewer(cutting_dir)
    assert viewer.n_episodes == 2 and len(viewer.episode_dropdown.options) == 2
    ep = load_episode(list_episodes(cutting_dir)[0])
    assert viewer.episode.episode_id == ep.episode_id
    assert viewer.slider.max == viewer.play.max == 7
    assert bytes(viewer.image.value).startswith(PNG) and viewer.note.value == ""

    first_frame = bytes(viewer.image.value)
    viewer.slider.value = 3
    step = ep.steps[3]
    assert viewer.step == 3 and viewer.current_step.maze_state == step.maze_state
    info = viewer.info.value
    assert _cell_text(info, "step-index").startswith("3")
    assert float(_cell_text(info, "step-reward")) == step.reward
    assert float(_cell_text(info, "cum-reward")) == ep.cumulative_rewards[3]
    assert f"piece_idx</code> = {int(step.substeps[0].action['piece_idx'])}" in info
    assert f"cut_rotation</code> = {int(step.substeps[1].action['cut_rotation'])}" in info
    assert "CuttingEvents.valid_cut" in info
    assert isinstance(step.maze_action, Cutting2DMazeAction) and f"piece_id={step.maze_action.piece_id}" in info
    assert bytes(viewer.image.value).startswith(PNG) and bytes(viewer.image.value) != first_frame

    viewer.next_button.click()
    assert viewer.step == 4
    viewer.show_step(100)
    assert viewer.step == 7 and "truncated" in viewer.info.value

    viewer.episode_dropdown.value = 1
    assert viewer.step == 0 and viewer.episode.episode_id == load_episode(list_episodes(cutting_dir)[1]).episode_id


def test_envs_without_a_renderer_show_numbers_and_a_note(tmp_path):
    """CartPole's renderer draws only the live env: the viewer says so and plots the recorded numbers."""
    from maze_lab.widgets.trajectory_viewer import TrajectoryViewer

    space = GymMazeEnv("CartPole-v1", render_mode=None).action_spaces_dict
    result = SequentialRolloutRunner(lambda: GymMazeEnv("CartPole-v1"), RandomPolicy(space, seed=0), n_episodes=1,
                                     trajectory_dir=tmp_path, seed=0, writers=[]).run()
    ep = load_episode(result.trajectory_paths[0])
    viewer = TrajectoryViewer(ep)
    assert viewer.episode_dropdown.layout.display == "none"  # one episode: no dropdown
    assert "No picture of the env" in viewer.note.value and "GymRenderer" in viewer.note.value
    viewer.show_step(2)
    info = viewer.info.value
    assert float(_cell_text(info, "step-reward")) == 1.0 and float(_cell_text(info, "cum-reward")) == 3.0
    obs = ep.steps[2].substeps[0].observation["observation"]
    assert np.array2string(obs, precision=4, suppress_small=True) in info
    assert f"action</code> = {int(ep.steps[2].substeps[0].action['action'])}" in info
    assert bytes(viewer.image.value).startswith(PNG)  # the recorded-numbers plot


@pytest.mark.browser
def test_exported_html_slider_in_chromium(cutting_dir, tmp_path):
    """The exported page shows the first step, moves with its slider and buttons, and looks right."""
    pytest.importorskip("playwright")
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (bash scripts/setup.sh --dev installs it)")
    from playwright.sync_api import sync_playwright

    from maze_lab.widgets.trajectory_viewer import TrajectoryViewer

    viewer = TrajectoryViewer(list_episodes(cutting_dir)[0])
    ep = viewer.episode
    page_file = viewer.to_html(tmp_path / "episode.html", steps=range(6))
    shot = tmp_path / "trajectory_viewer.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu",
                                                                    "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1360, "height": 720})
        page.goto(page_file.as_uri())
        assert page.locator("#step-label").inner_text() == "step 0 / 7"
        assert page.locator("#frame").evaluate("img => img.naturalWidth") > 500
        first_src = page.locator("#frame").get_attribute("src")
        page.locator("#step-slider").fill("4")
        assert page.locator("#step-label").inner_text() == "step 4 / 7"
        assert float(page.locator(".step-reward").inner_text()) == ep.steps[4].reward
        assert float(page.locator(".cum-reward").inner_text()) == ep.cumulative_rewards[4]
        assert page.locator("#frame").get_attribute("src") != first_src
        page.locator("#prev").click()
        assert page.locator("#step-label").inner_text() == "step 3 / 7"
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert shot.stat().st_size > 20_000
    if os.environ.get("MAZE_LAB_KEEP_SCREENSHOTS"):
        shutil.copy(shot, Path(os.environ["MAZE_LAB_KEEP_SCREENSHOTS"]) / shot.name)


def test_viewer_notebook_runs_in_a_kernel(tmp_path):
    """notebooks/viewer.ipynb executes top to bottom (papermill, kernel maze-lab) and shows the viewer."""
    papermill = pytest.importorskip("papermill")
    out = tmp_path / "viewer_out.ipynb"
    nb = papermill.execute_notebook(str(ROOT / "notebooks" / "viewer.ipynb"), str(out), kernel_name="maze-lab",
                                    parameters={"n_episodes": 2, "max_steps": 16, "trajectory_dir": str(tmp_path)},
                                    progress_bar=False, cwd=str(tmp_path))
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "".join(o.get("text", "") for o in outputs)
    assert "recorded 2 episodes" in text and "step 10: reward" in text
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    assert len(list_episodes(tmp_path)) == 2 and (tmp_path / "episode.html").exists()
