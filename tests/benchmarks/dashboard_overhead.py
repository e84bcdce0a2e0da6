"""The cockpit while a run trains in the same kernel: what it costs the run, and how responsive the kernel stays.

In one real IPython kernel driven through jupyter_client (as JupyterLab drives it), PPO CartPole trains in the
background (``rc.train_async()``) while the client executes a cell every ``--probe-gap`` seconds; measured:

- throughput: env steps per second with the cockpit (``TrainingDashboard``) displayed and polling, against the
  same background run and the same cells without it (interleaved runs, medians; min and max printed; and paired:
  the median over the pairs of each cockpit run's steps/s over the run without it just before it). The cockpit
  is built and displayed in the cell that starts the run, inside the timed run; the share of the run's time taken by
  that build and by the cockpit's ticks (which make its figures at the first epoch) are printed beside it. Runs are
  20 epochs (about 10 s) by default: in 2-s runs that one-off start-up weighed several percent of the run, a cost a
  run of minutes does not see;
- building the cockpit: wall time of the cell that builds and displays the cockpit of a finished run (the same
  run directory both times) while another run trains, against the same cell in an idle kernel;
- realistic cells: a pandas groupby over the run's statistics and a plotly figure, p95 of their wall time while a
  run trains against idle;
- opening the cockpit on a run directory of 1,000 CartPole epochs (scalars and samples, replayed from a real
  run), in this process;
- the trajectory viewer: time to show one Cutting-2D step (median over the steps of a recorded episode).

Cell wall times run from the execute request to the kernel reporting idle: what a user waits for.

``--runner processes`` rolls out in worker processes (only the learner trains in the kernel; the workers are started
before the clock, as the other runners' envs are built before it); the default is runner=dev.

Run: python tests/benchmarks/dashboard_overhead.py [--repeats R] [--runner processes]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from background_overhead import ENDED_FILE, MARK_UPDATES, Kernel, on_off  # noqa: E402

SETUP = """
import threading, time
from pathlib import Path
import numpy as np
ENDED = Path({log_dir!r}) / {ended_file!r}
from IPython.display import display
from maze_lab.run.run_context import RunContext
from maze_lab.widgets.dashboard import TrainingDashboard
CONFIG = dict(runner={runner!r}, overrides={{"log_base_dir": {log_dir!r}, "algorithm.epoch_length": {epoch_length},
                          "algorithm.patience": 0, "seed": 1234}}, silent=True)

{mark_updates}
def start(n_epochs, cockpit, marked=False):
    # marked: the trainer's updates are marked (the on/off phase)
    global BG
    rc = RunContext(**CONFIG)
    trainer = rc.trainer  # build envs and model now: only training is timed
    if hasattr(trainer.env, "start") and not trainer.env.started:  # runner=processes: start its workers now, too
        trainer.env.start(trainer.eval_policy, 1234)
    if marked:
        mark_updates(trainer)
    ended = []
    ENDED.unlink(missing_ok=True)
    t0 = time.perf_counter()
    handle = rc.train_async(n_epochs)
    # the end time, and a file the client watches (checking costs the kernel no cell)
    threading.Thread(target=lambda: (handle.wait(), ended.append(time.perf_counter()), ENDED.touch()),
                     daemon=True).start()
    board = None
    if cockpit:
        built = time.perf_counter()
        board = TrainingDashboard(handle)
        board.spent = 0.0
        untimed = board.tick

        def timed(force=False):  # the cockpit's own time on the kernel's loop, tick by tick
            t = time.perf_counter()
            try:
                return untimed(force=force)
            finally:
                board.spent += time.perf_counter() - t

        board.tick = timed
        display(board)
        board.build_s = time.perf_counter() - built  # once per run, while it trains: inside the timed run
    BG = (rc, handle, t0, ended, board)

def result():
    global DONE
    rc, handle, t0, ended, board = BG
    DONE = rc.run_dir  # a finished run: what the build cell opens, busy and idle alike
    if board is not None and hasattr(board, "close"):
        board.close()
    rc.close()
    return {{"env_steps": rc.trainer.env_steps, "wall": ended[0] - t0, "status": handle.status,
             "cockpit_s": board.spent if board is not None else 0.0,
             "build_s": board.build_s if board is not None else 0.0}}
