"""A run training while the user works in the notebook: in the kernel's background, or detached; what cells cost
the run, and what the run costs the cells.

One real Jupyter kernel (``--kernel``: the stock ``python3`` spec that the notebooks name by default; any
ipykernel spec), driven through jupyter_client as JupyterLab drives it, starts the same seeded PPO CartPole run
either in a background thread of the kernel (``rc.train_async()``, "in-kernel": the run pauses at its step
boundaries while a cell runs, which it learns of through IPython's pre_run_cell/post_run_cell events) or in a
process of its own (``rc.train_async(detach=True)``, "detached": the kernel holds an ``AttachedRun``). Per
``--repeats``, one run of each variant, interleaved, the order alternating between repeats.

Each run trains until stopped. The client alternates windows of ``--window`` seconds in the pattern quiet, trivial,
quiet, realistic, ... (``--cycles`` times, then a last quiet one), from its second epoch's end:

- quiet: no cell (with ``--control``, each cycle adds a quiet window and a control window, which has no cell
  either but is compared with its neighbours as the cell windows are: what the method reads where cells cost
  nothing, the noise of the machine);
- trivial: a cell ``1 + 1`` every ``--cell-gap`` seconds (start to start);
- realistic: at the same pace, in turn, a pandas groupby over the run's statistics (``H.stats``: the live
  DataFrame of the RunHandle; for a detached run the AttachedRun's, which reads the epochs the run appended to its
  ``stats.arrows`` since the last call) and a plotly figure built from them (a pivot of the per-epoch means, one
  trace per statistic) serialised to JSON, as displaying it would.

Throughput, the same way for both variants, from the run's own records, with nothing added to the run: at every
epoch's end the run rewrites its summary (``maze_lab_run.json``: epoch, env steps) atomically, and a thread of the
client watches that file (every 10 ms) and keeps, per epoch, the env steps and the file's modification time, stamped
by the operating system when the run wrote it, so the watcher's polling adds no error to the times. Epoch k then
spans from the write of epoch k-1 to that of k (its updates and its end: statistics, evaluation, checkpoint, all
the run's work); its env steps over that span are assigned to the window that holds it whole (an epoch straddling
two windows is left out). Not ``handle.progress`` polled from the kernel (that would take cells, which the quiet
windows must not have) and not the statistics' ``time_epoch`` (it covers the updates only, not the epoch's end,
which the run must do too and which cells slow as well; and it carries no time of day to place an epoch in a
window). ``--epoch-length`` is small (2 updates of 200 env steps) so that a window holds several
epochs. Each cell window is compared with the quiet windows on both sides of it (slow drifts of a busy machine
cancel; no build or warm-up differs between the windows compared); a run's loss is 1 - env steps/s of its cell
windows over that of their quiet neighbours (pooled over its windows). The headline is the median over the runs
of the loss with trivial cells, "a cell every 100 ms against none" (min and max beside it, and the loss over all
runs' windows pooled, with a 90% bootstrap interval); the loss with the realistic cells is printed beside it.

Cell latency is the wall time from the execute request to the kernel reporting idle, what a user waits for. After
each run has been stopped (a detached run's process has exited), the same cells run in the idle kernel on the same
handle (the same code path; the finished run's statistics, at most the windows' epochs more than the cells saw while
it trained: a CartPole epoch adds 39 rows) at the same pace, as many as while the run trained (trivial cells: at
most 30): "idle". Per run and realistic cell, the p95 while the run trained over the p95 idle; the run's ratio is
the larger of the two cells' (a p95 over both cells together would be the slower cell's alone and hide the other);
the headline is the median over the runs (min and max beside it).

Targets: detached, realistic cells' p95 at most 1.3x idle and the run's loss under 3%; in-kernel, reported as it is.
A target reads met only where the whole range is on its side (the runs' min to max for the ratio, the pooled loss's
90% interval for the loss), missed where the whole range is beyond it, and undecided otherwise: a median on the
right side of a target within the noise is no evidence. The machine's load average is printed: other users' work on
a shared machine is noise that interleaving and neighbouring windows only partly remove.

The default takes about 5 minutes; ``--repeats``, ``--cycles`` and ``--window`` make it longer.

Run: python tests/benchmarks/background_overhead.py [--repeats R] [--cycles C] [--window S] [--runner dev]

``Kernel``, ``on_off``, ``MARK_UPDATES`` and ``ENDED_FILE`` are shared with dashboard_overhead (its on/off phase
marks the updates of an in-kernel run, which that benchmark's switch needs).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import random
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_client import KernelManager

from maze_lab.run.run_dir import MARKER as SUMMARY_FILE
from maze_lab.run.run_status import OWNER_FILE

ENDED_FILE = "background-run-ended"
"""The file (in the log directory) that dashboard_overhead's kernel leaves when a background run has ended."""

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
"""Kernel code for the on/off phase of dashboard_overhead (needs ``time`` imported)."""

