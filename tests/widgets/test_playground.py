"""The env playground (``maze_lab.widgets.EnvPlayground``): stepping by hand on CartPole (Discrete), Pendulum (Box), a
MultiBinary toy env and a Dict-action toy env, the masked Cutting-2D env (greyed buttons match the masks of the
observation), events and KPIs, reset with a seed, undo, a trained policy acting with its probabilities, errors as
one line, and one playground displayed in a real kernel."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml
from cutting2d_training import masked_env_factory
from run_utils import TINY

from maze_lab.run.run_context import RunContext

pytest.importorskip("ipywidgets")

from maze_lab.widgets import EnvPlayground  # noqa: E402
from maze_lab.widgets.playground import BoxControl, DiscreteControl, MultiBinaryControl  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def cutting_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trained run directory of the masked Cutting-2D env (PPO, two short epochs)."""
    rc = RunContext(experiment="cutting2d_masked_ppo",
                    overrides={**TINY, "n_epochs": 2, "algorithm.n_rollout_steps": 64,
                               "log_base_dir": str(tmp_path_factory.mktemp("cut"))}, silent=True)
    rc.train()
    rc.close()
    return rc.run_dir


class Switches(gym.Env):
    """Three on/off switches (MultiBinary): the reward is the number switched on; episodes of 4 steps."""

    def __init__(self):
        self.action_space = gym.spaces.MultiBinary(3)
        self.observation_space = gym.spaces.Box(0.0, 4.0, shape=(2,), dtype=np.float32)
        self.t = 0

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN201 - gymnasium's signature
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):  # noqa: ANN001, ANN201 - gymnasium's signature
        self.t += 1
        on = float(np.sum(action))
        return np.array([self.t, on], dtype=np.float32), on, self.t >= 4, False, {"on": on}


class Console(gym.Env):
    """A Dict action space of every kind of head: a dial (Discrete), switches (MultiBinary), a gain without bounds
    (Box), a grid position (MultiDiscrete); the observation echoes what was set."""

    def __init__(self):
        self.action_space = gym.spaces.Dict({
            "dial": gym.spaces.Discrete(4), "switches": gym.spaces.MultiBinary(2),
            "gain": gym.spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float32),
            "grid": gym.spaces.MultiDiscrete([2, 3])})
        self.observation_space = gym.spaces.Dict({
            "echo": gym.spaces.Box(-np.inf, np.inf, shape=(6,), dtype=np.float32)})

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN201 - gymnasium's signature
        super().reset(seed=seed)
        return {"echo": np.zeros(6, dtype=np.float32)}, {}

    def step(self, action):  # noqa: ANN001, ANN201 - gymnasium's signature
        echo = np.concatenate([[action["dial"]], action["switches"], action["gain"], action["grid"]])
        return {"echo": echo.astype(np.float32)}, 0.0, False, False, {}


class Wobbly(gym.Env):
    """An env that ignores its seed: replaying its actions gives other observations."""

    def __init__(self):
        self.action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.rng = np.random.default_rng()

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN201 - gymnasium's signature
        return self.rng.random(1).astype(np.float32), {}

    def step(self, action):  # noqa: ANN001, ANN201 - gymnasium's signature
        return self.rng.random(1).astype(np.float32), 0.0, False, False, {}


class Breaks(gym.Env):
    """An env whose step raises on action 1, with a message of several lines."""

    def __init__(self):
        self.action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN201 - gymnasium's signature
        super().reset(seed=seed)
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):  # noqa: ANN001, ANN201 - gymnasium's signature
        if action == 1:
            raise RuntimeError("the valve is stuck\nsecond line of the message\nthird line")
        return np.ones(1, dtype=np.float32), 1.0, False, False, {}


def _step_button(pg: EnvPlayground):
    return pg._group(pg.actor_id)[2]


# ---- Discrete: CartPole --------------------------------------------------------------------------------------------

