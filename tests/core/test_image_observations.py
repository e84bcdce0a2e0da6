"""Pixel observations: an env whose observation is a uint8 image trains with PPO, A2C, SAC and IMPALA, with the
default model and with a CNN, and is acted on by the trained policy (``compute_action``, rollouts, deployment).
The networks see float32 values of the image as the env gave them (0..255: nothing rescales an image silently)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from image_env import EPISODE_STEPS, BrightSideEnv, MissionEnv, make_env

from maze_lab import RunContext
from maze_lab.agent.torch_model import float_observation


def cnn_model() -> dict:
    """The template model (``model=vector_obs``) with the image through a small VGG-style conv stack instead of its
    dense block."""
    import maze_lab.conf

    cfg = yaml.safe_load((Path(maze_lab.conf.__file__).parent / "model" / "vector_obs.yaml").read_text())
    builder = cfg["model_builder"]
    builder["observation_modality_mapping"] = {"observation": "image"}
    builder["modality_config"]["image"] = {"block_type": "maze_lab.perception.blocks.VGGConvolutionDenseBlock",
                                           "block_params": {"hidden_channels": [4], "hidden_units": [16],
                                                            "non_lin": "torch.nn.ReLU"}}
    return cfg


TINY = {"n_epochs": 1, "algorithm.epoch_length": 2, "algorithm.eval_repeats": 1}


def _context(algorithm: str, model: str, base: Path, **overrides: object) -> RunContext:
    kwargs: dict = {"critic": "state_action"} if algorithm == "sac" else {}
    if model == "cnn":
        kwargs["model"] = cnn_model()
        if algorithm == "sac":  # Q networks, built by the template from the image too, not its V critic
            kwargs["model"]["critic"] = {
                "_target_": "maze_lab.agent.composers.critics.SharedStateActionCriticComposer", "num_q_networks": 2}
    if algorithm == "sac":
        overrides = {"algorithm.initial_buffer_size": 16, "algorithm.batch_size": 16, **overrides}
    return RunContext(env=make_env, algorithm=algorithm, overrides={**TINY, "log_base_dir": str(base), **overrides},
                      silent=True, **kwargs)


@pytest.mark.parametrize("model", ["default", "cnn"])
@pytest.mark.parametrize("algorithm", ["ppo", "a2c", "sac", "impala"])
def test_uint8_images_train_and_act(algorithm: str, model: str, tmp_path: Path) -> None:
    rc = _context(algorithm, model, tmp_path)
    rc.train()
    from maze_lab import load_run

    assert load_run(rc.run_dir).summary["status"] == "done"
    stats = rc.stats
    assert len(stats) and np.isfinite(stats.value.to_numpy(dtype=float)).all()
    image = BrightSideEnv().observation_space.sample()
    assert image.dtype == np.uint8
    action = rc.compute_action({"observation": image}, deterministic=True)
    assert int(np.asarray(action["action"])) in (0, 1)
    result = rc.rollout(n_episodes=1, seed=3, record_trajectory=False)
    assert len(result.episode_rewards) == 1
    rc.close()


def test_float_observation_keeps_values() -> None:
    obs = {"image": torch.tensor([[0, 128, 255]], dtype=torch.uint8), "mask": torch.tensor([True, False]),
           "count": torch.tensor([3], dtype=torch.int64), "x": torch.tensor([0.5], dtype=torch.float64),
           "y": torch.tensor([1.5])}
    out = float_observation(obs)
    assert all(v.dtype == torch.float32 for v in out.values())
    assert out["image"].tolist() == [[0.0, 128.0, 255.0]]  # not rescaled
    assert out["mask"].tolist() == [1.0, 0.0] and out["count"].tolist() == [3.0]
    assert out["y"] is obs["y"]  # float32 entries are passed through, not copied


@pytest.mark.slow
def test_ppo_learns_from_pixels(tmp_path: Path) -> None:
    """With the CNN and a fixed seed PPO learns which half holds the bright pixel: the deterministic policy earns
    nearly all of the 8 points of an episode where a random one earns about 4."""
    rc = _context("ppo", "cnn", tmp_path, n_epochs=8, seed=5, **{"algorithm.epoch_length": 4})
    rc.train()
    result = rc.rollout(n_episodes=10, seed=100, deterministic=True, record_trajectory=False)
    assert result.mean_reward >= 0.9 * EPISODE_STEPS, result.episode_rewards
    rc.close()


@pytest.mark.parametrize("extra", [None, gym.spaces.Graph(gym.spaces.Box(0, 1, (2,)), None),
                                   gym.spaces.Sequence(gym.spaces.Discrete(3))], ids=["text", "graph", "sequence"])
def test_unsupported_observation_spaces_are_refused_when_the_model_is_built(extra: gym.spaces.Space | None,
                                                                            tmp_path: Path) -> None:
    """A Text (MiniGrid's ``mission``), Graph or Sequence entry is refused before anything steps, naming the key,
    the space and the ways out; the same env without the key trains."""
    from maze_lab import GymMazeEnv
    from maze_lab.core.utils.factory import ConfigurationError

    rc = RunContext(env=lambda: GymMazeEnv(MissionEnv(extra)),
                    overrides={**TINY, "log_base_dir": str(tmp_path)}, silent=True)
    with pytest.raises(ConfigurationError) as err:
        rc.train()
    message = str(err.value)
    assert "\n" not in message
    assert "observation 'mission'" in message and type(MissionEnv(extra).observation_space["mission"]).__name__ \
        in message
    assert "FilterObservation" in message and "encode" in message
    assert len(rc.stats) == 0  # refused before the first step

    filtered = RunContext(env=lambda: GymMazeEnv(gym.wrappers.FilterObservation(MissionEnv(extra),
                                                                                 ["image", "direction"])),
                          overrides={**TINY, "log_base_dir": str(tmp_path)}, silent=True)
    filtered.train()
    assert len(filtered.stats)
