"""Background training in a Jupyter kernel: throughput against a blocking run, and how responsive the kernel stays.

In one real Jupyter kernel (``--kernel``: the project's ``maze-lab`` by default, or ``python3``: both ipykernel's;
driven through jupyter_client, as JupyterLab drives it), the same PPO CartPole run is
trained blocking (``rc.train()`` in a cell) and in the background (``rc.train_async()``), interleaved; env steps
per second are env steps over the wall time of the run (trainer built beforehand, so building is not counted).
The blocking run is measured with the kernel's torch threads and with one thread; the throughput loss is against
the faster of the two, on the median of ``--repeats`` runs per variant (min and max printed beside it).
A third variant trains in the background while the client executes a trivial cell (``1 + 1``) every
``--probe-gap`` seconds; the latency of those cells is measured from the execute request to the kernel reporting
idle, which is what a user sees. The headline throughput loss is this busy-kernel variant (the realistic case);
the idle-kernel loss is reported beside it. The kernel's own interpreter time per trivial cell is measured too: a
training thread in the kernel shares the interpreter (the GIL) with the cells, so that time, times the cell rate, is
a floor under the busy-kernel loss. ``--runner local`` puts the envs in worker processes (the policy and the learner
stay in the kernel); ``--runner processes`` puts whole rollouts (envs and a policy copy) in worker processes and keeps
only the learner in the kernel; its worker processes are started before the clock, as the envs of the other runners
are built before it. The kernel process's CPU time during the idle-kernel background runs (per 1,000 env steps and as
a share of one core) shows how much of the run holds the kernel's interpreter, whichever runner.

The runs above are short (about 2 s each), and separate runs of one variant differ by several percent on a noisy
machine. A last phase (``--on-off-s`` seconds, 0 to skip) measures what the cells cost within one long background
run: the client alternates windows of ``--window`` seconds without cells and with a cell every ``--probe-gap``
seconds; the trainer marks the time after every update, and each window's steps/s comes from the updates inside it
(the intervals that hold an epoch's end, and those that straddle two windows, are left out). Each cell window is
compared with the quiet windows on both sides of it; the loss is over all such triples, with a 90% bootstrap
interval.

Run: python tests/benchmarks/background_overhead.py [--epochs N] [--repeats R]
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

from jupyter_client import KernelManager

ENDED_FILE = "background-run-ended"
"""The file (in the log directory) that the kernel leaves when a background run has ended."""

MARK_UPDATES = """
MARKS = []
def mark_updates(trainer):
    # the trainer notes (time, env steps, update in its epoch) after every update: an on/off phase reads the run's
    # rate in any window of time from those marks
    MARKS.clear()
    update = trainer._one_update
    def marked():
        update()
        MARKS.append((time.perf_counter(), trainer.env_steps, trainer._update_in_epoch))
    trainer._one_update = marked
"""
"""Kernel code for the on/off phases of both benchmarks (needs ``time`` imported)."""

SETUP = """
import threading, time
from pathlib import Path
import torch
ENDED = Path({log_dir!r}) / {ended_file!r}
from maze_lab.run.run_context import RunContext
if {torch_threads}:
    torch.set_num_threads({torch_threads})
CONFIG = dict(runner={runner!r}, overrides={{"log_base_dir": {log_dir!r}, "algorithm.epoch_length": {epoch_length},
                          "algorithm.patience": 0, "seed": 1234, **{extra}}}, silent=True)

def fresh():
    rc = RunContext(**CONFIG)
    trainer = rc.trainer  # build envs and model now: only training is timed
    if hasattr(trainer.env, "start") and not trainer.env.started:  # runner=processes: start its workers now, too
        trainer.env.start(trainer.eval_policy, 1234)
    return rc

def blocking(n_epochs, threads=None):
    rc = fresh()
    saved = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    rc.train(n_epochs)
    wall = time.perf_counter() - t0
    torch.set_num_threads(saved)
    rc.close()
    return {{"env_steps": rc.trainer.env_steps, "wall": wall}}

def start_background(n_epochs):
    global BG
    rc = fresh()
    ended = []
    ENDED.unlink(missing_ok=True)
    t0, cpu0 = time.perf_counter(), time.process_time()
    handle = rc.train_async(n_epochs, torch_threads={async_threads})
    # a waiting thread takes the end time (it sleeps on an event and costs the run nothing) and leaves a file that
    # the client watches, so that no cell but the measured ones runs while the run trains
    threading.Thread(target=lambda: (handle.wait(), ended.append((time.perf_counter(), time.process_time())),
                                     ENDED.touch()), daemon=True).start()
    BG = (rc, handle, (t0, cpu0), ended)

