"""Trajectory recording: round trips to disk, the class allow-list, unfinished episodes, the rollout runner."""

from __future__ import annotations

import enum
import json
import sys
import warnings
import zipfile
from dataclasses import dataclass

import numpy as np
import pytest

from maze_lab.agent.random_policy import RandomPolicy
from maze_lab.core.env.structured_env import ActorID
from maze_lab.core.log_stats.base_events import BaseEnvEvents
from maze_lab.core.rollout import SequentialRolloutRunner
from maze_lab.core.trajectory import (
    ClassAllowList,
    EpisodeData,
    NotATrajectoryFileError,
    TrajectoryRecordingWrapper,
    UntrustedClassWarning,
    list_episodes,
    load_episode,
    read_episode_header,
    rebuild_renderer,
)
from maze_lab.core.trajectory.serialization import Decoder, Encoder
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.examples.cutting2d import (
    SIMPLE_PROBLEM,
    Cutting2DMazeAction,
    Cutting2DMazeState,
    Cutting2DRenderer,
    GreedyPolicy,
    make_masked_env,
)

SHORT_PROBLEM = {**SIMPLE_PROBLEM, "max_steps": 25}


def _drive(env, policy, seed: int) -> dict:
    """Run one episode, keeping our own copy of everything the recorder should store."""
    live = {"obs": [], "actions": [], "rewards": [], "actors": [], "states": [], "maze_actions": []}
    obs, _ = env.reset(seed=seed)
    time = env.get_env_time()
    while True:
        actor = env.actor_id()
        if not live["states"] or env.get_env_time() != time:
            time = env.get_env_time()
        if len(live["states"]) == time:  # the first sub-step of a new env step
            live["states"].append(env.get_maze_state())
        action = policy.compute_action(obs, actor, env=env)
        live["obs"].append({k: np.array(v, copy=True) for k, v in obs.items()})
        live["actions"].append(dict(action))
        live["actors"].append(actor)
        obs, reward, terminated, truncated, _ = env.step(action)
        live["rewards"].append(reward)
        if env.get_env_time() != time:
            live["maze_actions"].append(env.get_maze_action())
        if terminated or truncated:
            live["final"] = env.get_maze_state()
            return live


def test_masked_cutting2d_round_trip(tmp_path):
    """Every sub-step's observation, action and reward, and every MazeState/MazeAction survive the file."""
    env = TrajectoryRecordingWrapper(make_masked_env(**SHORT_PROBLEM), trajectory_dir=tmp_path, keep_episodes=True)
    policy = GreedyPolicy()
    lives = [_drive(env, policy, seed) for seed in (0, 1)]
    files = list_episodes(tmp_path)
    assert files == env.written and len(files) == 2
    for live, path, kept in zip(lives, files, env.episodes, strict=True):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the env's classes are maze-lab's own: no warnings
            ep = load_episode(path)
        assert ep.path == path and path.name == f"{ep.episode_id}.trajectory.zip"
        assert ep.finished and ep.n_steps == 25 and ep.n_substeps == 50
        assert ep.steps[-1].truncated and not ep.steps[-1].terminated
        subs = ep.substeps()
        assert [s.actor_id for s in subs] == live["actors"] == [ActorID(k, 0) for _ in range(25) for k in (0, 1)]
        for sub, obs, action, reward in zip(subs, live["obs"], live["actions"], live["rewards"], strict=True):
            assert sub.observation.keys() == obs.keys()
            for k in obs:
                assert sub.observation[k].dtype == obs[k].dtype
                np.testing.assert_array_equal(sub.observation[k], obs[k])
            assert {k: int(v) for k, v in sub.action.items()} == action
            assert sub.reward == reward
        assert [s.maze_state for s in ep.steps] == live["states"]
        assert all(isinstance(s.maze_state, Cutting2DMazeState) for s in ep.steps)
        assert [s.maze_action for s in ep.steps] == live["maze_actions"]
        assert isinstance(ep.steps[0].maze_action, Cutting2DMazeAction)
        assert ep.final_maze_state == live["final"]
        assert ep.total_reward == sum(live["rewards"])
        # events are plain dicts; the cutting sub-step fires them, the selection sub-step none
        assert ep.steps[0].substeps[0].events == []
        names = [f"{e['topic']}.{e['event']}" for e in ep.steps[0].events]
        assert "CuttingEvents.valid_cut" in names and "InventoryEvents.pieces_in_inventory" in names
        valid = next(e for e in ep.steps[0].events if e["event"] == "valid_cut")
        assert valid["attributes"]["current_demand"] == (1, 2)
        assert ep.reset_events == [{"topic": "InventoryEvents", "event": "piece_replenished", "attributes": {}}]
        assert ep.renderer == "maze_lab.examples.cutting2d.env.renderer.Cutting2DRenderer"
        assert isinstance(ep.make_renderer(), Cutting2DRenderer)
        obs0, act0 = ep.stacked(0)
        assert obs0["inventory"].shape == (25, 50, 2) and act0["piece_idx"].shape == (25,)
        # the in-memory record equals the loaded one
        assert kept.episode_id == ep.episode_id and kept.path == path
        assert [s.maze_state for s in kept.steps] == live["states"]
        np.testing.assert_array_equal(kept.stacked(1)[0]["cutting_mask"], ep.stacked(1)[0]["cutting_mask"])
    header = read_episode_header(files[1])
    assert header["n_steps"] == 25 and header["metadata"]["seed"] == 1 and header["metadata"]["episode_index"] == 1


