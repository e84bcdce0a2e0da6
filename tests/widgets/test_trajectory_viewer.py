"""The trajectory viewer: recorded frames (CartPole) and renderer pictures (Cutting-2D) at every step, the reward
strip and its marker, refused frame members, the plotly HTML export in Chromium, and the viewer notebook in a
real kernel."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import re
import shutil
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from file_utils import rewrite_zip

from maze_lab.agent.random_policy import RandomPolicy
from maze_lab.core.rollout import SequentialRolloutRunner
from maze_lab.core.trajectory import (
    NotATrajectoryFileError,
    TrajectoryLimits,
    TrajectoryTooLargeError,
    list_episodes,
    load_episode,
)
from maze_lab.core.trajectory.frames import encode_png
from maze_lab.core.trajectory.recorder import TrajectoryRecordingWrapper
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.examples.cutting2d import SIMPLE_PROBLEM, Cutting2DMazeAction, GreedyPolicy, make_masked_env

pytest.importorskip("ipywidgets")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PNG = b"\x89PNG\r\n\x1a\n"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cutting_dir(tmp_path_factory) -> Path:
    """Two recorded greedy episodes of 8 steps on the masked structured Cutting-2D env."""
    path = tmp_path_factory.mktemp("cutting")
    SequentialRolloutRunner(lambda: make_masked_env(**{**SIMPLE_PROBLEM, "max_steps": 8}), GreedyPolicy(),
                            n_episodes=2, trajectory_dir=path, seed=0, writers=[]).run()
    return path


@pytest.fixture(scope="module")
def cartpole_file(tmp_path_factory) -> Path:
    """One recorded random CartPole episode (GymMazeEnv renders rgb_array frames by default)."""
    path = tmp_path_factory.mktemp("cartpole")
    space = GymMazeEnv("CartPole-v1", render_mode=None).action_spaces_dict
    result = SequentialRolloutRunner(lambda: GymMazeEnv("CartPole-v1"), RandomPolicy(space, seed=0), n_episodes=1,
                                     trajectory_dir=path, seed=0, writers=[]).run()
    return result.trajectory_paths[0]


def _decode_png(data: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)))


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


def test_cutting2d_is_drawn_by_its_renderer_not_recorded_frames(cutting_dir):
    """Cutting-2D's renderer redraws recorded states, so no frames are recorded and the renderer draws each step."""
    from maze_lab.widgets.trajectory_viewer import TrajectoryViewer

    ep = load_episode(list_episodes(cutting_dir)[0])
    assert ep.frames is None
    with zipfile.ZipFile(ep.path) as zf:
        assert not [n for n in zf.namelist() if n.startswith("frames/")]
    viewer = TrajectoryViewer(ep)
    assert viewer.picture_kind == "renderer"
    renderer = ep.make_renderer()
    sizes = set()
    for step in range(ep.n_steps):
        viewer.show_step(step)
        picture = _decode_png(bytes(viewer.image.value))
        sizes.add(picture.shape)
        assert picture.shape[2] == 3 and picture.std() > 10  # a drawing, not an empty canvas
    w, h = renderer.render(ep.steps[0].maze_state, None).get_size_inches() * viewer.data.dpi
    (height, width, _), = sizes  # one size for every step: the renderer's figure at the viewer's dpi
    assert abs(height - h) < 1 and abs(width - w) < 1
    viewer.close()


def test_a_cartpole_rollout_records_frames_and_the_viewer_shows_them(cartpole_file):
    """Every step of a CartPole episode has the env's own frame; the viewer shows exactly that frame per step."""
    from maze_lab.widgets.trajectory_viewer import TrajectoryViewer

    ep = load_episode(cartpole_file)
    env = GymMazeEnv("CartPole-v1")
    env.reset(seed=0)
    first = env.gym_env.render()  # the picture before the first action of the same seeded episode
    env.close()
    assert ep.frames is not None and sorted(ep.frames) == list(range(ep.n_steps)) and ep.frames.dropped == 0
    assert ep.frames.shape == first.shape == (400, 600, 3)
    assert np.array_equal(_decode_png(ep.frames.png(0)), first)  # lossless
    assert not np.array_equal(_decode_png(ep.frames.png(ep.n_steps - 1)), first)  # the pole moved

    viewer = TrajectoryViewer(cartpole_file)
    assert viewer.picture_kind == "frames" and viewer.note.value == ""
    for step in range(ep.n_steps):
        viewer.slider.value = step
        shown = bytes(viewer.image.value)
        assert shown == ep.frames.png(step)
        assert _decode_png(shown).shape == first.shape
        assert _cell_text(viewer.info.value, "step-index").startswith(str(step))
    viewer.close()  # the same protocol as the other widgets: .widget, .close()
    assert viewer.widget.comm is None and viewer.strip.comm is None and viewer.slider.comm is None