{mark_updates}
def start_windows(n_epochs):
    global BG
    rc = fresh()
    mark_updates(rc.trainer)
    BG = (rc, rc.train_async(n_epochs, torch_threads={async_threads}), None, [])

def background_result():
    rc, handle, (t0, cpu0), ended = BG
    rc.close()
    # the kernel process's CPU time over the run (all its threads): with an idle kernel, what the training thread
    # spent in the kernel, nearly all of it holding the interpreter that cells need
    return {{"env_steps": rc.trainer.env_steps, "wall": ended[0][0] - t0, "kernel_cpu": ended[0][1] - cpu0,
             "status": handle.status}}
"""


class Kernel:
    """A kernel executing cells one by one; ``run`` returns the wall time to idle and the printed output."""

    def __init__(self, name: str = "maze-lab") -> None:
        self.km = KernelManager(kernel_name=name)
        self.km.start_kernel(extra_arguments=["--IPKernelApp.log_level=ERROR"], env=dict(os.environ))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code: str, timeout: float = 600) -> tuple[float, str]:
        t0 = time.perf_counter()
        msg_id = self.kc.execute(code, allow_stdin=False)
        out, error = "", None
        while True:
            msg = self.kc.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content["execution_state"] == "idle":
                break
            if kind == "stream" and content["name"] == "stdout":
                out += content["text"]
            elif kind == "error":
                error = "\n".join(content["traceback"])
        wall = time.perf_counter() - t0
        self.kc.get_shell_msg(timeout=timeout)
        if error:
            raise RuntimeError(f"cell failed:\n{code}\n{error}")
        return wall, out

    def value(self, expr: str) -> Any:
        return json.loads(self.run(f"print(__import__('json').dumps({expr}))")[1])

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def background(kernel: Kernel, n_epochs: int, probe_gap: float | None, ended: Path) -> tuple[dict, list[float]]:
    """One background run; with ``probe_gap``, trivial cells are executed while it trains. ``ended``: the file the
    kernel leaves when the run has ended (watched here, so that checking costs the kernel no cell)."""
    kernel.run(f"start_background({n_epochs})")
    latencies: list[float] = []
    while not ended.exists():
        if probe_gap is None:
            time.sleep(0.05)
            continue
        latencies.append(kernel.run("1 + 1")[0])
        time.sleep(probe_gap)
    return kernel.value("background_result()"), latencies


def on_off(kernel: Kernel, seconds: float, window: float, probe_gap: float, start: str = "start_windows(1_000_000)",
           switch: tuple[str, str] | None = None, stop: str = "BG[1].stop(); BG[0].close()") -> dict[str, float] | None:
    """One long background run (``start``: kernel code that starts it with its updates marked, see MARK_UPDATES) in
    which the client alternates windows of ``window`` seconds, quiet ones and "on" ones, for ``seconds`` in all; then
    ``stop``. Without ``switch``, the on windows have a trivial cell every ``probe_gap`` seconds and the quiet ones
    none; with ``switch`` (kernel code that turns the measured thing on, and off), every window has the cells and the
    two codes run as the windows change. Each on window is compared with the quiet windows just before and after it
    (slow drifts of the machine cancel), on one run (no build or warm-up differences between the runs compared).
    Returns the loss (1 - steps/s in on windows / steps/s in quiet ones, over all compared windows), a 90% bootstrap
    interval over the compared window triples, and how many there were; None where no on window had quiet windows
    on both sides."""
    kernel.run(start)
    # the kernel's clock against this one (the middle of a cell's round trip); marks come in the kernel's clock
    t_send = time.perf_counter()
    kernel_now = kernel.value("time.perf_counter()")
    offset = kernel_now - (t_send + time.perf_counter()) / 2
    windows: list[tuple[float, float, bool]] = []  # (start, end, on)
    end_all = time.perf_counter() + seconds
    on = False
    while time.perf_counter() < end_all:
        begun = time.perf_counter()
        if switch:
            kernel.run(switch[0] if on else switch[1])
        cells = on or switch is not None
        while time.perf_counter() - begun < window:
            if cells:
                kernel.run("1 + 1")
            time.sleep(probe_gap if cells else 0.02)
        windows.append((begun, time.perf_counter(), on))
        on = not on
    kernel.run(stop)
    # the updates' durations (from one mark to the next), each in the window it lies in; an interval that holds an
    # epoch's end (its statistics, evaluation, checkpoint: lumps of seconds that would land in a window by chance)
    # or that straddles two windows is left out
    marks = [(t - offset, steps, update) for t, steps, update in kernel.value("MARKS")]
    per_window = [[0.0, 0.0] for _ in windows]  # seconds, env steps
    starts = [a for a, _, _ in windows]
    for (t0, s0, _), (t1, s1, update) in itertools.pairwise(marks):
        i = bisect.bisect_right(starts, t0) - 1
        if update == 0 or i < 0 or t1 > windows[i][1]:
            continue
        per_window[i][0] += t1 - t0
        per_window[i][1] += s1 - s0
    measured = [(secs, steps, w[2]) for (secs, steps), w in zip(per_window, windows, strict=True)]
    triples = [(measured[i - 1], measured[i], measured[i + 1]) for i in range(1, len(measured) - 1)
               if measured[i][2] and not measured[i - 1][2] and not measured[i + 1][2]
               and min(measured[i - 1][0], measured[i][0], measured[i + 1][0]) > 0.2 * window]
    if not triples:
        return None

    def loss_of(chosen: list) -> float:
        cell_steps = sum(mid[1] for _, mid, _ in chosen) / sum(mid[0] for _, mid, _ in chosen)
        quiet_steps = sum(a[1] + b[1] for a, _, b in chosen) / sum(a[0] + b[0] for a, _, b in chosen)
        return 1 - cell_steps / quiet_steps

    rng = random.Random(0)
    boot = sorted(loss_of(rng.choices(triples, k=len(triples))) for _ in range(2000))
    return {"loss": loss_of(triples), "low": boot[100], "high": boot[1899], "n": len(triples)}


def main() -> None:
    """Measure and print the table and the bench line."""
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=4, help="epochs per run")
    parser.add_argument("--epoch-length", type=int, default=10, help="updates per epoch (200 env steps each)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--torch-threads", type=int, default=0,
                        help="torch.set_num_threads in the kernel (0: torch's default, as in a fresh notebook)")
    parser.add_argument("--async-torch-threads", type=int, default=1,
                        help="train_async(torch_threads=...) (0: None, the thread keeps torch's setting)")
    parser.add_argument("--probe-gap", type=float, default=0.1,
                        help="seconds between trivial cells (0.1: ten cells a second, busier than a live widget)")
    parser.add_argument("--on-off-s", type=float, default=60.0,
                        help="seconds of one long background run alternating windows without and with cells (0: skip)")
    parser.add_argument("--window", type=float, default=1.0, help="seconds per window of the on/off run")
    parser.add_argument("--runner", default="dev", help="runner config: dev (envs in the training thread), local "
                        "(envs in worker processes) or processes (rollouts in worker processes)")
    parser.add_argument("--kernel", default="maze-lab",
                        help="Jupyter kernel: maze-lab (the project's spec of ipykernel's kernel, which notebooks use) "
                             "or python3")
    parser.add_argument("--concurrency", type=int, default=0, help="runner.concurrency (0: the runner's default)")
    parser.add_argument("--n-workers", type=int, default=0,
                        help="runner=processes: runner.n_workers (0: the runner's default)")
    parser.add_argument("--envs-per-worker", type=int, default=0,
                        help="runner=processes: runner.envs_per_worker (0: the runner's default)")
    args = parser.parse_args()
    extra = {key: value for key, value in (("runner.concurrency", args.concurrency),
                                           ("runner.n_workers", args.n_workers),
                                           ("runner.envs_per_worker", args.envs_per_worker)) if value}

    kernel = Kernel(args.kernel)
    try:
        with tempfile.TemporaryDirectory() as log_dir:
            ended = Path(log_dir) / ENDED_FILE
            kernel.run(SETUP.format(log_dir=log_dir, ended_file=ENDED_FILE,
                                    mark_updates=MARK_UPDATES,
                                    epoch_length=args.epoch_length,
                                    torch_threads=args.torch_threads, async_threads=args.async_torch_threads or None,
                                    runner=args.runner, extra=extra))
            kernel.run("blocking(1)")  # warm-up: imports, first allocations
            idle_latency = []  # at the pace of the busy cells (one every probe_gap), as a user sends them
            for _ in range(50):
                idle_latency.append(kernel.run("1 + 1")[0])
                time.sleep(args.probe_gap)
            # the kernel's own interpreter time per trivial cell (parsing, history, messages): a training thread that
            # shares the interpreter loses at least this much per cell, whatever the run does
            cpu0, wall0 = kernel.value("__import__('time').process_time()"), time.perf_counter()
            for _ in range(100):
                kernel.run("1 + 1")
                time.sleep(args.probe_gap)
            cell_cpu = (kernel.value("__import__('time').process_time()") - cpu0) / 100
            floor = cell_cpu * 100 / (time.perf_counter() - wall0)
            probed = "background, cells every %.0f ms" % (args.probe_gap * 1000)
            sps: dict[str, list[float]] = {"blocking (train)": [], "blocking, 1 torch thread": [],
                                           "background, idle kernel": [], probed: []}
            latencies: list[float] = []
            kernel_cpu: list[tuple[float, float]] = []  # (kernel CPU seconds per 1,000 env steps, share of one core)
            for _ in range(args.repeats):  # interleaved, so that machine noise hits all variants alike
                r = kernel.value(f"blocking({args.epochs})")
                sps["blocking (train)"].append(r["env_steps"] / r["wall"])
                r = kernel.value(f"blocking({args.epochs}, threads=1)")
                sps["blocking, 1 torch thread"].append(r["env_steps"] / r["wall"])
                r, _ = background(kernel, args.epochs, None, ended)
                sps["background, idle kernel"].append(r["env_steps"] / r["wall"])
                kernel_cpu.append((r["kernel_cpu"] / r["env_steps"] * 1000, r["kernel_cpu"] / r["wall"]))
                r, lat = background(kernel, args.epochs, args.probe_gap, ended)
                sps[probed].append(r["env_steps"] / r["wall"])
                latencies += lat
            on_off_result = on_off(kernel, args.on_off_s, args.window, args.probe_gap) if args.on_off_s else None
            threads = kernel.value("torch.get_num_threads()")
    finally:
        kernel.close()

    med = {k: statistics.median(v) for k, v in sps.items()}
    ref = max(med["blocking (train)"], med["blocking, 1 torch thread"])  # the faster blocking variant
    print(f"PPO CartPole-v1 in one Jupyter kernel ({args.kernel}), runner={args.runner} {extra or ''}: "
          f"{args.epochs} epochs x "
          f"{args.epoch_length} updates x 200 env steps per run, {args.repeats} runs per variant (interleaved)")
    print(f"torch threads: {threads} in the kernel (blocking runs), "
          f"train_async(torch_threads={args.async_torch_threads or None})")
    print(f"{'variant':<36}{'min':>8}{'median':>8}{'max':>8}{'median vs blocking':>20}  (env steps/s)")
    for name, values in sps.items():
        print(f"{name:<36}{min(values):>8,.0f}{med[name]:>8,.0f}{max(values):>8,.0f}{med[name] / ref:>20.3f}")
    print()

    def pct(values: list[float], q: float) -> float:
        return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000 if len(values) > 1 else \
            values[0] * 1000

    print(f"{'trivial cell (1 + 1)':<36}{'n':>6}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}")
    for name, values in (("idle kernel", idle_latency), ("while training in the background", latencies)):
        print(f"{name:<36}{len(values):>6}{pct(values, 50):>9.1f}{pct(values, 95):>9.1f}{max(values) * 1000:>9.1f}")
    # the headline is the realistic case: the user keeps working in the kernel (and widgets redraw) while it trains
    print(f"kernel interpreter time per trivial cell (idle): {cell_cpu * 1000:.1f} ms; at one cell every "
          f"{args.probe_gap * 1000:.0f} ms that is {floor:.1%} of one core, the floor of the busy-kernel loss for a "
          f"run whose training thread shares the kernel's interpreter")
    cpu_per_k = statistics.median(c[0] for c in kernel_cpu)
    cpu_share = statistics.median(c[1] for c in kernel_cpu)
    # how much of the run the kernel's interpreter is taken (the mechanism behind both losses): less here leaves
    # more of it to cells while the run trains
    print(f"kernel CPU while training in the background (idle kernel, all threads): {cpu_per_k * 1000:.0f} ms per "
          f"1,000 env steps, {cpu_share:.0%} of one core (medians)")
    if on_off_result:
        print(f"cells' cost within one background run ({on_off_result['n']} windows of {args.window:.0f} s with a "
              f"cell every {args.probe_gap * 1000:.0f} ms, each against the quiet windows beside it): "
              f"{on_off_result['loss']:.1%} fewer env steps/s (90% interval {on_off_result['low']:.1%} to "
              f"{on_off_result['high']:.1%})")
    loss = 1 - med[probed] / ref
    idle_loss = 1 - med["background, idle kernel"] / ref
    print(f"bench: background_overhead throughput_loss={loss:.3f} idle_kernel_loss={idle_loss:.3f} "
          f"cell_p95_ms={pct(latencies, 95):.1f} "
          f"kernel_cell_floor={floor:.3f} kernel_cpu_ms_per_1k_steps={cpu_per_k * 1000:.0f} "
          f"kernel_cpu_share={cpu_share:.2f}"
          + (f" cells_cost_on_off={on_off_result['loss']:.3f}" if on_off_result else ""))


if __name__ == "__main__":
    main()
