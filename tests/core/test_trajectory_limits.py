"""Reading a trajectory file is bounded: oversized members, lying headers and arrays are refused before allocation."""

from __future__ import annotations

import io
import json
import tracemalloc
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from file_utils import rewrite_zip

from maze_lab.agent.random_policy import RandomPolicy
from maze_lab.core.trajectory import (
    EpisodeData,
    NotATrajectoryFileError,
    TrajectoryLimits,
    TrajectoryRecordingWrapper,
    TrajectoryTooLargeError,
    UntrustedClassWarning,
    load_episode,
    read_episode_header,
)
from maze_lab.core.trajectory.serialization import ClassAllowList, Decoder
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv

MiB = 1 << 20


@pytest.fixture(scope="module")
def episode_file(tmp_path_factory) -> Path:
    """A real recorded CartPole episode (observations stacked into .npy members)."""
    directory = tmp_path_factory.mktemp("traj")
    env = TrajectoryRecordingWrapper(GymMazeEnv("CartPole-v1"), trajectory_dir=directory)
    policy = RandomPolicy(env.action_spaces_dict, seed=0)
    obs, _ = env.reset(seed=0)
    done = False
    while not done:
        obs, _, terminated, truncated, _ = env.step(policy.compute_action(obs, env.actor_id(), env=env))
        done = terminated or truncated
    env.reset(seed=1)
    env.close()
    return env.written[0]


def _peak_bytes(fn) -> tuple[BaseException | None, int]:
    tracemalloc.start()
    try:
        fn()
        err = None
    except BaseException as e:  # noqa: BLE001 - returned to the test
        err = e
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return err, peak


def test_a_valid_file_reads_its_arrays_only_when_used(episode_file):
    data = EpisodeData.read(episode_file)
    assert len(data.arrays) >= 2 and data.arrays.loaded == []
    record = data.decode()
    assert record.n_steps > 5 and set(data.arrays.loaded) == set(data.arrays)
    assert load_episode(episode_file).n_steps == record.n_steps


def test_a_compressed_bomb_is_refused_before_it_is_inflated(episode_file, tmp_path):
    """65 MiB of blanks compress to about 64 KiB; the default limit for JSON members is 64 MiB."""
    bomb = rewrite_zip(episode_file, tmp_path / "bomb.trajectory.zip", {"steps.jsonl": b" " * (65 * MiB)}, level=9)
    assert bomb.stat().st_size < 1 * MiB
    err, peak = _peak_bytes(lambda: load_episode(bomb))
    assert isinstance(err, TrajectoryTooLargeError)
    assert str(bomb) in str(err) and "'steps.jsonl'" in str(err) and "max_json_bytes" in str(err)
    assert peak < 8 * MiB
    # a caller who raises the limit on purpose gets the streamed reader's line limit next
    with pytest.raises(TrajectoryTooLargeError, match="'steps.jsonl' line 1"):
        load_episode(bomb, limits=TrajectoryLimits(max_json_bytes=100 * MiB))


def test_a_long_line_in_the_steps_is_refused(episode_file, tmp_path):
    steps = zipfile.ZipFile(episode_file).read("steps.jsonl")
    long_line = rewrite_zip(episode_file, tmp_path / "long.trajectory.zip", {"steps.jsonl": b'{"a":"' + b"x" * (2 * MiB)
                                                                         + b'"}\n' + steps})
    with pytest.raises(TrajectoryTooLargeError, match=r"'steps.jsonl' line 1 is longer than the limit of 1,048,576"):
        load_episode(long_line, limits=TrajectoryLimits(max_line_bytes=1 * MiB))


def test_header_size_is_bounded_too(episode_file, tmp_path):
    header = json.loads(zipfile.ZipFile(episode_file).read("episode.json"))
    big = rewrite_zip(episode_file, tmp_path / "h.trajectory.zip",
                   {"episode.json": json.dumps({**header, "pad": "x" * (2 * MiB)}).encode()})
    with pytest.raises(TrajectoryTooLargeError, match="'episode.json'"):
        load_episode(big, limits=TrajectoryLimits(max_json_bytes=1 * MiB))
    assert read_episode_header(big)["pad"] == "x" * (2 * MiB)  # within the default limit