def test_frames_options_of_the_recorder(tmp_path):
    """record_frames=False records none; max_frames caps them (the viewer says why a step has none); True on an env
    without RGB frames says what to do."""
    from maze_lab.widgets.trajectory_viewer import TrajectoryViewer

    space = GymMazeEnv("CartPole-v1", render_mode=None).action_spaces_dict
    off = SequentialRolloutRunner(lambda: GymMazeEnv("CartPole-v1"), RandomPolicy(space, seed=0), n_episodes=1,
                                  trajectory_dir=tmp_path / "off", seed=0, writers=[], record_frames=False).run()
    assert load_episode(off.trajectory_paths[0]).frames is None
    capped = TrajectoryRecordingWrapper(GymMazeEnv("CartPole-v1"), trajectory_dir=tmp_path / "capped", max_frames=5)
    assert capped.records_frames
    policy = RandomPolicy(space, seed=0)
    obs, _ = capped.reset(seed=0)
    done = False
    while not done:
        obs, _, terminated, truncated, _ = capped.step(policy.compute_action(obs, capped.actor_id()))
        done = terminated or truncated
    capped.close()
    ep = load_episode(capped.written[0])
    assert sorted(ep.frames) == [0, 1, 2, 3, 4] and ep.frames.dropped == ep.n_steps - 5
    viewer = TrajectoryViewer(ep)
    viewer.show_step(6)
    assert viewer.image.layout.display == "none" and "max_frames" in viewer.note.value
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        TrajectoryRecordingWrapper(make_masked_env(**SIMPLE_PROBLEM), trajectory_dir=None, record_frames=True)


def test_a_failing_frame_stops_the_frames_not_the_rollout(tmp_path):
    """An env whose render() stops giving images: the rollout goes on, the file says why frames stopped."""
    import gymnasium as gym

    from maze_lab.widgets.trajectory_viewer import TrajectoryViewer

    class GoesBlank(gym.Wrapper):
        calls = 0

        def render(self):
            GoesBlank.calls += 1
            return None if GoesBlank.calls > 3 else self.env.render()

    space = GymMazeEnv("CartPole-v1", render_mode=None).action_spaces_dict
    result = SequentialRolloutRunner(lambda: GymMazeEnv(GoesBlank(gym.make("CartPole-v1", render_mode="rgb_array"))),
                                     RandomPolicy(space, seed=0), n_episodes=1, trajectory_dir=tmp_path, seed=0,
                                     writers=[]).run()
    ep = load_episode(result.trajectory_paths[0])
    assert ep.n_steps == result.episode_lengths[0] > 5
    assert sorted(ep.frames) == [0, 1, 2] and ep.frames.dropped == ep.n_steps - 3
    assert "returned no image" in ep.frames.error
    viewer = TrajectoryViewer(ep)
    viewer.show_step(4)
    assert viewer.image.layout.display == "none" and "returned no image" in viewer.note.value
    viewer.close()