"""

CELLS = {
    "pandas groupby on the statistics":
        "_df = BG[1].stats\n_df.groupby(['prefix', 'event', 'name']).value.agg(['mean', 'min', 'max', 'last']).shape",
    "a plotly figure":
        "import plotly.graph_objects as _go\n"
        "_f = _go.Figure([_go.Scatter(y=np.random.default_rng(0).normal(size=2000).cumsum()) for _ in range(4)])\n"
        "_f.update_layout(title='x').to_dict()['layout']['title']['text']",
}
BUILD = "_b = TrainingDashboard(DONE)\ndisplay(_b)\n_b.close()"


def train_with_cells(kernel: Kernel, n_epochs: int, cockpit: bool, gap: float, ended: Path,
                     cells: dict[str, str] | None = None) -> tuple[dict, dict[str, list[float]]]:
    """One background run while cells run every ``gap`` seconds (until the kernel leaves the file ``ended``); returns
    its throughput and the cells' wall times."""
    kernel.run(f"start({n_epochs}, {cockpit})")
    walls: dict[str, list[float]] = {name: [] for name in (cells or {"1 + 1": "1 + 1"})}
    codes = cells or {"1 + 1": "1 + 1"}
    i = 0
    while not ended.exists():
        name = list(codes)[i % len(codes)]
        walls[name].append(kernel.run(codes[name])[0])
        i += 1
        time.sleep(gap)
    return kernel.value("result()"), walls


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1] if len(values) > 1 else values[0]


def open_1000_epochs(n_epochs: int) -> float:
    """Median seconds to build the cockpit on a run directory of ``n_epochs`` replayed CartPole epochs."""
    from stats_store import capture_cartpole_epoch, write_epoch

    from maze_lab.core.log_stats.writers import StatsStore
    from maze_lab.run.run_dir import RunDirectory
    from maze_lab.widgets.dashboard import TrainingDashboard

    writes = capture_cartpole_epoch(2)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "exp" / "run"
        run_dir.mkdir(parents=True)
        RunDirectory(run_dir).write_summary(status="done", experiment="exp", seed=0, epoch=n_epochs)
        store = StatsStore(directory=run_dir)
        for epoch in range(1, n_epochs + 1):
            write_epoch(store, epoch, writes)
        store.close()
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            board = TrainingDashboard(run_dir)
            times.append(time.perf_counter() - t0)
            if hasattr(board, "close"):
                board.close()
    return statistics.median(times)


def viewer_step_ms() -> tuple[float, float] | None:
    """Median milliseconds for the trajectory viewer to show one step of a recorded Cutting-2D episode: a step
    shown for the first time (drawn by the renderer: moving the slider to a new place) and one shown before (from
    the viewer's cache: scrubbing back, or a step drawn ahead while the user looked at the previous one)."""
    try:
        from maze_lab.widgets.trajectory_viewer import TrajectoryViewer
    except ImportError:
        return None
    from maze_lab.run.run_context import RunContext

    with tempfile.TemporaryDirectory() as tmp:
        rc = RunContext(experiment="cutting2d_masked_ppo", silent=True, run_dir=Path(tmp) / "run",
                        overrides={"n_epochs": 1, "algorithm.epoch_length": 1})
        rc.rollout(n_episodes=1, deterministic=True, seed=0)
        rc.close()
        viewer = TrajectoryViewer(rc.run_dir / "trajectories", read_ahead=0)
        n_steps = len(viewer.episode.steps)
        cold, cached = [], []
        for times in (cold, cached):
            for step in range(n_steps - 1, -1, -1):  # from the end: the viewer shows step 0 when it opens
                t0 = time.perf_counter()
                viewer.show_step(step)
                times.append(time.perf_counter() - t0)
        viewer.close()
    return statistics.median(cold[1:]) * 1000, statistics.median(cached) * 1000


