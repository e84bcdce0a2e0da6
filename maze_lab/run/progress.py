"""What a training, a sweep, a search or a rollout shows while it runs: a progress bar and one line per epoch.

The bar (tqdm) appears where someone watches: a terminal (on stderr, so that ``maze-lab train > log.txt`` keeps the
bar on the screen and the lines in the file) or a notebook (tqdm's notebook bar). Piped, redirected or silenced
output gets no bar; the concise epoch lines go to stdout either way. An output that goes away (a closed pipe, a
closed stream) ends the display, never the run: the statistics still go to the run directory and TensorBoard.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from maze_lab.core.log_stats.aggregation import LogStats

# the statistics of the epoch line, in the order a practitioner reads them, with their short names
KEY_STATS = (
    ("policy_loss", "pi_loss"),
    ("critic_value_loss", "v_loss"),
    ("policy_entropy", "entropy"),
    ("approx_kl", "kl"),
    ("clip_fraction", "clip"),
    ("entropy_coef", "alpha"),
    ("critic_value", "value"),
    ("policy_lag", "lag"),
    ("discrete_accuracy", "accuracy"),
    ("perturbed_return_mean", "perturbed_return"),
)
MAX_KEY_STATS = 5
_WRITE_ERRORS = (OSError, ValueError)  # a reader that went away (BrokenPipeError); a stream closed under us


def in_notebook_kernel() -> bool:
    """Whether this process is a Jupyter kernel (its cells show a notebook progress bar)."""
    ipython_module = sys.modules.get("IPython")
    if ipython_module is None:
        return False
    shell = ipython_module.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _terminal_columns(stream: Any) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 0


def make_bar(total: int | None, desc: str, unit: str, initial: int = 0, enabled: bool = True) -> Any:
    """A progress bar where someone watches (a notebook, a terminal on stderr), else None."""
    if not enabled:
        return None
    try:
        if in_notebook_kernel():
            from tqdm.notebook import tqdm as notebook_tqdm

            return notebook_tqdm(total=total, desc=desc, unit=unit, initial=initial, dynamic_ncols=True)
        if is_terminal(sys.stderr):
            from tqdm import tqdm

            # a terminal that does not say its size (a bare pseudo-terminal) gets 100 columns and 24 rows
            sized = _terminal_columns(sys.stderr) > 0
            # a short bar, so that the numbers beside it (env steps, rates, rewards) keep their room
            bar_format = None if total is None else \
                "{desc}: {percentage:3.0f}%|{bar:20}| {n_fmt}/{total_fmt} " + unit + \
                "s [{elapsed}<{remaining}{postfix}]"
            return tqdm(total=total, desc=desc, unit=unit, initial=initial, file=sys.stderr, dynamic_ncols=sized,
                        ncols=None if sized else 100, nrows=None if sized else 24, leave=True, bar_format=bar_format)
    except ImportError:  # the notebook bar needs ipywidgets: lines only
        return None
    return None


def print_line(text: str, stream: TextIO | None = None) -> bool:
    """Print ``text`` above any progress bar; False where the output went away."""
    from tqdm import tqdm

    try:
        tqdm.write(text, file=stream or sys.stdout)
        (stream or sys.stdout).flush()
    except _WRITE_ERRORS:
        return False
    return True


class AboveBar:
    """A text stream whose lines print above the progress bars (for the statistics tables of ``--verbose``)."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if not print_line(line, self.stream):
                raise BrokenPipeError("the console went away")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            line, self._pending = self._pending, ""
            if not print_line(line, self.stream):
                raise BrokenPipeError("the console went away")


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    if abs(value) >= 10 ** digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def key_stats(stats: LogStats) -> list[tuple[str, float]]:
    """The algorithm's key statistics of one epoch (``KEY_STATS``, at most ``MAX_KEY_STATS``); a statistic with one
    value per sub-step or group is shown as their mean."""
    values: dict[str, list[float]] = {}
    for key, value in stats.items():
        if key.topic == "BaseEnvEvents":
            continue
        number = _number(value)
        if number is not None:
            values.setdefault(key.event_name, []).append(number)
    shown = [(short, sum(values[name]) / len(values[name])) for name, short in KEY_STATS if name in values]
    return shown[:MAX_KEY_STATS]


def reward_mean(stats: LogStats) -> float | None:
    """The mean episode reward of an epoch's statistics (None where no episode ended)."""
    for key, value in stats.items():
        if key.topic == "BaseEnvEvents" and key.event_name == "reward" and key.label == "mean":
            return _number(value)
    return None