def test_cartpole_buttons_step_and_show_what_the_step_gave() -> None:
    pg = EnvPlayground("CartPole-v1", seed=3)
    reference = gym.make("CartPole-v1")
    obs0, _ = reference.reset(seed=3)
    assert np.array_equal(pg.observation["observation"], obs0)
    assert pg.seed == 3 and pg.step_count == 0 and pg.error == ""
    assert pg.png.startswith(PNG) and pg.picture_kind == "frame" and pg.image.value == pg.png
    buttons = pg.buttons("action")
    assert [b.description for b in buttons] == ["0", "1"] and not any(b.disabled for b in buttons)
    assert _step_button(pg) is None  # one Discrete head: a click is the step
    first_picture = pg.png
    buttons[1].click()
    obs1, reward, *_ = reference.step(1)
    assert pg.step_count == 1 and pg.env_steps == 1 and pg.last_reward == reward == 1.0
    assert np.array_equal(pg.observation["observation"], obs1)
    assert pg.history[-1].action == {"action": 1} and not pg.history[-1].by_policy
    assert "observation" in pg.obs_html.value and "float32 (4,)" in pg.obs_html.value
    assert "maze-lab-pg-reward'>1<" in pg.step_html.value
    assert "return <span class='maze-lab-pg-return'>1<" in pg.header.value
    for _ in range(3):
        pg.buttons("action")[1].click()
    assert pg.step_count == 4 and pg.episode_return == 4.0
    assert pg.png != first_picture and pg.image.value == pg.png  # the pole fell a little
    assert [o[1] for o in pg.history_list.options] == [0, 1, 2, 3, 4]
    pg.close()


def test_an_episode_end_disables_the_controls_until_reset() -> None:
    pg = EnvPlayground("CartPole-v1", seed=0)
    while not pg.done:
        pg.step(1)  # pushing right only: the pole falls after a few steps
    assert pg.terminated and not pg.truncated
    assert all(b.disabled for b in pg.buttons("action"))
    assert "terminated" in pg.header.value and "The episode ended (terminated)" in str(
        [c.value for c in pg.action_box.children if hasattr(c, "value")])
    with pytest.raises(RuntimeError, match="the episode ended"):
        pg.step(0)
    pg.reset_button.click()
    assert not pg.done and pg.step_count == 0 and not any(b.disabled for b in pg.buttons("action"))
    pg.close()


# ---- Box: Pendulum -------------------------------------------------------------------------------------------------

def test_pendulum_sliders_within_the_bounds_and_the_step_button() -> None:
    pg = EnvPlayground("Pendulum-v1", seed=1)
    control = pg.controls["action"]
    assert isinstance(control, BoxControl) and len(control.fields) == 1
    slider = control.fields[0]
    assert (slider.min, slider.max) == (-2.0, 2.0)
    slider.value = 1.5
    _step_button(pg).click()
    assert pg.error == ""
    assert np.allclose(pg.history[-1].action["action"], [1.5]) and pg.history[-1].action["action"].dtype == np.float32
    reference = gym.make("Pendulum-v1")
    reference.reset(seed=1)
    obs, reward, *_ = reference.step(np.array([1.5], dtype=np.float32))
    assert np.allclose(pg.observation["observation"], obs) and pg.last_reward == pytest.approx(reward)
    assert pg.png.startswith(PNG)
    pg.close()


# ---- MultiBinary and Dict action spaces ------------------------------------------------------------------------------

def test_multi_binary_checkboxes() -> None:
    pg = EnvPlayground(Switches(), seed=0)
    control = pg.controls["action"]
    assert isinstance(control, MultiBinaryControl) and len(control.boxes) == 3
    control.boxes[0].value = True
    control.boxes[2].value = True
    _step_button(pg).click()
    assert pg.error == "" and pg.last_reward == 2.0
    assert pg.history[-1].action["action"].tolist() == [1, 0, 1]
    assert pg.history[-1].info == {"on": 2.0} and "on=2" in pg.step_html.value
    # no render_mode='rgb_array': no picture, and the playground says why
    assert pg.png is None and "without render_mode=" in pg.picture_note.value
    pg.close()


def test_a_dict_action_space_gets_one_control_per_head() -> None:
    pg = EnvPlayground(Console(), seed=0)
    controls = pg.controls
    assert {h: c.kind for h, c in controls.items()} == {"dial": "discrete", "gain": "box", "grid": "multi_discrete",
                                                        "switches": "multi_binary"}
    dial = controls["dial"]
    assert isinstance(dial, DiscreteControl) and not dial.immediate
    dial.buttons[3].click()  # selects: several heads step together with the step button
    assert pg.step_count == 0 and dial.value() == 3 and dial.buttons[3].button_style == "info"
    gain = controls["gain"].fields[0]
    assert "maze-lab-pg-unbounded" in gain._dom_classes  # no bounds: a number field, not a slider
    gain.value = -7.25
    controls["switches"].boxes[1].value = True
    controls["grid"].menus[1].value = 2
    _step_button(pg).click()
    assert pg.error == "" and pg.step_count == 1
    assert pg.observation["echo"].tolist() == [3, 0, 1, -7.25, 0, 2]
    pg.close()