def test_the_reward_strip_holds_the_recorded_numbers_and_marks_the_step(cutting_dir):
    """The strip's bars are the step rewards, its line the return, its extras the per-step numbers; the marker
    follows the slider and a click on the strip selects a step."""
    from plotly.callbacks import Points

    from maze_lab.widgets.trajectory_viewer import TrajectoryViewer

    viewer = TrajectoryViewer(cutting_dir)
    ep = viewer.episode
    reward, ret, point = viewer.strip.data[:3]
    assert list(reward.y) == list(ep.rewards) and list(reward.x) == list(range(ep.n_steps))
    assert np.allclose(ret.y, np.cumsum([s.reward for s in ep.steps]))
    extras = {t.name: list(t.y) for t in viewer.strip.data[3:]}
    assert extras["reward[0]"] == [sum(s.reward for s in st.substeps if s.actor_id.step_key == 0) for st in ep.steps]
    cuts = [sum(e["event"] == "valid_cut" for e in st.events) for st in ep.steps]
    area = extras["CuttingEvents.valid_cut.cutting_area"]
    assert [a is not None for a in area] == [c > 0 for c in cuts]
    assert viewer.marker_step == 0 and list(point.x) == [0]
    strip_before = viewer.strip
    for step in (5, 2, 7):
        viewer.slider.value = step
        assert viewer.marker_step == step and list(point.x) == [step] and point.y[0] == pytest.approx(ret.y[step])
    assert viewer.strip is strip_before  # moved in place, not rebuilt
    reward._dispatch_on_click(Points(point_inds=[4], xs=[4], ys=[reward.y[4]], trace_name="reward", trace_index=0),
                              None)
    assert viewer.step == 4 and viewer.marker_step == 4
    viewer.episode_dropdown.value = 1
    ep1 = viewer.episode
    assert viewer.strip is strip_before and list(viewer.strip.data[0].y) == list(ep1.rewards)
    assert viewer.marker_step == 0
    viewer.close()


def test_cartpole_strip_is_reward_and_return_only(cartpole_file):
    from maze_lab.widgets.trajectory_viewer import TrajectoryViewer

    viewer = TrajectoryViewer(cartpole_file)
    n = viewer.episode.n_steps
    assert [t.name for t in viewer.strip.data] == ["reward", "return", "current step"]
    assert list(viewer.strip.data[0].y) == [1.0] * n and list(viewer.strip.data[1].y) == list(range(1, n + 1))
    # both axes start at zero for a positive episode (the current-step marker's padding once put the return
    # axis at -47 for a return of 430)
    layout = viewer.strip.layout
    assert layout.yaxis.rangemode == "tozero" and layout.yaxis2.rangemode == "tozero"
    viewer.close()


def _png_claiming(width: int, height: int) -> bytes:
    """A tiny PNG whose header (with a valid checksum) claims another size."""
    png = bytearray(encode_png(np.zeros((2, 2, 3), np.uint8)))
    png[16:24] = struct.pack(">II", width, height)
    png[29:33] = struct.pack(">I", zlib.crc32(bytes(png[12:29])) & 0xFFFFFFFF)
    return bytes(png)


@pytest.mark.parametrize("member, data, error, message", [
    ("frames/3.png", b"\0" * (9 << 20), TrajectoryTooLargeError, "max_frame_bytes"),
    ("frames/3.png", b"GIF89a not a png at all, padded to be long enough", NotATrajectoryFileError,
     "not a PNG image"),
    ("frames/3.png", encode_png(np.zeros((10, 10, 3), np.uint8)), NotATrajectoryFileError, "header declares"),
    ("frames/3.png", _png_claiming(100_000, 100_000), TrajectoryTooLargeError, "max_frame_pixels"),
    ("frames/../../evil.png", encode_png(np.zeros((400, 600, 3), np.uint8)), NotATrajectoryFileError,
     "not a frame member"),
])
def test_oversized_or_malformed_frame_members_are_refused(cartpole_file, tmp_path, member, data, error, message):
    """A frame member that is too large, not a PNG, of another size, claims a huge image or has a strange name is
    refused when the file is opened, with the file and the member named."""
    bad = rewrite_zip(cartpole_file, tmp_path / "bad.trajectory.zip", {member: data})
    with pytest.raises(error, match=message) as info:
        load_episode(bad)
    assert str(bad) in str(info.value) and repr(member) in str(info.value)


def test_a_step_naming_a_missing_frame_is_refused(cartpole_file, tmp_path):
    with zipfile.ZipFile(cartpole_file) as zf:
        steps = zf.read("steps.jsonl").replace(b'"frame":"frames/2.png"', b'"frame":"frames/999.png"')
    bad = rewrite_zip(cartpole_file, tmp_path / "missing.trajectory.zip", {"steps.jsonl": steps})
    with pytest.raises(NotATrajectoryFileError, match=r"step 2 names frame member 'frames/999.png'") as info:
        load_episode(bad)
    assert str(bad) in str(info.value)
    assert load_episode(cartpole_file, limits=TrajectoryLimits(max_frame_bytes=64 << 10)).frames is not None


