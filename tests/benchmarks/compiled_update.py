"""Does ``torch.compile`` pay for PPO's update on the CPU? The update step of ``ppo_cartpole.py``'s bare-PyTorch loop
(the eager ceiling), eager against compiled, measured in the same run.

One step: the clipped-surrogate and value losses of a full batch of 256 CartPole samples through two 64x64 tanh MLPs
(log-softmax, ratio, clip, mean), backward, ``clip_grad_norm_`` at 0.5 and an Adam step, one torch thread. The
compiled variant wraps the loss function in ``torch.compile`` (inductor, default mode: on the CPU there are no CUDA
graphs); backward goes through the graph AOTAutograd made of it, the optimizer step stays eager. Each repeat builds
fresh networks, warms each variant up with 20 steps (the compiled one compiles there; its first call is timed
separately as the compile time: the first repeat's is a cold compile, in a fresh cache directory; later repeats trace
and compile again but find the kernels' C++ builds of the first), then times ``--steps`` steps of each, eager first.

What it tells: the update step's speed-up, the compile time, and how many updates the compile takes to pay back
(compile time over the time saved per update of 20 such steps, as ``ppo_cartpole`` makes per rollout).

Run: python tests/benchmarks/compiled_update.py [--repeats 5] [--steps 400]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

# a cold compile, as a user's first run has it: inductor's caches in a fresh directory of this run, its graph caches off
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="maze-lab-compile-bench-")
os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"

import torch  # noqa: E402
from torch import nn

EPOCHS_PER_UPDATE = 20
"""Full-batch steps per rollout in ``ppo_cartpole``'s settings."""


def _mlp(n_in: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, n_out))


def ppo_loss(policy: nn.Module, value: nn.Module, obs: torch.Tensor, act: torch.Tensor, old_log_prob: torch.Tensor,
             adv: torch.Tensor, returns: torch.Tensor, clip: torch.Tensor) -> torch.Tensor:
    """The bare loop's loss: clipped surrogate plus half the value loss."""
    log_prob = torch.log_softmax(policy(obs), dim=-1).gather(1, act.unsqueeze(1)).squeeze(1)
    ratio = (log_prob - old_log_prob).exp()
    policy_loss = -torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean()
    value_loss = (returns - value(obs).squeeze(1)).pow(2).mean()
    return policy_loss + 0.5 * value_loss


def _time_steps(loss_fn, batch: tuple, n_steps: int, seed: int) -> tuple[float, float]:
    """(seconds of the first call, milliseconds per step over ``n_steps`` after 20 warm-up steps)."""
    torch.manual_seed(seed)
    policy, value = _mlp(4, 2), _mlp(4, 1)
    params = [*policy.parameters(), *value.parameters()]
    optimizer = torch.optim.Adam(params, lr=1e-3, eps=1e-5)

    def step() -> None:
        loss = loss_fn(policy, value, *batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(params, 0.5)
        optimizer.step()

    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    for _ in range(19):
        step()
    t0 = time.perf_counter()
    for _ in range(n_steps):
        step()
    return first, (time.perf_counter() - t0) / n_steps * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400, help="timed update steps per variant and repeat")
    args = parser.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    batch = (torch.randn(256, 4, generator=gen), torch.randint(0, 2, (256,), generator=gen),
             torch.full((256,), -0.69), torch.randn(256, generator=gen), torch.randn(256, generator=gen),
             torch.tensor(0.2))
    eager, compiled, compile_s = [], [], []
    for r in range(args.repeats):
        _, ms = _time_steps(ppo_loss, batch, args.steps, r)
        eager.append(ms)
        torch.compiler.reset()  # every repeat traces and compiles afresh (the kernels' C++ builds stay cached)
        fresh = torch.compile(ppo_loss)
        first, ms = _time_steps(fresh, batch, args.steps, r)
        compiled.append(ms)
        compile_s.append(first)
        print(f"  repeat {r}: eager {eager[-1]:.3f} ms/step, compiled {ms:.3f} ms/step, first compiled call "
              f"{first:.1f} s", flush=True)
    e, c = statistics.median(eager), statistics.median(compiled)
    saved_per_update = (e - c) * EPOCHS_PER_UPDATE / 1000
    cold = compile_s[0]
    payback = cold / saved_per_update if saved_per_update > 0 else float("inf")
    print()
    print(f"PPO update step on the CPU (256 samples, two 64x64 tanh MLPs, Adam, 1 thread), {args.repeats} repeats of "
          f"{args.steps} steps; median (min - max)")
    print(f"{'variant':<12}{'ms/step':>26}{'first call s':>26}")
    print(f"{'eager':<12}{f'{e:.3f} ({min(eager):.3f} - {max(eager):.3f})':>26}{'-':>26}")
    print(f"{'compiled':<12}{f'{c:.3f} ({min(compiled):.3f} - {max(compiled):.3f})':>26}"
          f"{f'{statistics.median(compile_s):.1f} ({min(compile_s):.1f} - {max(compile_s):.1f})':>26}")
    print(f"speed-up of the update step {e / c:.2f}x; the cold compile ({cold:.1f} s) pays back after {payback:,.0f} "
          f"updates of {EPOCHS_PER_UPDATE} steps ({payback * 256:,.0f} env steps in ppo_cartpole's settings)")
    print(f"bench: compiled_update step_speedup={e / c:.2f} cold_compile_s={cold:.1f} payback_updates={payback:.0f}")


if __name__ == "__main__":
    main()