# ---- the masked Cutting-2D env -------------------------------------------------------------------------------------

def test_masked_cutting2d_buttons_follow_the_masks_of_the_observation() -> None:
    pg = EnvPlayground(masked_env_factory(), seed=0, action_masks={"cut_rotation": "cutting_mask"})
    assert pg.mask_notes == []
    assert pg.masks[0]["piece_idx"].observation == "inventory_mask"
    assert pg.masks[1]["cut_rotation"].observation == "cutting_mask"
    assert pg.picture_kind == "renderer" and pg.png.startswith(PNG)
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(12):
        actor = pg.actor_id
        head = "piece_idx" if actor.step_key == 0 else "cut_rotation"
        mask_key = "inventory_mask" if actor.step_key == 0 else "cutting_mask"
        allowed = pg.observation[mask_key] != 0
        disabled = np.array([b.disabled for b in pg.buttons(head)])
        assert np.array_equal(disabled, ~allowed), (actor, pg.observation[mask_key])
        assert all(("maze-lab-pg-masked" in b._dom_classes) == d for b, d in zip(pg.buttons(head), disabled,
                                                                                  strict=True))
        checked += int(disabled.any())
        if actor.step_key == 0:
            pg.buttons("piece_idx")[int(rng.choice(np.flatnonzero(allowed)))].click()
        else:
            assert sorted(pg.controls) == ["cut_order", "cut_rotation"]
            rotation = pg.controls["cut_rotation"]
            if allowed.all():
                rotation.buttons[1].click()
            assert allowed[rotation.value()]  # a masked selection moves to an allowed one
            pg.controls["cut_order"].buttons[int(rng.integers(2))].click()
            _step_button(pg).click()
        assert pg.error == ""
    assert checked >= 6 and pg.step_count == 12 and pg.env_steps == 6
    pg.close()


def test_cutting2d_without_the_cutting_mask_named_says_which_head_to_name() -> None:
    pg = EnvPlayground(masked_env_factory(), seed=0)
    assert pg.masks[0]["piece_idx"].how == "shape" and pg.masks[1] == {}
    assert len(pg.mask_notes) == 1 and "cutting_mask" in pg.mask_notes[0]
    assert "cut_order and cut_rotation" in pg.mask_notes[0] and "action_masks=" in pg.note_html.value
    with pytest.raises(ValueError, match="is not a Discrete head|cannot mask"):
        EnvPlayground(masked_env_factory(), action_masks={"cut_rotation": "inventory_mask"})
    with pytest.raises(ValueError, match=r"\['rotate'\] are not action heads"):
        EnvPlayground(masked_env_factory(), action_masks={"rotate": "cutting_mask"})
    pg.close()


def test_cutting2d_events_kpis_and_the_picture_of_the_step() -> None:
    pg = EnvPlayground(masked_env_factory(), seed=0, action_masks={"cut_rotation": "cutting_mask"})
    assert [e.name for e in pg.reset_events] == ["InventoryEvents.piece_replenished"]
    pg.step({"piece_idx": 0})
    assert pg.env_steps == 0 and pg.kpis == {}  # the selection sub-step: the flat env has not stepped
    pg.step({"cut_rotation": 0, "cut_order": 0})
    names = [e.name for e in pg.last_events]
    assert names[0] == "CuttingEvents.valid_cut" and "InventoryEvents.piece_replenished" in names
    assert "CuttingEvents.valid_cut" in pg.step_html.value and "maze-lab-pg-events" in pg.step_html.value
    # the KPI of the episode so far: the raw piece of the reset and the one replenished, in one step
    assert pg.kpis == {"raw_piece_usage_per_step": 2.0} and "raw_piece_usage_per_step" in pg.step_html.value
    # the keys the step changed are marked (against what the piece selection saw last, not the cutting sub-step)
    assert pg.obs_html.value.count("changed by the last step") == 3  # inventory, its size and mask; same order
    step_picture = pg.png
    pg.picture_mode.value = "state"
    assert pg.png != step_picture and pg.png.startswith(PNG)
    pg.close()


# ---- reset with a seed, undo -------------------------------------------------------------------------------------