def test_cartpole_round_trip(tmp_path):
    """Gymnasium envs: the observation is the MazeState; the live-only renderer is recorded but not rebuilt."""
    env = TrajectoryRecordingWrapper(GymMazeEnv("CartPole-v1"), trajectory_dir=tmp_path)
    policy = RandomPolicy(env.action_spaces_dict, seed=3)
    live = _drive(env, policy, seed=3)
    ep = load_episode(env.last_episode_path)
    assert ep.n_steps == len(live["rewards"]) and ep.steps[-1].terminated
    for sub, obs, action in zip(ep.substeps(), live["obs"], live["actions"], strict=True):
        np.testing.assert_array_equal(sub.observation["observation"], obs["observation"])
        assert sub.observation["observation"].dtype == np.float32
        assert sub.action["action"] == action["action"]
    for step, state in zip(ep.steps, live["states"], strict=True):
        np.testing.assert_array_equal(step.maze_state, state)
    assert [int(s.maze_action) for s in ep.steps] == [int(a) for a in live["maze_actions"]]
    assert ep.rewards.tolist() == live["rewards"]
    assert ep.metadata["gym_env_id"] == "CartPole-v1"
    renderer, why = rebuild_renderer(ep.renderer)
    assert renderer is None and "GymRenderer" in why and "live env" in why


