"""Small builders shared by the training tests: CartPole factories and flatten-concat actor-critics."""

from __future__ import annotations

import torch
from torch import nn

from maze_lab.agent.torch_actor_critic import TorchActorCritic
from maze_lab.agent.torch_policy import TorchPolicy
from maze_lab.agent.torch_state_critic import TorchSharedStateCritic
from maze_lab.core.log_stats.writers import LogStatsWriter
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.distributions.distribution_mapper import DistributionMapper
from maze_lab.perception.models.built_in.flatten_concat import FlattenConcatPolicyNet, FlattenConcatStateValueNet


def cartpole_factory() -> GymMazeEnv:
    """CartPole-v1 as a MazeEnv (no rendering)."""
    return GymMazeEnv("CartPole-v1", render_mode=None)


def flat_actor_critic(env, hidden=(64, 64)) -> TorchActorCritic:
    """Flatten-concat policy and shared state critic with tanh layers for a flat env."""
    obs_shapes = {k: s.shape for k, s in env.observation_spaces_dict[0].spaces.items()}
    action_space = env.action_spaces_dict[0]
    logits = {k: (s.n,) for k, s in action_space.spaces.items()}
    policy = TorchPolicy({0: FlattenConcatPolicyNet(obs_shapes, logits, hidden_units=list(hidden), non_lin=nn.Tanh)},
                         DistributionMapper(action_space, []))
    critic = TorchSharedStateCritic({0: FlattenConcatStateValueNet(obs_shapes, hidden_units=list(hidden),
                                                                   non_lin=nn.Tanh)}, env.observation_spaces_dict)
    return TorchActorCritic(policy, critic)


def pendulum() -> GymMazeEnv:
    """Pendulum-v1 as a MazeEnv (no rendering)."""
    return GymMazeEnv("Pendulum-v1", render_mode=None)


def cartpole() -> GymMazeEnv:
    """CartPole-v1 as a MazeEnv (no rendering)."""
    return GymMazeEnv("CartPole-v1", render_mode=None)


FLATTEN = "maze_lab.perception.models.built_in.flatten_concat"


def sac_model(factory, hidden=(64, 64), seed: int = 0) -> TorchActorCritic:
    """A flatten-concat policy and two flatten-concat Q networks (ReLU) for SAC on a flat env."""
    from maze_lab.agent.composers import build_model_composer

    env = factory()
    torch.manual_seed(seed)
    nets = {"non_lin": "torch.nn.ReLU", "hidden_units": list(hidden)}
    cfg = {"_target_": "maze_lab.agent.composers.custom.CustomModelComposer",
           "distribution_mapper_config": [],
           "policy": {"_target_": "maze_lab.agent.composers.policies.ProbabilisticPolicyComposer",
                      "networks": {"_target_": f"{FLATTEN}.FlattenConcatPolicyNet", **nets}},
           "critic": {"_target_": "maze_lab.agent.composers.critics.SharedStateActionCriticComposer",
                      "networks": [{"_target_": f"{FLATTEN}.FlattenConcatStateActionValueNet", **nets}]}}
    return build_model_composer(cfg, env.action_spaces_dict, env.observation_spaces_dict,
                                env.agent_counts_dict).actor_critic()


class MidEpochReader(LogStatsWriter):
    """A writer that reads the StatsStore whenever the trainer writes, i.e. in the middle of an epoch, and asserts
    that every epoch a reader can see is whole: all of ``prefixes`` (and the ``topic``, if given) present.
    ``seen`` keeps (store version, epochs seen) of each look."""

    def __init__(self, store, prefixes: set[str], topic: str | None = None):
        self.store, self.prefixes, self.topic = store, set(prefixes), topic
        self.seen: list[tuple[int, list[int]]] = []

    def write(self, prefix, step, stats) -> None:
        """Look at the store now."""
        df = self.store.to_dataframe()
        epochs = sorted(set(df.epoch))
        for epoch in epochs:
            rows = df[df.epoch == epoch]
            assert set(rows.prefix) == self.prefixes, f"a reader saw half of epoch {epoch}: {set(rows.prefix)}"
            if self.topic is not None:
                assert self.topic in set(rows.topic), f"a reader saw epoch {epoch} without {self.topic} statistics"
        self.seen.append((self.store.version, epochs))