SETUP = """
import time
import plotly.graph_objects as go
from maze_lab.run.attach import attach
from maze_lab.run.run_context import RunContext
CONFIG = dict(runner={runner!r}, overrides={{"log_base_dir": {log_dir!r}, "algorithm.epoch_length": {epoch_length},
                          "algorithm.patience": 0, "seed": 1234, **{extra}}}, silent=True)
RC = H = None

def start(detach):
    # a run until stopped; H: its handle (a RunHandle, or an AttachedRun for a detached run)
    global RC, H
    RC = RunContext(**CONFIG)
    if detach:
        H = RC.train_async(1_000_000, detach=True)
    else:
        RC.trainer  # build the envs and the model in this cell, as the detached process builds its own
        H = RC.train_async(1_000_000)
    return str(H.run_dir)

def stop():
    H.stop()
    return H.status
"""

TRIVIAL = "1 + 1"
CELLS = {
    "pandas groupby on H.stats":
        "_df = H.stats\n"
        "_df.groupby(['prefix', 'event', 'name']).value.agg(['mean', 'min', 'max', 'last']).shape",
    "plotly figure from H.stats":
        "_df = H.stats\n"
        "_w = _df[_df.name.isin(['mean', '', '0'])].pivot_table(index='epoch', columns=['prefix', 'event'],\n"
        "                                                        values='value')\n"
        "_fig = go.Figure([go.Scatter(x=_w.index, y=_w[c], name='/'.join(c), mode='lines') for c in _w.columns])\n"
        "_fig.update_layout(title='statistics per epoch', xaxis_title='epoch')\n"
        "len(_fig.to_json())",
}
"""The realistic cells: real work on the run's real statistics (``H``: the run's handle in the kernel)."""

WINDOW_KINDS = ("quiet", "trivial", "quiet", "realistic")


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


# ---- comparing windows -------------------------------------------------------------------------------------------
def triples_of(measured: list[tuple[float, float, Any]], window: float, on: Any, quiet: Any) -> list[tuple]:
    """``measured``: per window (seconds measured in it, env steps, kind), in time order. The windows of kind ``on``
    with a window of kind ``quiet`` on both sides, each of the three with over a fifth of a window measured."""
    return [(measured[i - 1], measured[i], measured[i + 1]) for i in range(1, len(measured) - 1)
            if measured[i][2] == on and measured[i - 1][2] == quiet and measured[i + 1][2] == quiet
            and min(measured[i - 1][0], measured[i][0], measured[i + 1][0]) > 0.2 * window]


def loss_of(triples: list[tuple]) -> float:
    """1 - env steps/s of the middle windows over env steps/s of the windows beside them (pooled)."""
    on_rate = sum(mid[1] for _, mid, _ in triples) / sum(mid[0] for _, mid, _ in triples)
    quiet_rate = sum(a[1] + b[1] for a, _, b in triples) / sum(a[0] + b[0] for a, _, b in triples)
    return 1 - on_rate / quiet_rate


def on_off(kernel: Kernel, seconds: float, window: float, probe_gap: float, *, start: str, stop: str,
           switch: tuple[str, str] | None = None) -> dict[str, float] | None:
    """One long in-kernel background run (``start``: kernel code that starts it with its updates marked, see
    MARK_UPDATES) in which the client alternates windows of ``window`` seconds, quiet ones and "on" ones, for
    ``seconds`` in all; then ``stop``. Without ``switch``, the on windows have a trivial cell every ``probe_gap``
    seconds and the quiet ones none; with ``switch`` (kernel code that turns the measured thing on, and off), every
    window has the cells and the two codes run as the windows change. Each on window is compared with the quiet
    windows just before and after it. Returns the loss (1 - steps/s in on windows / steps/s in quiet ones, over all
    compared windows), a 90% bootstrap interval over the compared window triples, and how many there were; None
    where no on window had quiet windows on both sides."""
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
                kernel.run(TRIVIAL)
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
    triples = triples_of(measured, window, True, False)
    if not triples:
        return None
    rng = random.Random(0)
    boot = sorted(loss_of(rng.choices(triples, k=len(triples))) for _ in range(2000))
    return {"loss": loss_of(triples), "low": boot[100], "high": boot[1899], "n": len(triples)}