def main() -> None:
    """Measure and print the tables and the bench line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=20,
                        help="epochs per background run (20: about 10 s, a run long enough that the cockpit's one-off "
                             "start-up, building it and making its figures at the first epoch, does not stand in for "
                             "its cost while it follows a run; 4: the short runs of earlier rounds, about 2 s)")
    parser.add_argument("--epoch-length", type=int, default=10, help="updates per epoch (200 env steps each)")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--probe-gap", type=float, default=0.1, help="seconds between cells")
    parser.add_argument("--open-epochs", type=int, default=1000)
    parser.add_argument("--on-off-s", type=float, default=80.0, help="seconds of one long background run (cells "
                        "every --probe-gap throughout) whose cockpit polls in every other window (0: skip)")
    parser.add_argument("--window", type=float, default=2.0, help="seconds per window of the on/off run")
    parser.add_argument("--runner", default="dev", help="runner config: dev (the run's envs and policy in the training "
                        "thread) or processes (rollouts in worker processes, the learner in the kernel)")
    parser.add_argument("--kernel", default="python3", help="Jupyter kernel spec (default: python3, the notebooks')")
    args = parser.parse_args()

    kernel = Kernel(args.kernel)
    sps: dict[str, list[float]] = {"background, cells, no cockpit": [], "background, cells, cockpit": []}
    cockpit_share: list[float] = []
    build_share: list[float] = []  # building and displaying the cockpit at the run's start, once per run
    idle_cells: dict[str, list[float]] = {name: [] for name in CELLS}
    busy_cells: dict[str, list[float]] = {name: [] for name in CELLS}
    build_idle: list[float] = []
    build_busy: list[float] = []
    try:
        with tempfile.TemporaryDirectory() as log_dir:
            ended = Path(log_dir) / ENDED_FILE
            kernel.run(SETUP.format(log_dir=log_dir, ended_file=ENDED_FILE,
                                    mark_updates=MARK_UPDATES,
                                    epoch_length=args.epoch_length,
                                    runner=args.runner))
            kernel.run("start(1, True)")  # warm-up: imports, first allocations, the widget classes
            kernel.value("(BG[1].wait(), result())[1]")
            for _ in range(args.repeats):  # interleaved, so that machine noise hits both variants alike
                for cockpit in (False, True):
                    r, _ = train_with_cells(kernel, args.epochs, cockpit, args.probe_gap, ended)
                    sps[f"background, cells, {'cockpit' if cockpit else 'no cockpit'}"].append(
                        r["env_steps"] / r["wall"])
                    if cockpit:
                        cockpit_share.append(r["cockpit_s"] / r["wall"])
                        build_share.append(r["build_s"] / r["wall"])
                # realistic cells and the cockpit build while a run trains, then in the idle kernel
                kernel.run(f"start({args.epochs}, False)")
                build_busy.append(kernel.run(BUILD)[0])
                for name, code in CELLS.items():
                    busy_cells[name].append(kernel.run(code)[0])
                while not ended.exists():
                    for name, code in CELLS.items():
                        busy_cells[name].append(kernel.run(code)[0])
                    time.sleep(args.probe_gap)
                build_idle.append(kernel.run(BUILD)[0])  # the finished run: same statistics, idle kernel
                # the same cells at the same pace as while busy (a pause of probe_gap after each pair): cells sent
                # back to back find the kernel's threads awake and run faster than cells a user sends
                for _ in range(max(5, len(busy_cells[next(iter(CELLS))]) // args.repeats)):
                    for name, code in CELLS.items():
                        idle_cells[name].append(kernel.run(code)[0])
                    time.sleep(args.probe_gap)
                kernel.value("result()")
            # the first window is without the cockpit: its switch stops the polling that displaying it started
            switched = on_off(kernel, args.on_off_s, args.window, args.probe_gap,
                              start="start(1_000_000, True, marked=True)",
                              switch=("BG[4].start()", "BG[4].stop_updates()"),
                              stop="BG[4].close(); BG[1].stop(); BG[0].close()") if args.on_off_s else None
    finally:
        kernel.close()

    med = {k: statistics.median(v) for k, v in sps.items()}
    ref = med["background, cells, no cockpit"]
    print(f"PPO CartPole-v1 (runner={args.runner}) trained in the background of one Jupyter kernel ({args.kernel}), "
          f"a cell every {args.probe_gap * 1000:.0f} ms; {args.epochs} epochs x {args.epoch_length} updates x 200 "
          f"env steps, {args.repeats} runs per variant (interleaved)")
    print(f"{'variant':<34}{'min':>8}{'median':>8}{'max':>8}{'vs no cockpit':>15}  (env steps/s)")
    for name, values in sps.items():
        print(f"{name:<34}{min(values):>8,.0f}{med[name]:>8,.0f}{max(values):>8,.0f}{med[name] / ref:>15.3f}")
    # each cockpit run against the run without it just before it: the machine's drift over minutes cancels out of a
    # pair, where the medians of the two variants keep it
    pairs = [c / n for n, c in zip(sps["background, cells, no cockpit"], sps["background, cells, cockpit"],
                                   strict=True)]
    paired = 1 - statistics.median(pairs)
    print(f"paired runs (each cockpit run over the run without it just before it): {paired:.1%} fewer env steps/s by "
          f"the median of {len(pairs)} pairs (range {1 - max(pairs):.1%} to {1 - min(pairs):.1%})")
    print(f"the cockpit's own work on the kernel's loop (its ticks): {statistics.median(cockpit_share):.1%} of the "
          f"run's wall time (median; min {min(cockpit_share):.1%}, max {max(cockpit_share):.1%}); building and "
          f"displaying it at the run's start (once): {statistics.median(build_share):.1%}")
    if switched:
        print(f"the cockpit's cost within one background run ({switched['n']} windows of {args.window:.0f} s with the "
              f"cockpit polling, each against the windows without it beside it; a cell every "
              f"{args.probe_gap * 1000:.0f} ms throughout): {switched['loss']:.1%} fewer env steps/s (90% interval "
              f"{switched['low']:.1%} to {switched['high']:.1%})")
    print()
    print(f"{'cell':<36}{'idle p95 ms':>12}{'busy p95 ms':>12}{'busy/idle':>10}")
    build_ratio = statistics.median(build_busy) / statistics.median(build_idle)
    print(f"{'build + display the cockpit (median)':<36}{statistics.median(build_idle) * 1000:>12.0f}"
          f"{statistics.median(build_busy) * 1000:>12.0f}{build_ratio:>10.2f}")
    ratios = []
    for name in CELLS:
        idle, busy = p95(idle_cells[name]), p95(busy_cells[name])
        ratios.append(busy / idle)
        print(f"{name:<36}{idle * 1000:>12.1f}{busy * 1000:>12.1f}{busy / idle:>10.2f}")
    print()
    opened = open_1000_epochs(args.open_epochs)
    print(f"open the cockpit on a run directory of {args.open_epochs} epochs: {opened:.3f} s (median of 3)")
    viewer = viewer_step_ms()
    step_ms = None if viewer is None else viewer[0]
    if viewer is not None:
        print(f"trajectory viewer, one Cutting-2D step (median over an episode's steps): {viewer[0]:.1f} ms shown "
              f"for the first time (drawn), {viewer[1]:.1f} ms shown again (cached)")
    loss = 1 - med["background, cells, cockpit"] / ref
    print(f"bench: dashboard_overhead throughput_loss={loss:.3f} paired_loss={paired:.3f} cockpit_time_share="
          f"{statistics.median(cockpit_share):.3f} build_busy_vs_idle={build_ratio:.2f} "
          f"cell_p95_busy_vs_idle={max(ratios):.2f} open_1000_epochs_s={opened:.3f} "
          f"viewer_step_ms={'nan' if step_ms is None else f'{step_ms:.1f}'}"
          + (f" cockpit_cost_on_off={switched['loss']:.3f}" if switched else ""))


if __name__ == "__main__":
    main()