def test_classes_outside_the_allow_list_load_as_dicts_without_running_code(tmp_path, monkeypatch):
    """A file naming a module that would run code on import loads as plain data, with a warning."""
    env = TrajectoryRecordingWrapper(make_masked_env(**{**SIMPLE_PROBLEM, "max_steps": 3}), trajectory_dir=tmp_path)
    _drive(env, GreedyPolicy(), seed=0)
    # a module that leaves a mark when imported, importable from sys.path
    marker = tmp_path / "imported.txt"
    (tmp_path / "evil_payload_mod.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "class Payload:\n"
        "    @classmethod\n"
        "    def from_dict(cls, d):\n"
        f"        open({str(marker)!r}, 'w').write('from_dict ran')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data = EpisodeData.read(env.written[0])
    data.steps[0]["maze_state"]["class"] = "evil_payload_mod.Payload"
    data.steps[1]["maze_action"] = {"__t__": "dataclass", "class": "evil_payload_mod.Payload", "data": {"x": 1}}
    data.header["renderer"] = "evil_payload_mod.Payload"
    tampered = data.write(tmp_path / "tampered")
    with pytest.warns(UntrustedClassWarning, match="evil_payload_mod.Payload.*not on the allow-list"):
        ep = load_episode(tampered)
    assert not marker.exists() and "evil_payload_mod" not in sys.modules
    assert ep.steps[0].maze_state == {"inventory": [[4, 3]], "max_pieces_in_inventory": 50, "current_demand": [1, 2],
                                      "raw_piece_size": [4, 3]}
    assert ep.steps[1].maze_action == {"x": 1}
    assert isinstance(ep.steps[1].maze_state, Cutting2DMazeState)  # the allowed classes are still rebuilt
    assert "evil_payload_mod.Payload" in ep.refused_classes
    renderer, why = rebuild_renderer(ep.renderer)
    assert renderer is None and "allow-list" in why
    assert ep.make_renderer() is None and not marker.exists()

    # without maze-lab's defaults even the env's own classes stay plain dicts
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bare = load_episode(env.written[0], ClassAllowList(include_defaults=False))
    refused = {str(w.message).split("'")[1] for w in caught if w.category is UntrustedClassWarning}
    assert refused == {"maze_lab.examples.cutting2d.env.maze_state.Cutting2DMazeState",
                       "maze_lab.examples.cutting2d.env.maze_state.Cutting2DMazeAction"}
    assert isinstance(bare.steps[0].maze_state, dict) and isinstance(bare.final_maze_state, dict)
    # an allowed prefix does not open the modules that code there imports
    allow = ClassAllowList()
    assert allow.allows("maze_lab.core.trajectory.files.zipfile.ZipFile")
    assert allow.resolve("maze_lab.core.trajectory.files.zipfile.ZipFile") is None
    assert allow.resolve("maze_lab.examples.cutting2d.env.maze_state.Cutting2DMazeState") is Cutting2DMazeState


def test_arrays_are_read_without_pickle(tmp_path):
    """Episode files are zip archives of JSON and plain .npy arrays; object arrays are refused on write."""
    env = TrajectoryRecordingWrapper(make_masked_env(**{**SIMPLE_PROBLEM, "max_steps": 2}), trajectory_dir=tmp_path)
    _drive(env, GreedyPolicy(), seed=0)
    with zipfile.ZipFile(env.written[0]) as zf:
        names = zf.namelist()
        assert names[:2] == ["episode.json", "steps.jsonl"]
        assert all(n.startswith("arrays/") and n.endswith(".npy") for n in names[2:])
        json.loads(zf.read("episode.json"))
    data = EpisodeData.read(env.written[0])
    data.arrays = {**data.arrays, "arrays/0.npy": np.array([object()], dtype=object)}
    with pytest.raises(TypeError, match="dtype object"):
        data.write(tmp_path / "bad")
    (tmp_path / "junk.trajectory.zip").write_bytes(b"not a zip")
    with pytest.raises(NotATrajectoryFileError, match="not a maze-lab trajectory file"):
        load_episode(tmp_path / "junk.trajectory.zip")
    with pytest.raises(NotADirectoryError):
        list_episodes(tmp_path / "missing")


class Color(enum.Enum):
    """A test enum."""

    RED = 1


@dataclass
class Point:
    """A test dataclass."""

    x: int
    y: tuple


def test_encoder_round_trips_values():
    """Tuples, numpy scalars, small and large arrays, non-string keys, enums and dataclasses come back equal."""
    big: dict[str, np.ndarray] = {}

    def sink(arr: np.ndarray) -> str:
        big[f"arrays/x{len(big)}.npy"] = arr
        return f"arrays/x{len(big) - 1}.npy"

    value = {"t": (1, 2.5, "a"), "s": np.float32(1.5), "i": np.int64(7), "small": np.arange(6, dtype=np.int16)
             .reshape(2, 3), "big": np.linspace(0, 1, 1000), "keys": {1: "a", (2, 3): "b"}, "none": None,
             "color": Color.RED, "point": Point(1, (2, 3)), "nan": float("nan")}
    encoder = Encoder(sink)
    encoded = json.loads(json.dumps(encoder.encode(value)))
    assert encoder.classes == {f"{__name__}.Color", f"{__name__}.Point"}
    back = Decoder(ClassAllowList(encoder.classes), big.__getitem__).decode(encoded)
    assert back["t"] == (1, 2.5, "a") and back["s"] == np.float32(1.5) and back["s"].dtype == np.float32
    assert back["i"].dtype == np.int64
    assert back["small"].dtype == np.int16 and back["small"].tolist() == [[0, 1, 2], [3, 4, 5]]
    np.testing.assert_array_equal(back["big"], value["big"])
    assert back["keys"] == {1: "a", (2, 3): "b"} and back["none"] is None
    assert back["color"] is Color.RED and back["point"] == Point(1, (2, 3)) and np.isnan(back["nan"])


def test_unfinished_episode_is_written_on_reset(tmp_path):
    """An episode cut off by reset (here after the piece selection) is written, marked unfinished."""
    env = TrajectoryRecordingWrapper(make_masked_env(**SIMPLE_PROBLEM), trajectory_dir=tmp_path)
    policy = GreedyPolicy()
    obs, _ = env.reset(seed=0)
    for _ in range(5):  # two full steps and a piece selection
        obs, *_ = env.step(policy.compute_action(obs, env.actor_id(), env=env))
    env.reset(seed=1)
    env.close()  # the fresh episode has no steps: nothing more is written
    assert len(env.written) == 1
    ep = load_episode(env.written[0])
    assert not ep.finished and ep.n_steps == 3 and ep.n_substeps == 5
    assert ep.steps[-1].maze_action is None and [a.step_key for a in ep.steps[-1].actor_ids] == [0]
    assert ep.steps[1].maze_action is not None


def test_sequential_rollout_runner_with_heuristic_and_torch_policies(tmp_path):
    """The runner adds statistics and recording, returns episode statistics and writes one file per episode."""
    runner = SequentialRolloutRunner(lambda: make_masked_env(**SIMPLE_PROBLEM), GreedyPolicy(), n_episodes=2,
                                     max_episode_steps=30, trajectory_dir=tmp_path / "greedy", seed=0, writers=[])
    result = runner.run()
    assert result.episode_lengths == [30, 30] and len(result.episode_stats) == 2
    assert result.stat(BaseEnvEvents.reward, "mean") == pytest.approx(result.mean_reward)
    assert result.stat(BaseEnvEvents.reward, "episode_count") == 2
    assert result.trajectory_paths == list_episodes(tmp_path / "greedy")
    ep = load_episode(result.trajectory_paths[1])
    assert ep.total_reward == result.episode_rewards[1] and ep.n_steps == 30
    assert ep.metadata["policy"] == "GreedyPolicy" and ep.metadata["seed"] == 1

    import torch

    from maze_lab.agent import TorchPolicy
    from maze_lab.distributions import DistributionMapper
    from maze_lab.perception.models.built_in import FlattenConcatPolicyNet

    torch.manual_seed(0)
    space = GymMazeEnv("CartPole-v1", render_mode=None).action_spaces_dict[0]
    policy = TorchPolicy([FlattenConcatPolicyNet({"observation": (4,)}, {"action": (2,)}, hidden_units=[8])],
                         DistributionMapper(space))
    result = SequentialRolloutRunner(lambda: GymMazeEnv("CartPole-v1", render_mode=None), policy, n_episodes=2,
                                     trajectory_dir=tmp_path / "torch", deterministic=True, seed=5, writers=[]).run()
    assert len(result.trajectory_paths) == 2
    for path, reward in zip(result.trajectory_paths, result.episode_rewards, strict=True):
        ep = load_episode(path)
        assert ep.total_reward == reward and ep.renderer is None and ep.metadata["deterministic"] is True
        # the recorded actions are what the deterministic policy picks for the recorded observations
        for sub in ep.substeps()[:5]:
            assert policy.compute_action(sub.observation, deterministic=True)["action"] == sub.action["action"]
    with pytest.raises(ValueError, match="n_episodes"):
        SequentialRolloutRunner(lambda: None, policy, n_episodes=0)


def test_observations_that_cannot_be_stacked_are_stored_inline():
    """Observations whose shapes change between sub-steps are kept per sub-step, unchanged."""
    from maze_lab.core.trajectory.recorder import EpisodeBuilder

    builder = EpisodeBuilder("e", {"episode_id": "e"})
    rows = [{"x": np.arange(n, dtype=np.float32)} for n in (2, 3, 400)]
    for i, obs in enumerate(rows):
        builder.begin_step({"t": i}, None)
        builder.add_substep(ActorID(0, 0), obs, {"a": np.int8(i)}, 1.0, False, i == 2, {}, [])
        builder.end_step(None)
    data = builder.finish(None, finished=True)
    assert data.header["arrays"] == [] and "arrays/x0.npy" in data.arrays  # the 400-element row is a member
    ep = data.decode()
    for sub, obs in zip(ep.substeps(), rows, strict=True):
        np.testing.assert_array_equal(sub.observation["x"], obs["x"])
        assert sub.observation["x"].dtype == np.float32
    assert [int(s.action["a"]) for s in ep.substeps()] == [0, 1, 2] and ep.steps[2].truncated