def test_the_viewer_draws_ahead_on_the_kernel_event_loop(cutting_dir):
    """Inside a running event loop (as in a kernel) the next steps are drawn while idle, so stepping on is cached."""
    from maze_lab.widgets.trajectory_viewer import TrajectoryViewer

    async def scenario() -> tuple[list[bool], list[bool]]:
        viewer = TrajectoryViewer(list_episodes(cutting_dir)[0], read_ahead=3)
        viewer.show_step(2)
        before = [viewer.data.cached(0, s) for s in (3, 4, 5)]
        for _ in range(2000):  # until drawn (each loop turn draws at most one step)
            if all(viewer.data.cached(0, s) for s in (3, 4, 5)):
                break
            await asyncio.sleep(0.01)
        after = [viewer.data.cached(0, s) for s in (3, 4, 5)]
        viewer.close()
        return before, after

    before, after = asyncio.run(scenario())
    assert before == [False, False, False] and after == [True, True, True]


def test_the_viewer_redraws_one_cutting2d_figure_into_the_pictures_of_new_ones(cutting_dir):
    """The viewer builds Cutting-2D's figure once per episode and redraws every later step into it (over a kept
    background of ticks and grids); each picture equals the one drawn from a new figure per step."""
    from maze_lab.core.env.interfaces import Renderer
    from maze_lab.examples.cutting2d.env.renderer import Cutting2DRenderer
    from maze_lab.widgets.trajectory_data import TrajectoryData

    class Counting(Cutting2DRenderer):
        """Counts the figures it builds."""

        built = 0

        def render(self, *args, **kwargs):
            type(self).built += 1
            return super().render(*args, **kwargs)

    class NewFigures:
        """Cutting-2D's renderer without ``redraw``: the viewer draws a new figure for every step."""

        def __init__(self) -> None:
            self.renderer = Cutting2DRenderer()

        def render(self, *args, **kwargs):
            return self.renderer.render(*args, **kwargs)

    class Plain(Renderer):
        """A renderer with the interface's default ``redraw``: a new figure each time."""

        def render(self, *args, **kwargs):
            return Cutting2DRenderer().render(*args, **kwargs)

    episode = list_episodes(cutting_dir)[0]
    # one cached picture: steps shown again are drawn again, after others (the kept backgrounds are reused)
    redrawn = TrajectoryData(episode, renderer=Counting(), cache_size=1)
    plain = TrajectoryData(episode, renderer=Plain(), cache_size=1)
    reference = TrajectoryData(episode, renderer=NewFigures(), cache_size=1)
    n = redrawn.load(0).n_steps
    order = [0, *range(n - 1, 0, -1), 3, 0, 5]
    for step in order:
        expected = _decode_png(reference.png(0, step))
        for data in (redrawn, plain):
            picture = _decode_png(data.png(0, step))
            assert picture.shape == expected.shape and np.array_equal(picture, expected), f"step {step} differs"
    assert len(order) == n + 3 and Counting.built == 1


def _saved_picture(fig) -> np.ndarray:
    """The RGB picture ``savefig`` writes of a figure at 72 dpi (the figure keeps that dpi for its transforms)."""
    fig.set_dpi(72)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72)
    return _decode_png(buf.getvalue())[..., :3].astype(int)


