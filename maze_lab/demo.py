"""A first look at maze-lab without training: CartPole through the full wrapper stack, statistics printed."""

from __future__ import annotations

from maze_lab.core.log_stats.writers import ConsoleWriter, StatsStore
from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
from maze_lab.core.wrappers.log_stats_wrapper import LogStatsWrapper
from maze_lab.core.wrappers.monitoring_wrapper import MazeEnvMonitoringWrapper


def run_demo(env_id: str = "CartPole-v1", n_epochs: int = 2, episodes_per_epoch: int = 5, seed: int = 0) -> StatsStore:
    """Run random episodes through GymMazeEnv + monitoring + LogStats and print each epoch's table."""
    store = StatsStore()
    env = GymMazeEnv(env_id, render_mode=None)
    env = MazeEnvMonitoringWrapper.wrap(env, observation_logging=True, action_logging=True, reward_logging=True)
    env = LogStatsWrapper.wrap(env, logging_prefix="demo", writers=[ConsoleWriter(), store])
    env.action_spaces_dict[0].seed(seed)
    for epoch in range(n_epochs):
        for episode in range(episodes_per_epoch):
            env.reset(seed=seed + epoch * episodes_per_epoch + episode)
            done = False
            while not done:
                action = {k: s.sample() for k, s in env.action_space.spaces.items()}
                _, _, terminated, truncated, _ = env.step(action)
                done = terminated or truncated
        env.write_epoch_stats()
    env.close()
    return store


if __name__ == "__main__":
    run_demo()