def test_reset_with_a_seed_is_reproducible_and_an_empty_seed_draws_one() -> None:
    pg = EnvPlayground("CartPole-v1", seed=5)
    first = pg.observation["observation"].copy()
    pg.step(0)
    pg.seed_text.value = "5"
    pg.reset_button.click()
    assert pg.seed == 5 and not pg.seed_drawn and np.array_equal(pg.observation["observation"], first)
    pg.seed_text.value = "11"
    pg.reset_button.click()
    reference = gym.make("CartPole-v1")
    assert np.array_equal(pg.observation["observation"], reference.reset(seed=11)[0])
    pg.seed_text.value = ""
    pg.reset_button.click()
    assert pg.seed_drawn and isinstance(pg.seed, int) and f"seed {pg.seed} (drawn)" in pg.header.value
    assert np.array_equal(pg.observation["observation"], reference.reset(seed=pg.seed)[0])
    pg.seed_text.value = "abc"
    pg.reset_button.click()
    assert pg.error.startswith("ValueError: the seed must be a whole number") and pg.error_html.layout.display is None
    pg.close()


def test_undo_and_go_back_give_the_observations_seen_before() -> None:
    pg = EnvPlayground(masked_env_factory(), seed=2, action_masks={"cut_rotation": "cutting_mask"})
    seen = [pg.observation]
    for i in range(8):
        if pg.actor_id.step_key == 0:
            pg.step({"piece_idx": int(np.argmax(pg.observation["inventory_mask"]))})
        else:
            pg.step({"cut_rotation": int(np.argmax(pg.observation["cutting_mask"])), "cut_order": i % 2})
        seen.append(pg.observation)
    returns = [0.0, *np.cumsum([s.reward for s in pg.history])]
    pg.undo_button.click()
    assert pg.step_count == 7 and _same_obs(pg.observation, seen[7]) and pg.replay_note == ""
    pg.history_list.value = 3
    pg.go_back_button.click()
    assert pg.step_count == 3 and _same_obs(pg.observation, seen[3])
    assert pg.episode_return == pytest.approx(returns[3])
    assert pg.actor_id.step_key == 1  # back in the middle of a step: the cutting sub-step acts next
    pg.go_to(0)
    assert pg.step_count == 0 and _same_obs(pg.observation, seen[0])
    with pytest.raises(IndexError, match=r"0\.\.0"):
        pg.go_to(1)
    pg.close()

    pendulum = EnvPlayground("Pendulum-v1", seed=4)
    for a in (0.5, -1.0, 2.0):
        pendulum.step(np.array([a], dtype=np.float32))
    before = pendulum.history[1].observation["observation"].copy()
    pendulum.undo(1)
    assert np.array_equal(pendulum.observation["observation"], before)
    pendulum.close()


def test_undo_says_so_where_the_env_ignores_its_seed() -> None:
    pg = EnvPlayground(Wobbly(), seed=1)
    pg.step(0)
    pg.step(1)
    pg.undo()
    assert pg.step_count == 1 and "not deterministic given its seed" in pg.replay_note
    assert "not deterministic" in pg.step_html.value
    pg.close()


