"""The shareable report of long runs: its size and the time to write it, against the cockpit's own HTML export.

A three-epoch CartPole PPO run with one recorded episode (its frames) is trained once; its last epoch is replayed as
epochs 1..N (scalars varied, the action and observation samples as recorded; ``tests/test_report.lengthen_run``).
For each N, measured in this process:

- the report (``write_report``): the size of the file and the time to write it (median of ``--repeats`` after one
  warm-up call: the widgets and plotly imported, plotly.js read once per process);
- the reference, measured here: the cockpit's static page of the same run (``TrainingDashboard(run).to_html``,
  which embeds plotly.js and the shown curves, nothing else): its size and the time to build the cockpit and
  write it;
- and once, for the 1,000-epoch run: ``maze-lab report RUN -o FILE`` as a user runs it (a fresh process: the
  imports included).

Targets (the issue): the report of a 1,000-epoch run under 10 MB and written in under 5 s.

Run: python tests/benchmarks/report_size.py [--epochs 10,100,1000,5000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from run_utils import lengthen_run, maze_lab_command, run_with_an_episode  # noqa: E402


def timed(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls of ``fn`` (after one call not counted)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", default="10,100,1000,5000", help="comma-separated run lengths")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    lengths = [int(n) for n in args.epochs.split(",")]

    from plotly.offline import get_plotlyjs

    from maze_lab.widgets.dashboard import TrainingDashboard
    from maze_lab.widgets.report import write_report

    imports = float(subprocess.run(  # a fresh process: what a command pays before it writes
        [sys.executable, "-c", "import time; t = time.perf_counter(); import maze_lab.widgets.report, "
                               "maze_lab.widgets.dashboard; print(time.perf_counter() - t)"],
        capture_output=True, text=True, check=True).stdout.split()[-1])
    plotly_mb = len(get_plotlyjs().encode()) / 1024**2
    rows, by_length = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source = run_with_an_episode(tmp / "runs")
        for n in lengths:
            run = lengthen_run(source, tmp / f"long{n}" / "run", n)
            report, page = tmp / f"report{n}.html", tmp / f"cockpit{n}.html"
            seconds = timed(lambda run=run, report=report: write_report(run, report), args.repeats)

            def cockpit(run: Path = run, page: Path = page) -> None:
                board = TrainingDashboard(run, tabs=())
                board.to_html(page)
                board.close()

            ref_seconds = timed(cockpit, args.repeats)
            mb, ref_mb = report.stat().st_size / 1024**2, page.stat().st_size / 1024**2
            by_length[n] = (mb, seconds)
            rows.append((n, mb, seconds, ref_mb, ref_seconds))
        cli = None
        if 1000 in lengths:
            out = tmp / "cli.html"
            t0 = time.perf_counter()
            done = subprocess.run([*maze_lab_command(), "report", str(tmp / "long1000" / "run"), "-o", str(out)],
                                  capture_output=True, text=True, timeout=600, env=dict(os.environ))
            cli = time.perf_counter() - t0
            if done.returncode != 0:
                raise SystemExit(f"maze-lab report failed: {done.stderr}")

    print(f"report of an N-epoch CartPole PPO run with one recorded episode; plotly.js {plotly_mb:.2f} MB embedded "
          f"once; importing the widgets takes {imports:.1f} s in a fresh process (once per process)")
    print(f"{'epochs':>7}{'report MB':>11}{'report s':>10}{'cockpit MB':>12}{'cockpit s':>11}{'MB ratio':>10}"
          f"{'s ratio':>9}   (median of {args.repeats}; cockpit = TrainingDashboard.to_html, the reference)")
    for n, mb, seconds, ref_mb, ref_seconds in rows:
        print(f"{n:>7,}{mb:>11.2f}{seconds:>10.2f}{ref_mb:>12.2f}{ref_seconds:>11.2f}{mb / ref_mb:>10.2f}"
              f"{seconds / ref_seconds:>9.2f}")
    if cli is not None:
        print(f"maze-lab report of the 1,000-epoch run in a fresh process (imports included): {cli:.1f} s")
    line = f"bench: report_size plotlyjs_mb={plotly_mb:.2f}"
    for n, (mb, seconds) in by_length.items():
        line += f" report_{n}_mb={mb:.2f} report_{n}_s={seconds:.2f}"
    if cli is not None:
        line += f" cli_1000_s={cli:.1f}"
    line += f" import_s={imports:.1f}"
    print(line)


if __name__ == "__main__":
    main()
