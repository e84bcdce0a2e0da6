"""Shared by the benchmarks that measure against Stable-Baselines3: train an SB3 model, evaluating it after every
``every`` updates (evaluation time not counted), until the evaluation reaches a target or the budget is spent."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple


class SB3Result(NamedTuple):
    """Env steps per second of training (evaluation excluded), seconds and env steps to the target (None where it
    was not reached), and the best evaluation seen."""

    steps_per_s: float
    solved_s: float | None
    solved_steps: int | None
    best: float


def learn_until_solved(model: Any, budget: int, evaluate: Callable[[Any], float], target: float,
                       every: int = 1) -> SB3Result:
    """``model.learn(budget)``, evaluating ``evaluate(model)`` after every ``every``-th update; stops at the first
    evaluation ``>= target``."""
    from stable_baselines3.common.callbacks import BaseCallback

    state: dict[str, Any] = {"eval_time": 0.0, "solved": None, "steps": None, "rollouts": 0, "start": None,
                             "best": float("-inf")}

    class EvalAndStop(BaseCallback):
        def _on_training_start(self) -> None:
            state["start"] = time.perf_counter()

        def _on_step(self) -> bool:
            return state["solved"] is None

        def _on_rollout_end(self) -> None:
            state["rollouts"] += 1

        def _on_rollout_start(self) -> None:
            # the rollout end counted above precedes the update: here the update of that rollout is done
            if state["rollouts"] and state["rollouts"] % every == 0 and state["solved"] is None:
                t = time.perf_counter()
                reward = evaluate(self.model)
                state["eval_time"] += time.perf_counter() - t
                state["best"] = max(state["best"], reward)
                if reward >= target:
                    state["solved"] = time.perf_counter() - state["start"] - state["eval_time"]
                    state["steps"] = self.model.num_timesteps

    start = time.perf_counter()
    model.learn(total_timesteps=budget, callback=EvalAndStop())
    train_time = time.perf_counter() - start - state["eval_time"]
    return SB3Result(model.num_timesteps / train_time, state["solved"], state["steps"], state["best"])