def _same_obs(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


# ---- errors --------------------------------------------------------------------------------------------------------

def test_an_error_of_the_env_is_one_line_in_the_playground() -> None:
    pg = EnvPlayground(Breaks(), seed=0)
    pg.buttons("action")[0].click()
    pg.buttons("action")[1].click()
    assert pg.error == "RuntimeError: the valve is stuck"
    shown = pg.error_html.value
    assert "the valve is stuck" in shown and "second line" not in shown and "Traceback" not in shown
    assert "\n" not in shown and pg.error_html.layout.display is None
    assert isinstance(pg.last_exception, RuntimeError) and pg.step_count == 1
    with pytest.raises(RuntimeError, match="valve"):
        pg.step(1)  # the Python method raises too
    pg.undo_button.click()  # the replay of what went well clears the error
    assert pg.error == "" and pg.error_html.layout.display == "none" and pg.step_count == 0
    pg.close()
    with pytest.raises(TypeError, match="gymnasium.Env, a registered Gymnasium env id"):
        EnvPlayground(42)
    with pytest.raises(ValueError, match="not a registered Gymnasium env"):
        EnvPlayground("NoSuchEnv-v0")


# ---- the policy ----------------------------------------------------------------------------------------------------

def test_a_trained_run_acts_with_its_probabilities_per_head(cutting_run: Path) -> None:
    pg = EnvPlayground(masked_env_factory(), policy=cutting_run, seed=0, action_masks={"cut_rotation": "cutting_mask"})
    assert pg.run is not None and not pg.policy_box.layout.display
    probs = pg.probabilities
    assert list(probs) == ["piece_idx"] and probs["piece_idx"]["kind"] == "categorical"
    p = probs["piece_idx"]["probs"]
    assert p.shape == (50,) and p.sum() == pytest.approx(1.0, abs=1e-6)
    masked = pg.observation["inventory_mask"] == 0
    assert np.all(p[masked] == 0)  # the policy's network applies the mask too
    assert "maze-lab-pg-bars" in pg.probs_html.value and "data-head='piece_idx'" in pg.probs_html.value
    pg.act_button.click()
    assert pg.error == "" and pg.step_count == 1 and pg.history[-1].by_policy
    assert pg.history[-1].action["piece_idx"] == int(np.argmax(p))  # most likely action, from these probabilities
    assert pg.history[-1].probabilities["piece_idx"]["probs"] is p
    probs = pg.probabilities
    assert sorted(probs) == ["cut_order", "cut_rotation"]
    for head, summary in probs.items():
        assert summary["probs"].sum() == pytest.approx(1.0, abs=1e-6), head
    taken = pg.act(9)
    assert taken == 9 and pg.step_count == 10 and all(s.by_policy for s in pg.history)
    assert pg.env_steps == 5 and pg.kpis
    pg.deterministic.value = False
    pg.act(4)
    assert pg.step_count == 14 and pg.error == ""
    for s in pg.history:
        for head, summary in s.probabilities.items():
            assert summary["probs"].sum() == pytest.approx(1.0, abs=1e-6)
            assert summary["probs"][int(s.action[head])] > 0  # sampled actions have a probability
    # undo keeps who acted
    pg.undo(2)
    assert pg.step_count == 12 and all(s.by_policy for s in pg.history) and pg.replay_note == ""
    # the run's env, when no env is given
    own = EnvPlayground(policy=cutting_run, seed=0)
    assert type(own.env).__name__ == "MaskedStructuredCutting2DEnvironment" and own.probabilities
    own.act(2)
    assert own.step_count == 2
    own.close()
    pg.close()


def test_the_policy_acts_n_steps_and_stops_at_the_end_of_the_episode(cutting_run: Path) -> None:
    pg = EnvPlayground(masked_env_factory(), policy=cutting_run, seed=0)
    taken = pg.act(1000)
    assert taken == 360 and pg.done and pg.truncated and pg.env_steps == 180
    assert pg.act_button.disabled and "the episode ended" in pg.probs_html.value
    assert 0 < pg.kpis["raw_piece_usage_per_step"] < 1 and "KPIs of the episode<" in pg.step_html.value
    assert pg.act(3) == 0
    pg.close()


def test_a_policy_without_probabilities_and_a_run_context(tmp_path: Path) -> None:
    from maze_lab.examples.cutting2d import GreedyPolicy

    pg = EnvPlayground(masked_env_factory(), policy=GreedyPolicy(), seed=0)
    assert pg.probabilities is None and "gives no probabilities" in pg.probs_html.value
    assert pg.act(4) == 4 and pg.error == "" and pg.last_reward is not None
    pg.close()

    rc = RunContext(overrides={**TINY, "log_base_dir": str(tmp_path)}, silent=True)
    rc.train()
    pg = EnvPlayground("CartPole-v1", policy=rc, seed=0)
    probs = pg.probabilities["action"]["probs"]
    assert probs.shape == (2,) and probs.sum() == pytest.approx(1.0, abs=1e-6)
    pg.act_n.value = 3
    pg.act_n_button.click()  # no running event loop here: the steps are taken at once
    assert pg.step_count == 3 and pg.error == ""
    pg.close()
    rc.close()


def _flatten_concat_policy(env, **networks):  # noqa: ANN001, ANN202 - a test helper
    """An untrained TorchPolicy of the built-in flatten-concat model for ``env``."""
    from omegaconf import OmegaConf

    from maze_lab.agent.composers import build_model_composer
    from maze_lab.conf import __file__ as conf_init

    cfg = OmegaConf.to_container(OmegaConf.load(Path(conf_init).parent / "model" / "flatten_concat.yaml"))
    cfg["policy"]["networks"].update(networks)
    return build_model_composer(cfg, env.action_spaces_dict, env.observation_spaces_dict,
                                env.agent_counts_dict).policy


def test_box_and_multi_binary_heads_of_a_policy_and_masks_the_policy_applies() -> None:
    from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv

    env = GymMazeEnv("Pendulum-v1")
    pendulum = EnvPlayground(env, policy=_flatten_concat_policy(env), seed=0)
    summary = pendulum.probabilities["action"]
    assert summary["kind"] == "gaussian" and summary["mean"].shape == (1,) and np.all(summary["std"] > 0)
    assert "maze-lab-pg-gaussian" in pendulum.probs_html.value
    assert pendulum.act(2) == 2 and pendulum.error == "" and pendulum.history[-1].action["action"].shape == (1,)
    pendulum.close()

    env = GymMazeEnv(Switches())
    switches = EnvPlayground(env, policy=_flatten_concat_policy(env), seed=0)
    summary = switches.probabilities["action"]
    assert summary["kind"] == "bernoulli" and summary["probs"].shape == (3,)
    assert np.all((summary["probs"] > 0) & (summary["probs"] < 1))
    assert switches.act(1) == 1 and set(switches.history[-1].action["action"].tolist()) <= {0, 1}
    switches.close()

    env = masked_env_factory()
    policy = _flatten_concat_policy(env, action_masks={"piece_idx": "inventory_mask", "cut_rotation": "cutting_mask"})
    pg = EnvPlayground(env, policy=policy, seed=0)
    assert pg.masks[0]["piece_idx"].how == "policy" and pg.masks[1]["cut_rotation"].how == "policy"
    assert pg.mask_notes == []
    pg.act(1)
    assert np.array_equal([b.disabled for b in pg.buttons("cut_rotation")], pg.observation["cutting_mask"] == 0)
    pg.close()


def test_a_run_directory_is_loaded_under_the_trust_rules(cutting_run: Path, tmp_path: Path) -> None:
    from maze_lab.core.utils.factory import TrustError

    copy = tmp_path / "run"
    shutil.copytree(cutting_run, copy)
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["model"]["policy"]["networks"]["_target_"] = "os.system"
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(TrustError, match="os.system"):
        EnvPlayground(masked_env_factory(), policy=copy)


# ---- a real kernel ------------------------------------------------------------------------------------------------

def test_the_playground_in_a_kernel(cutting_run: Path, tmp_path: Path) -> None:
    """Displayed in a real kernel, the playground is a widget view; its buttons step, and "steps" lets the policy
    act on the kernel's event loop between cells (one picture per step) until it is done."""
    pytest.importorskip("jupyter_client")
    import os

    from kernel_utils import Kernel

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),  # the tests' helpers
                                         os.environ.get("PYTHONPATH", "")])}
    kernel = Kernel.start(cwd=tmp_path, env=env)
    try:
        cell = kernel.ok(textwrap.dedent(f"""
            from cutting2d_training import masked_env_factory
            from maze_lab.widgets import EnvPlayground
            pg = EnvPlayground(masked_env_factory(), policy={str(cutting_run)!r}, seed=0,
                               action_masks={{"cut_rotation": "cutting_mask"}})
            pg
            """), timeout=300)
        shown = [m for m in kernel.messages if m["msg_type"] == "display_data"
                 and m["parent_header"].get("msg_id") == cell.msg_id]
        assert shown and "application/vnd.jupyter.widget-view+json" in shown[0]["content"]["data"]
        assert kernel.value("pg.error") == ""
        kernel.ok("pg.buttons('piece_idx')[0].click(); pg._group(pg.actor_id)[2].click()")
        assert kernel.value("[pg.step_count, pg.env_steps, pg.error]") == [2, 1, ""]
        kernel.ok("pg.act_n.value = 6; pg.act_n_button.click()")
        kernel.wait_for("pg.step_count == 8 and pg.act_n_button.description == 'steps'", timeout=120)
        assert kernel.value("[pg.error, all(s.by_policy for s in pg.history[2:]), len(pg.png) > 1000]") == [
            "", True, True]
        assert kernel.value("[pg.act_button.disabled, pg.act_n_button.disabled]") == [False, False]
        # a long run of the policy goes on between cells, and its button stops it
        kernel.ok("pg.act_n.value = 1000; pg.act_n_button.click()")
        kernel.wait_for("pg.step_count >= 14", timeout=120)
        assert kernel.value("pg.act_n_button.description") == "stop"
        kernel.ok("pg.act_n_button.click()")
        kernel.wait_for("pg.act_n_button.description == 'steps'", timeout=60)
        stopped = kernel.value("pg.step_count")
        assert 14 <= stopped < 300 and not kernel.value("pg.done")
        assert kernel.value("pg.step_count") == stopped and kernel.value("pg.error") == ""
    finally:
        kernel.close()