@pytest.mark.parametrize("value, message", [
    ({"__t__": "ndarray", "dtype": "<U100000000", "shape": [1], "data": [""]}, "not a plain numeric dtype"),
    ({"__t__": "ndarray", "dtype": "|V100000000", "shape": [1], "data": [0]}, "not a plain numeric dtype"),
    ({"__t__": "ndarray", "dtype": "|O", "shape": [1], "data": [0]}, "not a plain numeric dtype"),
    ({"__t__": "ndarray", "dtype": "<f8", "shape": [100000000], "data": []}, "needs 100000000 values, got 0"),
    ({"__t__": "ndarray", "dtype": "<f8", "shape": [-1], "data": [1.0]}, "not a list of non-negative integers"),
    ({"__t__": "scalar", "dtype": "<U100000000", "value": "a"}, "not a plain numeric dtype"),
    ({"__t__": "ndarray_str", "shape": [2], "data": ["a", "b" * 100]}, None),
])
def test_inline_arrays_are_checked_before_allocation(value, message):
    """A 100-byte header must not allocate hundreds of MB (an Unicode dtype of 10^8 characters is 400 MB)."""
    dec = Decoder(ClassAllowList(), source="file.trajectory.zip: member 'episode.json'")
    if message is None:
        assert dec.decode(value).tolist() == value["data"]
        return
    err, peak = _peak_bytes(lambda: dec.decode(value))
    assert isinstance(err, NotATrajectoryFileError) and message in str(err)
    assert "file.trajectory.zip: member 'episode.json'" in str(err)
    assert peak < 4 * MiB


def test_a_npy_member_whose_header_lies_is_refused_before_allocation(episode_file, tmp_path):
    member = sorted(n for n in zipfile.ZipFile(episode_file).namelist() if n.endswith(".npy"))[0]
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (10 ** 9,)})
    lying = rewrite_zip(episode_file, tmp_path / "lying.trajectory.zip", {member: buf.getvalue() + b"\0" * 64})
    err, peak = _peak_bytes(lambda: load_episode(lying))
    assert isinstance(err, NotATrajectoryFileError), err
    assert f"member {member!r}" in str(err) and str(lying) in str(err) and "declares (1000000000,)" in str(err)
    assert peak < 4 * MiB

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "|O", "fortran_order": False, "shape": (1,)})
    objects = rewrite_zip(episode_file, tmp_path / "obj.trajectory.zip", {member: buf.getvalue() + b"\0" * 8})
    with pytest.raises(NotATrajectoryFileError, match="not a plain numeric dtype"):
        load_episode(objects)


def test_an_oversized_array_member_is_refused_by_its_declared_size(episode_file, tmp_path):
    member = sorted(n for n in zipfile.ZipFile(episode_file).namelist() if n.endswith(".npy"))[0]
    big = np.zeros(2 * MiB, dtype=np.uint8)
    buf = io.BytesIO()
    np.lib.format.write_array(buf, big, allow_pickle=False)
    path = rewrite_zip(episode_file, tmp_path / "big.trajectory.zip", {member: buf.getvalue()})
    with pytest.raises(TrajectoryTooLargeError, match=f"{member}.*max_array_bytes"):
        load_episode(path, limits=TrajectoryLimits(max_array_bytes=1 * MiB))
    assert load_episode(path, limits=TrajectoryLimits(max_array_bytes=4 * MiB)).n_steps > 0


def test_warnings_never_suggest_allowing_what_is_not_a_class():
    dec = Decoder(ClassAllowList(), source="f.trajectory.zip")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for path in ("os.system", "builtins.eval", "subprocess.check_output", "my_project.state.InventoryState"):
            dec.decode({"__t__": "object", "class": path, "data": {"x": 1}})
    messages = {path: str(w.message) for w, path in zip(caught, ("os.system", "builtins.eval",
                                                                 "subprocess.check_output",
                                                                 "my_project.state.InventoryState"), strict=True)}
    assert all(issubclass(w.category, UntrustedClassWarning) for w in caught)
    for path in ("os.system", "builtins.eval", "subprocess.check_output"):
        assert "allowed_classes" not in messages[path] and "does not name a class" in messages[path]
    assert "allowed_classes=['my_project.state.InventoryState']" in messages["my_project.state.InventoryState"]