def test_a_redrawn_cutting2d_step_shows_its_state_and_nothing_of_the_last():
    """Redrawn in place after other steps (an invalid piece with its red title, other pieces), Cutting-2D's picture
    is the one a new figure shows: the selected piece, the order and the remains on the left, each inventory
    piece and the order (in a different colour) on the right, and nothing where the state has no piece."""
    from maze_lab.examples.cutting2d import Cutting2DMazeState
    from maze_lab.examples.cutting2d.env.renderer import Cutting2DRenderer

    renderer = Cutting2DRenderer()
    earlier = Cutting2DMazeState([[8, 8], [2, 6], [6, 2], [3, 7]], 10, (4, 4), (8, 8))
    state = Cutting2DMazeState([[8, 8], [3, 5], [5, 3], [4, 4]], 10, (2, 3), (8, 8))
    action = Cutting2DMazeAction(piece_id=1)  # the 3×5 piece, the 2×3 order as ordered, x first
    fig = renderer.render(earlier, Cutting2DMazeAction(piece_id=9))  # no such piece: a red title and a note
    assert renderer.redraw(fig, earlier, Cutting2DMazeAction(piece_id=3, rotate=True)) is fig
    assert renderer.redraw(fig, state, action) is fig
    picture = _saved_picture(fig)
    assert np.array_equal(picture, _saved_picture(renderer.render(state, action)))

    height = picture.shape[0]
    ax_cut, ax_inv = fig.axes

    def colour(ax, x: float, y: float) -> np.ndarray:
        px, py = ax.transData.transform((x, y))
        return picture[int(height - py), int(px)]

    def reddish(c: np.ndarray) -> bool:
        return c[0] > 150 and c[1] < 110 and c[2] < 110

    def background(c: np.ndarray) -> bool:  # white, or the faint green of the region that fits the order
        return bool(np.all(c > 215))

    # left: the order (red) in the corner of the selected piece, the two remains (blue, teal), nothing beyond
    # (sampled away from the size labels in the middle of each region and the cut numbers)
    assert reddish(colour(ax_cut, 0.4, 0.5))
    right_remain, top_remain = colour(ax_cut, 2.5, 4.2), colour(ax_cut, 1.5, 4.6)
    assert right_remain[2] > right_remain[0] + 30 and top_remain[1] > top_remain[0] + 40
    assert background(colour(ax_cut, 4.2, 2.0)) and background(colour(ax_cut, 1.0, 5.15))
    # right: a grey marker on each inventory piece (short side, long side), the order in red, nothing elsewhere
    order = colour(ax_inv, 2, 3)
    assert reddish(order)
    for short, long in [(8, 8), (3, 5), (4, 4)]:
        piece = colour(ax_inv, short, long)
        assert piece.max() < 170 and piece.max() - piece.min() < 40, (short, long, piece)
        assert np.abs(piece - order).sum() > 100  # inventory and order differ in colour
    for short, long in [(2, 6), (3, 7), (6, 7)]:  # the earlier step's pieces are gone; an empty spot
        assert background(colour(ax_inv, short, long)), (short, long)
    # the selected piece is ringed in blue
    px, py = ax_inv.transData.transform((3, 5))
    ring = picture[int(height - py) - 12:int(height - py) + 13, int(px) - 12:int(px) + 13]
    assert np.any((ring[..., 2] > ring[..., 0] + 80) & (ring[..., 2] > 150))



def test_envs_without_a_picture_show_numbers_and_a_note(tmp_path):
    """A Gymnasium env made without rgb_array has neither a renderer nor frames: the viewer plots the numbers."""
    from maze_lab.widgets.trajectory_viewer import TrajectoryViewer

    space = GymMazeEnv("CartPole-v1", render_mode=None).action_spaces_dict
    result = SequentialRolloutRunner(lambda: GymMazeEnv("CartPole-v1", render_mode=None), RandomPolicy(space, seed=0),
                                     n_episodes=1, trajectory_dir=tmp_path, seed=0, writers=[]).run()
    ep = load_episode(result.trajectory_paths[0])
    assert ep.frames is None
    viewer = TrajectoryViewer(ep)
    assert viewer.picture_kind == "numbers"
    assert viewer.episode_dropdown.layout.display == "none"  # one episode: no dropdown
    assert "No picture of the env" in viewer.note.value and "rgb_array" in viewer.note.value
    viewer.show_step(2)
    info = viewer.info.value
    assert float(_cell_text(info, "step-reward")) == 1.0 and float(_cell_text(info, "cum-reward")) == 3.0
    obs = ep.steps[2].substeps[0].observation["observation"]
    assert np.array2string(obs, precision=4, suppress_small=True) in info
    assert f"action</code> = {int(ep.steps[2].substeps[0].action['action'])}" in info
    assert bytes(viewer.image.value).startswith(PNG)  # the recorded-numbers plot
    viewer.close()