class EpochProgress:
    """A trainer callback: one concise line per epoch (epoch, env steps, rewards, key losses) and a progress bar over
    the epochs with env steps, env steps/s, ETA and the latest rewards.

    :param start_epoch: the trainer's epoch when this ``train`` call starts (a resumed run starts past 0).
    :param target_epoch: the epoch the call ends at; None trains until early stopping (no ETA).
    :param bar: show a bar (where someone watches; see :func:`make_bar`).
    :param display: print the lines and show the bar (False: only the log file).
    :param log_path: a file the epoch lines are appended to as well (the run's ``console.log``).
    """

    def __init__(self, start_epoch: int, target_epoch: int | None, start_env_steps: int = 0, bar: bool = True,
                 stream: TextIO | None = None, display: bool = True, log_path: Path | None = None):
        self.display = display
        self.log_path = log_path
        self.start_epoch = start_epoch
        self.target_epoch = target_epoch
        self.stream = stream
        self.closed = False
        self._started = time.perf_counter()
        self._start_steps = start_env_steps
        self._train_reward: float | None = None
        self.bar = make_bar(target_epoch, "train", "epoch", initial=start_epoch, enabled=bar and display)
        if self.bar is not None:
            self.bar.set_postfix_str("building the first epoch", refresh=True)

    def line(self, trainer: Any, stats: LogStats) -> str:
        """The epoch line: ``epoch 3/40  steps 14,568  reward 47.61  eval 91  pi_loss -0.00173  v_loss 430 ...``."""
        reward = reward_mean(stats)
        if reward is not None:
            self._train_reward = reward
        target = f"/{self.target_epoch}" if self.target_epoch else ""
        width = len(str(self.target_epoch)) if self.target_epoch else 1
        parts = [f"epoch {trainer.epoch:>{width}}{target}", f"steps {int(trainer.env_steps):<7,}",
                 f"reward {_fmt(reward):<6}", f"eval {_fmt(_number(trainer.last_eval_reward)):<6}"]
        parts += [f"{name} {_fmt(value, 3):<8}" for name, value in key_stats(stats)]
        return "  ".join(parts).rstrip()

    def __call__(self, trainer: Any, stats: LogStats) -> None:
        line = self.line(trainer, stats)
        if self.log_path is not None:
            try:
                with open(self.log_path, "a", encoding="utf-8") as log:
                    log.write(line + "\n")
            except OSError:  # a full disk or a removed directory: the run goes on without its console log
                self.log_path = None
        if self.closed or not self.display:
            return
        if not print_line(line, self.stream):
            self.close()
            return
        if self.bar is not None:
            elapsed = max(time.perf_counter() - self._started, 1e-9)
            rate = (int(trainer.env_steps) - self._start_steps) / elapsed
            try:
                self.bar.set_postfix_str(f"steps {int(trainer.env_steps):,}, {rate:,.0f} steps/s, reward "
                                         f"{_fmt(self._train_reward)}, eval {_fmt(_number(trainer.last_eval_reward))}",
                                         refresh=False)
                self.bar.update(trainer.epoch - self.bar.n)
            except _WRITE_ERRORS:
                self.close()

    def close(self) -> None:
        """Close the bar (it stays on the screen as the last state); nothing more is shown."""
        self.closed = True
        bar, self.bar = self.bar, None
        _close_bar(bar)


class CountProgress:
    """A progress bar over N items (the runs of a sweep, the trials of a search, the episodes of a rollout, the
    executions of a batch), used as a context manager; None of it shows where nobody watches."""

    def __init__(self, total: int | None, desc: str, unit: str, enabled: bool = True):
        self.bar = make_bar(total, desc, unit, enabled=enabled)

    def __enter__(self) -> CountProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def advance(self, n: int = 1, note: str | None = None) -> None:
        """``n`` more items are done; ``note`` (e.g. ``best 195``) shows beside the bar."""
        if self.bar is None:
            return
        try:
            if note is not None:
                self.bar.set_postfix_str(note, refresh=False)
            self.bar.update(n)
        except _WRITE_ERRORS:
            self.close()

    def close(self) -> None:
        bar, self.bar = self.bar, None
        _close_bar(bar)


def _close_bar(bar: Any) -> None:
    """Close a bar where there is one; an output that went away is no error."""
    if bar is not None:
        try:
            bar.close()
        except _WRITE_ERRORS:
            pass
