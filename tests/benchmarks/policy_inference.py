"""Actions per second of TorchPolicy.compute_action for the template CartPole model vs a bare nn.Sequential.

The model is the seed's CartPole template (ConcatModelBuilder, feature modality DenseBlock [32, 32] ReLU, no
hidden/recurrence presets): Linear(4,32) ReLU Linear(32,32) ReLU Linear(32,2) plus the identity concatenation.
The reference does the same work by hand with the same weights: numpy observation -> tensor -> nn.Sequential of
the same layers -> softmax + multinomial sampling -> numpy action in a dict. The ratio of the two times per call
is the overhead of the perception layer (tensor dicts, shape normalization, InferenceBlock, distribution
mapper). Both run under torch.no_grad with one torch thread; they are measured in alternating rounds and the
median round counts, so that load from other processes hits both alike.

Run: python tests/benchmarks/policy_inference.py [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from maze_lab.agent.composers import TemplateModelComposer

HIDDEN = [32, 32]


def build_template_policy() -> Any:
    """The template CartPole policy (TorchPolicy around an InferenceBlock)."""
    obs = {0: gym.spaces.Dict({"observation": gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)})}
    act = {0: gym.spaces.Dict({"action": gym.spaces.Discrete(2)})}
    builder = {
        "_target_": "maze_lab.perception.builders.ConcatModelBuilder",
        "observation_modality_mapping": {"observation": "feature"},
        "modality_config": {"feature": {"block_type": "DenseBlock",
                                        "block_params": {"hidden_units": HIDDEN, "non_lin": "torch.nn.ReLU"}},
                            "hidden": {}, "recurrence": {}},
    }
    composer = TemplateModelComposer(act, obs, model_builder=builder,
                                     policy={"_target_": "ProbabilisticPolicyComposer"}, critic=None)
    return composer.policy


def bare_sequential_like(policy: Any) -> nn.Sequential:
    """An nn.Sequential with the same layers and weights as the template policy network."""
    net = policy.networks[0]
    dense = net.perception_dict["observation_DenseBlock"].net
    head = net.perception_dict["action"].net
    seq = nn.Sequential(*[type(m)(m.in_features, m.out_features) if isinstance(m, nn.Linear) else type(m)()
                          for m in [*dense, head]])
    seq.load_state_dict(nn.Sequential(*dense, head).state_dict())
    return seq.eval()


def reference_compute_action(seq: nn.Sequential) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """The hand-written equivalent of compute_action: tensor in, sample, numpy out."""

    def compute_action(observation: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with torch.no_grad():
            logits = seq(torch.from_numpy(observation["observation"]))
            probs = torch.softmax(logits, dim=-1)
            action = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1).reshape(probs.shape[:-1])
        return {"action": action.numpy()}

    return compute_action


def time_per_call(fn: Callable[[], Any], calls: int) -> float:
    """Seconds per call over ``calls`` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def measure(batch: int, policy: Any, reference: Callable, calls: int, rounds: int) -> tuple[float, float]:
    """Median seconds per call of the reference and of the policy, measured in alternating rounds."""
    rng = np.random.default_rng(batch)
    shape = (4,) if batch == 1 else (batch, 4)
    obs = {"observation": rng.normal(size=shape).astype(np.float32)}
    ours, ref = (lambda: policy.compute_action(obs)), (lambda: reference(obs))
    assert np.shape(ours()["action"]) == np.shape(ref()["action"])
    for fn in (ref, ours):  # warm-up
        time_per_call(fn, max(100, calls // 10))
    ref_times, our_times = [], []
    for _ in range(rounds):
        ref_times.append(time_per_call(ref, calls))
        our_times.append(time_per_call(ours, calls))
    return statistics.median(ref_times), statistics.median(our_times)


def main() -> None:
    """Print the table and the bench line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=9, help="alternating measurement rounds")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    policy = build_template_policy()
    policy.eval()
    seq = bare_sequential_like(policy)
    obs = {"observation": np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)}
    x = torch.from_numpy(obs["observation"])
    with torch.no_grad():
        same = torch.allclose(policy.compute_logits_dict({"observation": x})["action"], seq(x))
    assert same, "the reference must compute the same logits as the template policy"
    reference = reference_compute_action(seq)

    rows, ratios = [], {}
    for batch in (1, 64):
        ref_s, ours_s = measure(batch, policy, reference, args.calls, args.rounds)
        ratios[batch] = ours_s / ref_s
        rows.append((batch, batch / ref_s, batch / ours_s, ref_s * 1e6, ours_s * 1e6, ratios[batch]))

    print(f"compute_action on the template CartPole model, torch {torch.__version__}, 1 thread, "
          f"{args.rounds} rounds x {args.calls} calls (median round)")
    header = (f"{'batch':>5}  {'bare nn.Sequential':>20}  {'maze-lab TorchPolicy':>21}  {'us/call ref':>11}  "
              f"{'us/call ours':>12}  {'time ratio':>10}")
    print(header)
    print("-" * len(header))
    for batch, ref_aps, our_aps, ref_us, our_us, ratio in rows:
        print(f"{batch:>5}  {ref_aps:>14,.0f} act/s  {our_aps:>15,.0f} act/s  {ref_us:>11.1f}  {our_us:>12.1f}  "
              f"{ratio:>10.2f}")
    print(f"bench: policy_inference overhead_b1={ratios[1]:.3f} overhead_b64={ratios[64]:.3f}")


if __name__ == "__main__":
    main()