# ---- a run's epochs, read from its summary -----------------------------------------------------------------------
class EpochWatcher:
    """Watches a run's summary from a thread of this process: per epoch, the env steps and the time the run wrote
    them (the file's modification time, which the operating system stamps at the write)."""

    def __init__(self, run_dir: Path, poll_s: float = 0.01):
        self.path = run_dir / SUMMARY_FILE
        self.poll_s = poll_s
        self.epochs: dict[int, tuple[float, int]] = {}  # epoch -> (time of its write, env steps)
        self.status: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        seen = None
        while not self._stop.wait(self.poll_s):
            try:
                # the summary is replaced atomically: the open file's own status goes with the text read from it
                with self.path.open("rb") as f:
                    st = os.fstat(f.fileno())
                    if (st.st_ino, st.st_mtime_ns) == seen:
                        continue
                    summary = json.loads(f.read())
            except (OSError, ValueError):
                continue
            seen = (st.st_ino, st.st_mtime_ns)
            self.status = summary.get("status")
            epoch = summary.get("epoch")
            # the first write that names an epoch is that epoch's end; later ones (its status at the stop) are not
            if isinstance(epoch, int) and epoch > 0 and epoch not in self.epochs:
                self.epochs[epoch] = (st.st_mtime_ns / 1e9, int(summary.get("env_steps") or 0))

    def wait_for_epoch(self, epoch: int, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not self.epochs or max(self.epochs) < epoch:
            if self.status in ("failed", "died", "interrupted", "done", "stopped"):
                raise RuntimeError(f"the run in {self.path.parent} ended ({self.status}) before epoch {epoch}; see its "
                                   f"console.log or summary")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the run in {self.path.parent} reached no epoch {epoch} within {timeout:g} s")
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def per_window(windows: list[tuple[float, float, str]],
               epochs: dict[int, tuple[float, int]]) -> list[tuple[float, float, str]]:
    """(seconds, env steps, kind) per window: the epochs (from one recorded epoch's end to the next) that lie whole
    in it."""
    measured = [[0.0, 0.0, kind] for _, _, kind in windows]
    starts = [a for a, _, _ in windows]
    ends = sorted(epochs.items())
    for (_, (t0, s0)), (_, (t1, s1)) in itertools.pairwise(ends):
        i = bisect.bisect_right(starts, t0) - 1
        if i < 0 or t1 > windows[i][1]:
            continue
        measured[i][0] += t1 - t0
        measured[i][1] += s1 - s0
    return [tuple(m) for m in measured]


def paced(kernel: Kernel, codes: dict[str, str], gap: float, until: float | None = None,
          counts: dict[str, int] | None = None, into: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Run ``codes`` in turn, one every ``gap`` seconds (start to start; at once where the last overran), until the
    time ``until`` (perf_counter) or until each has run ``counts`` times; returns their wall times."""
    walls = into if into is not None else {name: [] for name in codes}
    done = {name: 0 for name in codes}
    names = itertools.cycle(codes)
    next_start = time.perf_counter()
    while True:
        if until is not None and time.perf_counter() >= until:
            break
        if counts is not None and all(done[n] >= counts[n] for n in codes):
            break
        name = next(names)
        if counts is not None and done[name] >= counts[name]:
            continue
        time.sleep(max(0.0, next_start - time.perf_counter()))
        next_start = time.perf_counter() + gap
        walls[name].append(kernel.run(codes[name])[0])
        done[name] += 1
    return walls


def wait_for_exit(run_dir: Path, timeout: float = 60) -> None:
    """Wait until the process that trained the run (from its owner record) has exited."""
    try:
        pid = json.loads((run_dir / OWNER_FILE).read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state in ("Z", "X"):  # exited; its parent (the kernel) collects it
            return
        time.sleep(0.05)


def end_detached(run_dir: Path) -> None:
    """Stop a detached run this benchmark started that still trains (an error cut the benchmark short): SIGTERM to
    its process (from its owner record), which stops it after its current update."""
    from maze_lab.run.attach import attach

    try:
        if not attach(run_dir).running:
            return
        os.kill(json.loads((run_dir / OWNER_FILE).read_text())["pid"], signal.SIGTERM)
    except (OSError, ValueError, KeyError, RuntimeError):
        return
    wait_for_exit(run_dir)


def measure_run(kernel: Kernel, detach: bool, args: argparse.Namespace, started: list[Path]) -> dict[str, Any]:
    """One run of a variant: its windows, then the same cells idle; returns what was measured."""
    run_dir = Path(kernel.value(f"start({detach})"))
    if detach:
        started.append(run_dir)
    watcher = EpochWatcher(run_dir)
    try:
        watcher.wait_for_epoch(2)  # past the run's first epoch, the slowest (first allocations, a new process)
        windows: list[tuple[float, float, str]] = []  # (start, end, kind) in time.time()
        busy: dict[str, list[float]] = {TRIVIAL: [], **{name: [] for name in CELLS}}
        kinds = WINDOW_KINDS + (("quiet", "control") if args.control else ())
        for kind in [*itertools.islice(itertools.cycle(kinds), len(kinds) * args.cycles), "quiet"]:
            begun, until = time.time(), time.perf_counter() + args.window
            if kind in ("quiet", "control"):
                time.sleep(args.window)
            else:
                codes = {TRIVIAL: TRIVIAL} if kind == "trivial" else CELLS
                paced(kernel, codes, args.cell_gap, until=until, into=busy)
            windows.append((begun, time.time(), kind))
        if watcher.status not in ("running", None):
            raise RuntimeError(f"the run in {run_dir} is {watcher.status} during its windows")
        status = kernel.value("stop()")
        if detach:
            wait_for_exit(run_dir)
    finally:
        watcher.close()
    load1 = os.getloadavg()[0]
    # the same cells in the idle kernel, on the same handle, at the same pace, as many as while the run trained
    idle = paced(kernel, CELLS, args.cell_gap, counts={name: len(busy[name]) for name in CELLS})
    idle.update(paced(kernel, {TRIVIAL: TRIVIAL}, args.cell_gap, counts={TRIVIAL: min(30, len(busy[TRIVIAL]))}))
    kernel.run("RC.close()")
    measured = per_window(windows, watcher.epochs)
    quiet = [m for m in measured if m[2] == "quiet" and m[0] > 0]
    times = sorted(t for t, _ in watcher.epochs.values())
    result: dict[str, Any] = {
        "status": status, "load1": load1, "busy": busy, "idle": idle,
        "epoch_s": statistics.median(b - a for a, b in itertools.pairwise(times)),
        "quiet_sps": sum(m[1] for m in quiet) / sum(m[0] for m in quiet) if quiet else float("nan")}
    for kind in ("trivial", "realistic", "control"):
        triples = triples_of(measured, args.window, kind, "quiet")
        result[f"{kind}_triples"] = triples
        result[f"{kind}_loss"] = loss_of(triples) if triples else float("nan")
    # per realistic cell, its p95 while the run trained over its p95 idle; the run's ratio is the larger of the two
    # (a p95 over both cells together would be the slower cell's alone, and hide what the run costs the faster one)
    result["ratios"] = {name: p95(busy[name]) / p95(idle[name]) for name in CELLS}
    result["p95_ratio"] = max(result["ratios"].values())
    return result


def p95(values: list[float]) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=20, method="inclusive")[-1] if len(values) > 1 else values[0]


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: list[float], fmt: Callable[[float], str]) -> str:
    """median (min to max) of ``values``, each formatted with ``fmt``."""
    values = [v for v in values if v == v]  # no NaN
    if not values:
        return "n/a"
    return f"{fmt(statistics.median(values))} ({fmt(min(values))} to {fmt(max(values))})"


def main() -> None:
    """Measure and print the tables and the bench line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="runs per variant (in-kernel, detached), interleaved")
    parser.add_argument("--cycles", type=int, default=3,
                        help="quiet/trivial/quiet/realistic window cycles per run (then one last quiet window)")
    parser.add_argument("--window", type=float, default=3.0,
                        help="seconds per window (3: several epochs of 2 updates even on a busy machine)")
    parser.add_argument("--cell-gap", type=float, default=0.1,
                        help="seconds from one cell's start to the next's (0.1: a cell every 100 ms)")
    parser.add_argument("--control", action="store_true",
                        help="add a control window per cycle: no cells, compared with its quiet neighbours as the "
                             "cell windows are (its 'loss' is the noise of the method on this machine)")
    parser.add_argument("--epoch-length", type=int, default=2,
                        help="updates (of 200 env steps) per epoch: small, so that a window holds several epochs")
    parser.add_argument("--runner", default="dev", help="runner config: dev (envs in the training thread or "
                        "process), local (envs in worker processes) or processes (rollouts in worker processes)")
    parser.add_argument("--torch-threads", type=int, default=0,
                        help="torch threads of the run (0: the config's torch_threads, 1)")
    parser.add_argument("--kernel", default="python3",
                        help="Jupyter kernel spec (default: python3, the one the notebooks name)")
    parser.add_argument("--concurrency", type=int, default=0, help="runner.concurrency (0: the runner's default)")
    parser.add_argument("--n-workers", type=int, default=0,
                        help="runner=processes: runner.n_workers (0: the runner's default)")
    parser.add_argument("--envs-per-worker", type=int, default=0,
                        help="runner=processes: runner.envs_per_worker (0: the runner's default)")
    args = parser.parse_args()
    extra = {key: value for key, value in (("runner.concurrency", args.concurrency),
                                           ("runner.n_workers", args.n_workers),
                                           ("runner.envs_per_worker", args.envs_per_worker),
                                           ("torch_threads", args.torch_threads)) if value}

    load_start = os.getloadavg()
    t_start = time.perf_counter()
    results: dict[str, list[dict[str, Any]]] = {"in-kernel": [], "detached": []}
    started: list[Path] = []
    kernel = Kernel(args.kernel)
    try:
        with tempfile.TemporaryDirectory() as log_dir:
            try:
                kernel.run(SETUP.format(log_dir=log_dir, epoch_length=args.epoch_length, runner=args.runner,
                                        extra=extra))
                # warm-up: imports and first allocations of a run, the cells on both kinds of handle
                warm = EpochWatcher(Path(kernel.value("start(False)")))
                warm.wait_for_epoch(1)
                warm.close()
                for code in (*CELLS.values(), "_H0, H = H, attach(H.run_dir)", *CELLS.values(), "H = _H0"):
                    kernel.run(code)
                kernel.run("stop(); RC.close()")
                for repeat in range(args.repeats):  # interleaved, the order alternating: drifts hit both alike
                    for detach in ((False, True) if repeat % 2 == 0 else (True, False)):
                        r = measure_run(kernel, detach, args, started)
                        results["detached" if detach else "in-kernel"].append(r)
                        control = f", {r['control_loss']:.1%} in control windows" if args.control else ""
                        print(f"  repeat {repeat + 1} {'detached ' if detach else 'in-kernel'}: "
                              f"{r['quiet_sps']:,.0f} env steps/s quiet (epochs of {r['epoch_s']:.2f} s), loss "
                              f"{r['trivial_loss']:.1%} with trivial cells ({len(r['trivial_triples'])} windows), "
                              f"{r['realistic_loss']:.1%} with realistic ones{control}; realistic cells' p95 "
                              f"busy/idle {', '.join(f'{x:.2f}' for x in r['ratios'].values())}; load "
                              f"{r['load1']:.1f}", flush=True)
            finally:
                for run_dir in started:
                    end_detached(run_dir)
    finally:
        kernel.close()
    load_end = os.getloadavg()
    elapsed = time.perf_counter() - t_start

    print()
    print(f"machine: {os.cpu_count()} CPUs; load average (1, 5, 15 min) {' '.join(f'{x:.2f}' for x in load_start)} "
          f"at the start, {' '.join(f'{x:.2f}' for x in load_end)} at the end; {elapsed:.0f} s in all")
    print(f"PPO CartPole-v1 (runner={args.runner}{', ' + str(extra) if extra else ''}), epochs of "
          f"{args.epoch_length} updates x 200 env steps, one Jupyter kernel ({args.kernel}); {args.repeats} runs per "
          f"variant, interleaved; per run {(6 if args.control else 4) * args.cycles + 1} windows of {args.window:g} "
          f"s: quiet, a cell every {args.cell_gap * 1000:.0f} ms (trivial: 1 + 1), quiet, realistic cells at the same "
          f"pace, {'quiet, control (no cells), ' if args.control else ''}...")
    print()
    print("throughput: env steps/s of each cell window against the quiet windows beside it, within one run; "
          "median (min to max) over the runs; pooled: all runs' windows, 90% bootstrap interval")
    print(f"{'variant':<12}{'quiet env steps/s':>24}{'loss, trivial cells':>28}{'pooled':>28}"
          f"{'loss, realistic cells':>28}")
    pooled: dict[str, str] = {}
    intervals: dict[str, tuple[float, float]] = {}  # the pooled loss's 90% interval
    for name, rs in results.items():
        triples = [t for r in rs for t in r["trivial_triples"]]
        if triples:
            rng = random.Random(0)
            boot = sorted(loss_of(rng.choices(triples, k=len(triples))) for _ in range(2000))
            pooled[name] = f"{loss_of(triples):.1%} ({boot[100]:.1%} to {boot[1899]:.1%})"
            intervals[name] = (boot[100], boot[1899])
        print(f"{name:<12}{spread([r['quiet_sps'] for r in rs], lambda x: f'{x:,.0f}'):>24}"
              f"{spread([r['trivial_loss'] for r in rs], lambda x: f'{x:.1%}'):>28}{pooled.get(name, 'n/a'):>28}"
              f"{spread([r['realistic_loss'] for r in rs], lambda x: f'{x:.1%}'):>28}")
        if args.control:
            print(f"{'':<12}{'control windows (no cells):':>52}"
                  f"{spread([r['control_loss'] for r in rs], lambda x: f'{x:.1%}'):>28}")
    print()
    print("cells' wall time, execute request to idle (ms), while the run trains (busy) against the same cells on the "
          "same handle in the idle kernel after it (idle); p50 and p95 of all runs pooled; p95 busy/idle per run: "
          "median (min to max)")
    print(f"{'variant':<12}{'cell':<28}{'n':>5}{'idle p50':>9}{'idle p95':>9}{'busy p50':>9}{'busy p95':>9}"
          f"{'p95 busy/idle per run':>26}")
    for name, rs in results.items():
        for cell in (*CELLS, TRIVIAL):
            busy = [w for r in rs for w in r["busy"][cell]]
            idle = [w for r in rs for w in r["idle"][cell]]
            per_run = [p95(r["busy"][cell]) / p95(r["idle"][cell]) for r in rs]
            print(f"{name:<12}{cell:<28}{len(busy):>5}{p50(idle) * 1000:>9.1f}{p95(idle) * 1000:>9.1f}"
                  f"{p50(busy) * 1000:>9.1f}{p95(busy) * 1000:>9.1f}{spread(per_run, lambda x: f'{x:.2f}'):>26}")
        print(f"{'':<12}{'realistic: the larger ratio':<28}{'':>41}"
              f"{spread([r['p95_ratio'] for r in rs], lambda x: f'{x:.2f}'):>26}")
    print()

    def med(variant: str, key: str) -> float:
        values = [r[key] for r in results[variant] if r[key] == r[key]]
        return statistics.median(values) if values else float("nan")

    inkernel_loss, detached_loss = med("in-kernel", "trivial_loss"), med("detached", "trivial_loss")
    inkernel_ratio, detached_ratio = med("in-kernel", "p95_ratio"), med("detached", "p95_ratio")
    def verdict(low: float, high: float, target: float) -> str:
        # met or missed only where the whole range is on one side of the target; else the noise decides
        if low != low or high != high:
            return "n/a: nothing measured"
        return "met" if high <= target else "missed" if low > target else "undecided: the range spans the target"

    ratios = [r["p95_ratio"] for r in results["detached"] if r["p95_ratio"] == r["p95_ratio"]]
    low, high = intervals.get("detached", (float("nan"), float("nan")))
    print(f"targets, detached: realistic cells' p95 at most 1.3x idle: median {detached_ratio:.2f}x over the runs, "
          f"{verdict(min(ratios, default=float('nan')), max(ratios, default=float('nan')), 1.3)} (runs' min to max); "
          f"the run's loss with a cell every {args.cell_gap * 1000:.0f} ms under 3%: median {detached_loss:.1%}, "
          f"{verdict(low, high, 0.03)} (pooled 90% interval). In-kernel (no target): "
          f"{inkernel_ratio:.2f}x, {inkernel_loss:.1%}")
    print(f"bench: background_overhead inkernel_loss={inkernel_loss:.3f} detached_loss={detached_loss:.3f} "
          f"inkernel_cell_p95_vs_idle={inkernel_ratio:.2f} detached_cell_p95_vs_idle={detached_ratio:.2f}")

if __name__ == "__main__":
    main()
