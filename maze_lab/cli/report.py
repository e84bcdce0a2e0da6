"""``maze-lab report``: one self-contained HTML file of one or more runs (see :mod:`maze_lab.widgets.report`)."""

from __future__ import annotations

import argparse
import errno
import os
from pathlib import Path
from typing import Any

from maze_lab.cli.errors import _report_fault
from maze_lab.run.commands import BadInput

MAX_FRAMES = 100
"""The default of ``--max-frames`` (``maze_lab.widgets.report.MAX_FRAMES``; not imported: ``--help`` stays fast)."""


def add_report_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """The ``report`` sub-command."""
    report = sub.add_parser(
        "report", parents=[common],
        help="write one self-contained HTML file of runs (curves, comparison, distributions, model, configuration, "
             "a replayable episode)",
        description="Write one HTML file that opens offline, with no server: per run its status, the curves the "
                    "cockpit shows, the action and observation distributions of the last epoch, the model graphs, "
                    "the configuration (searchable) and the newest recorded episode (a slider steps through it; "
                    "record one with `maze-lab rollout RUN_DIR`); given several runs, their comparison first. "
                    "Nothing read from the runs runs as code.")
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a run directory (several: compared)")
    report.add_argument("-o", "--output", default="report.html", help="the HTML file to write (default report.html)")
    report.add_argument("--title", help="the report's title (default: the run's name, or the number of runs)")
    report.add_argument("--all-charts", action="store_true",
                        help="a chart for every statistic the runs logged (default: those the cockpit shows first)")
    report.add_argument("--x-axis", choices=["env_steps", "wall_time", "epoch"], default="env_steps",
                        help="what the curves are drawn over (default env_steps)")
    report.add_argument("--max-frames", type=int, default=MAX_FRAMES, metavar="N",
                        help=f"the most steps of the episode the report holds; a longer episode shows every k-th "
                             f"step (default {MAX_FRAMES})")
    report.add_argument("--trust", action="append", metavar="MODULE",
                        help="a module (my_project) or dotted name of your own whose classes the recorded episode "
                             "may rebuild (its env's renderer, its MazeStates); repeatable")
    report.set_defaults(func=_report_command)


def _check_output(path: Path) -> None:
    """Refuse, before anything is read, an output that cannot be written: a directory, a missing folder, a folder
    without write permission."""
    if path.is_dir():
        raise BadInput(f"cannot write the report to {path}: it is a directory; give a file name (-o report.html)")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise BadInput(f"cannot write the report to {path}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise BadInput(f"cannot write the report to {path}: no permission to write there")


def _report_command(args: argparse.Namespace) -> int:
    from maze_lab.run.run_dir import RunDirectory

    for run_dir in args.run_dirs:
        if not Path(run_dir).exists():
            raise BadInput(f"{run_dir} does not exist; give run directories (outputs/<experiment_name>/<timestamp>; "
                           f"`maze-lab runs` lists them)")
        RunDirectory.open(run_dir)  # NotARunDirectoryError: one line, exit 2
    if args.max_frames < 1:
        raise BadInput(f"--max-frames {args.max_frames}: at least 1")
    output = Path(args.output).expanduser()
    _check_output(output)
    try:
        from maze_lab.widgets.report import write_report
    except ModuleNotFoundError as err:
        raise BadInput(f"maze-lab report draws with the notebook extra's packages, and {err.name} is not installed "
                       f"(pip install 'maze-lab[notebook]')") from err
    try:
        path = write_report(args.run_dirs, output, title=args.title, charts="all" if args.all_charts else "default",
                            x_axis=args.x_axis, max_frames=args.max_frames, allowed_classes=args.trust)
    except (PermissionError, IsADirectoryError, NotADirectoryError) as err:
        raise BadInput(f"cannot write the report to {output}: {err.strerror or err}") from err
    except OSError as err:  # a full disk: nothing half-written is left (the file is written atomically)
        if err.errno == errno.ENOENT and not output.parent.is_dir():
            raise BadInput(f"cannot write the report to {output}: the folder {output.parent} no longer exists") \
                from err
        _report_fault(args, err, f"writing {output}")
        return 1
    size = path.stat().st_size
    runs = f"{len(args.run_dirs)} runs compared" if len(args.run_dirs) > 1 else "1 run"
    print(f"maze-lab report: {path} ({size / 1024**2:.1f} MB, {runs}); it opens offline in any browser")
    return 0
