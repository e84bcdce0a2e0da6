"""Train Stable-Baselines3 PPO on a maze-lab env through the flat Gymnasium adapter (no glue code).

Run with ``python -m maze_lab.examples.sb3_route`` (needs ``pip install stable-baselines3``).
"""

from __future__ import annotations


def main(total_timesteps: int = 20_000, n_steps: int = 2048) -> None:
    """Train PPO on the flat Cutting-2D env, roll it out, and read one observation back as a dict.

    :param n_steps: PPO's rollout length (small values make a quick smoke run).
    """
    from stable_baselines3 import PPO

    from maze_lab.core.wrappers.gymnasium_adapter import GymnasiumEnvAdapter
    from maze_lab.examples.cutting2d import SIMPLE_PROBLEM, maze_env_factory

    # Dict observation -> one float32 Box, Dict action {cut_order, cut_rotation, piece_idx} -> MultiDiscrete
    env = GymnasiumEnvAdapter(maze_env_factory(**SIMPLE_PROBLEM), flat=True)
    print("observation:", env.observation_space.shape, "action:", env.action_space)

    model = PPO("MlpPolicy", env, n_steps=n_steps, batch_size=min(64, n_steps), seed=0, verbose=1)
    model.learn(total_timesteps=total_timesteps)

    obs, _ = env.reset(seed=0)
    total, done = 0.0, False
    while not done:
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, terminated, truncated, _ = env.step(action)
        total, done = total + reward, terminated or truncated
    print("episode return:", total)
    print("last action as a dict:", env.action_layout.to_dict(action))
    print("last ordered piece:", env.observation_layout.unflatten(obs)["ordered_piece"])
    # The structured env works the same (its two sub-steps become one flat step); with masks for sb3-contrib:
    #   env = GymnasiumEnvAdapter(make_masked_env(**SIMPLE_PROBLEM), flat=True,
    #                             action_mask_keys={"piece_idx": "inventory_mask"})
    #   model = sb3_contrib.MaskablePPO("MlpPolicy", env)


if __name__ == "__main__":
    main()