def _plot_state(page) -> dict:
    return page.evaluate("""() => { const gd = document.getElementById('trajectory');
        return {active: gd.layout.sliders[0].active, title: gd.layout.title.text, marker: gd.layout.shapes[0].x0,
                point: gd.data[3].x[0], n_frames: gd._transitionData._frames.length,
                image: document.querySelector('g.imagelayer image, image').getAttribute('href')};
    }""")


@pytest.mark.browser
def test_exported_html_slider_moves_the_frames_in_chromium(cutting_dir, cartpole_file, tmp_path):
    """The exported plotly page of a Cutting-2D and a CartPole episode: dragging plotly's slider shows another
    step's picture, title numbers and strip marker."""
    pytest.importorskip("playwright")
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (bash scripts/setup.sh --dev installs it)")
    from playwright.sync_api import sync_playwright

    from maze_lab.widgets.trajectory_viewer import TrajectoryViewer

    cutting = TrajectoryViewer(list_episodes(cutting_dir)[0])
    cartpole = TrajectoryViewer(cartpole_file)
    pages = [(cutting, cutting.to_html(tmp_path / "cutting.html", steps=range(6)), 6),
             (cartpole, cartpole.to_html(tmp_path / "cartpole.html"), cartpole.episode.n_steps)]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu",
                                                                    "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1360, "height": 1000})
        for viewer, page_file, n in pages:
            ep = viewer.episode
            page.goto(page_file.as_uri())
            page.wait_for_selector(".slider-rail-touch-rect")
            start = _plot_state(page)
            assert start["active"] == 0 and start["n_frames"] == n and start["marker"] == 0
            assert start["title"].startswith(f"<b>step 0 / {ep.n_steps - 1}</b>")
            assert start["image"].startswith("data:image/png;base64,")
            rail = page.locator(".slider-rail-touch-rect").bounding_box()
            page.mouse.click(rail["x"] + rail["width"] * 0.6, rail["y"] + rail["height"] / 2)
            page.wait_for_function("() => document.getElementById('trajectory').layout.shapes[0].x0 > 0")
            moved = _plot_state(page)
            k = moved["active"]
            assert 0 < k < n and moved["marker"] == k and moved["point"] == k
            assert f"<b>step {k} / {ep.n_steps - 1}</b>" in moved["title"]
            assert f"return {float(ep.cumulative_rewards[k]):.4g}" in moved["title"]
            expected = "data:image/png;base64," + base64.b64encode(viewer.render_png(k)).decode()
            assert expected != start["image"]
            # plotly swaps the <image> once the new picture has loaded
            page.wait_for_function("src => { const im = document.querySelector('g.imagelayer image, image');"
                                   " return im !== null && im.getAttribute('href') === src; }", arg=expected)
            shot = tmp_path / f"trajectory_viewer_{page_file.stem}.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 20_000
            if os.environ.get("MAZE_LAB_KEEP_SCREENSHOTS"):
                shutil.copy(shot, Path(os.environ["MAZE_LAB_KEEP_SCREENSHOTS"]) / shot.name)
        browser.close()


def test_viewer_notebook_runs_in_a_kernel(tmp_path):
    """notebooks/viewer.ipynb executes top to bottom (papermill, the stock python3 kernel): Cutting-2D and CartPole
    viewers."""
    papermill = pytest.importorskip("papermill")
    out = tmp_path / "viewer_out.ipynb"
    nb = papermill.execute_notebook(str(ROOT / "notebooks" / "viewer.ipynb"), str(out), kernel_name="python3",
                                    parameters={"n_episodes": 2, "max_steps": 16, "cartpole_episodes": 1,
                                                "trajectory_dir": str(tmp_path)},
                                    progress_bar=False, cwd=str(tmp_path))
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "".join(o.get("text", "") for o in outputs)
    assert "recorded 2 episodes" in text and "step 10: reward" in text
    assert "recorded 1 CartPole episodes" in text and "frames of shape (400, 600, 3)" in text
    assert sum("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs) == 2
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert len(list_episodes(tmp_path / "cutting2d")) == 2 and len(list_episodes(tmp_path / "cartpole")) == 1
    assert load_episode(list_episodes(tmp_path / "cartpole")[0]).frames is not None
    assert (tmp_path / "episode.html").exists()
