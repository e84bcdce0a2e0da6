"""Builders for training on the masked structured Cutting-2D env from its shipped configs (tests, benchmarks)."""

from __future__ import annotations

import torch
from omegaconf import OmegaConf

from maze_lab.agent.composers import build_model_composer
from maze_lab.examples.cutting2d import CONF_DIR, make_masked_env
from maze_lab.train.trainers.common.evaluator import RolloutEvaluator
from maze_lab.train.trainers.ppo import PPO, PPOAlgorithmConfig
from maze_lab.train.vector_env import SequentialVectorEnv

_ENV = {k: v for k, v in OmegaConf.to_container(OmegaConf.load(f"{CONF_DIR}/env/cutting2d_struct_masked.yaml")).items()
        if k != "_target_"}


def masked_env_factory():
    """The simple problem of the seed (raw piece 4x3, six orders, 180 steps), masked and structured."""
    return make_masked_env(**_ENV)


OPTIMUM_REWARD = -30.0
"""Reward of the optimum of the simple problem: 31 raw pieces in 180 steps, of which the env charges the 30 it
replenishes (the piece an episode starts with is free; the seed's "-31" counts it too)."""


def masked_ppo(seed: int, n_envs: int = 8, n_rollout_steps: int = 64,
               model: str = "cutting2d_struct_masked_slots") -> PPO:
    """PPO on the masked env with a shipped model config (default: the task-specific model whose selection
    policy scores every inventory slot, as the seed's tutorial does); one update per epoch, deterministic eval.

    :param model: a model config of ``examples/cutting2d/conf/model`` (``cutting2d_struct_masked`` is the
        generic template model).
    """
    torch.manual_seed(seed)
    env = masked_env_factory()
    model_cfg = OmegaConf.to_container(OmegaConf.load(f"{CONF_DIR}/model/{model}.yaml"))
    composer = build_model_composer(model_cfg, env.action_spaces_dict, env.observation_spaces_dict,
                                    env.agent_counts_dict)
    config = PPOAlgorithmConfig(n_epochs=100, epoch_length=1, n_rollout_steps=n_rollout_steps, lr=3e-3,
                                gamma=0.98, gae_lambda=0.95, entropy_coef=0.0, batch_size=512,
                                n_optimization_epochs=8, clip_range=0.2, max_grad_norm=0.5, seed=seed, patience=0)
    evaluator = RolloutEvaluator(SequentialVectorEnv([masked_env_factory], logging_prefix="eval"), n_episodes=1,
                                 deterministic=True)
    return PPO(config, composer.actor_critic(), env=SequentialVectorEnv([masked_env_factory] * n_envs,
                                                                        logging_prefix="train"),
               evaluator=evaluator)


MAZE_PPO_SETTINGS: dict = {
    "lr": 0.00025, "gamma": 0.98, "gae_lambda": 1.0, "policy_loss_coef": 1.0, "value_loss_coef": 0.5,
    "entropy_coef": 0.00025, "max_grad_norm": 0.0, "batch_size": 100, "n_optimization_epochs": 4, "clip_range": 0.2,
    "normalize_advantages": True,
}
"""PPO parameters of the seed system's ``ppo.yaml`` (Maze 0.2 defaults, which its Cutting-2D tutorial trains with);
advantages are normalized per minibatch there too. Its dev runner steps 8 envs (``concurrency: 8``)."""

MAZE_N_ENVS = 8
MAZE_ROLLOUT_SUB_STEPS = 200
"""Maze's ``n_rollout_steps: 100`` counts env steps; each step of the structured env is two sub-steps (selection,
cutting), and maze-lab's ``n_rollout_steps`` counts sub-steps: 200 here is the same rollout."""


def maze_settings_ppo(seed: int, model: str = "cutting2d_struct_masked_maze", n_updates: int = 15,
                      n_envs: int = MAZE_N_ENVS, n_rollout_steps: int = MAZE_ROLLOUT_SUB_STEPS) -> PPO:
    """PPO on the masked env with the seed system's PPO settings and a shipped model config; one update per epoch,
    each followed by one deterministic evaluation episode (the env is deterministic: one episode says it all).

    :param model: a model config of ``examples/cutting2d/conf/model``.
    :param n_updates: the budget in updates (``n_envs * n_rollout_steps`` sub-steps each).
    """
    torch.manual_seed(seed)
    env = masked_env_factory()
    model_cfg = OmegaConf.to_container(OmegaConf.load(f"{CONF_DIR}/model/{model}.yaml"))
    composer = build_model_composer(model_cfg, env.action_spaces_dict, env.observation_spaces_dict,
                                    env.agent_counts_dict)
    config = PPOAlgorithmConfig(n_epochs=n_updates, epoch_length=1, n_rollout_steps=n_rollout_steps, seed=seed,
                                patience=0, **MAZE_PPO_SETTINGS)
    evaluator = RolloutEvaluator(SequentialVectorEnv([masked_env_factory], logging_prefix="eval"), n_episodes=1,
                                 deterministic=True)
    return PPO(config, composer.actor_critic(), env=SequentialVectorEnv([masked_env_factory] * n_envs,
                                                                        logging_prefix="train"),
               evaluator=evaluator)


def holds_from(rewards: list[float], optimum: float = OPTIMUM_REWARD, min_later: int = 0) -> int | None:
    """Index of the first evaluation after which every evaluation (to the end of ``rewards``) is optimal; None when
    the last one is not, or when fewer than ``min_later`` evaluations follow it (a hold too short to mean much)."""
    i = len(rewards)
    while i > 0 and rewards[i - 1] >= optimum:
        i -= 1
    return i if i < len(rewards) and len(rewards) - 1 - i >= min_later else None
