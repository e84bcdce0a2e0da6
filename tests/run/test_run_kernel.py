"""Background runs in a real Jupyter kernel: the starting cell returns at once, later cells run while training
continues, stop leaves a checkpoint that a new run resumes from, and a failing env shows its traceback without
taking the kernel down."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")
from kernel_utils import Kernel  # noqa: E402

TINY = {"algorithm.epoch_length": 2, "algorithm.n_rollout_steps": 16, "runner.concurrency": 2,
        "algorithm.eval_repeats": 1, "algorithm.patience": 0}
"""Short epochs, and no early stop: with the default patience (15 epochs without improvement) a run stops after
about 4 s on a fast machine, before the tests that need it running are done with it."""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Kernel:
    cwd = tmp_path_factory.mktemp("kernel")
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg", **os.environ}
    k = Kernel.start(cwd=cwd, env=env)
    k.ok(f"import json\nfrom pathlib import Path\nfrom maze_lab.run.run_context import RunContext, RunFailedError\n"
         f"LOGS = {str(cwd / 'outputs')!r}\nTINY = {{**{TINY!r}, 'log_base_dir': LOGS}}")
    yield k
    k.close()


def test_the_project_kernel_packs_its_messages_with_orjson(kernel: Kernel) -> None:
    """The set-up installs orjson, which jupyter_client then uses for every message of the kernel: less of the
    kernel's interpreter per cell, which a run training in the background shares (background_overhead)."""
    assert kernel.value("get_ipython().kernel.session.pack.__name__") == "orjson_packer"


def test_a_cell_gets_its_own_reply_when_other_replies_are_queued(kernel: Kernel) -> None:
    """A kernel slow to start leaves extra kernel_info replies queued (``wait_for_ready`` asks every second); a
    failing cell must still read as failed, not take the "ok" of a reply queued before its own."""
    kernel.kc.kernel_info()  # its reply arrives before the next cell's, as a stale one would
    failed = kernel.run("raise ValueError('this cell fails')")
    assert failed.status == "error" and failed.error["ename"] == "ValueError"
    assert kernel.ok("1 + 1").result == "2"


def test_background_run_in_kernel_stop_and_resume(kernel: Kernel) -> None:
    kernel.ok("rc = RunContext(overrides=TINY, silent=True)")
    start = kernel.ok("handle = rc.train_async(500)")
    # returns at once, not after the 500 epochs (a generous bound: a loaded machine slows every cell)
    assert start.wall < 5.0, f"the cell starting train_async took {start.wall:.2f} s"
    # a second run lives in the same kernel at the same time
    kernel.ok("rc_b = RunContext(overrides={**TINY, 'seed': 7}, silent=True)\nhandle_b = rc_b.train_async(500)")

    kernel.wait_for("handle.progress['epoch'] >= 1 and handle_b.progress['env_steps'] > 0")
    first = kernel.value("handle.progress")
    assert first["status"] == "running"
    # later cells run while training goes on: poll (two runs share 2 cores, so allow time) until it moved on
    kernel.wait_for(f"handle.progress['updates'] > {first['updates']}", timeout=60)
    later_cell = kernel.ok("import json as _json; print(_json.dumps(handle.progress, default=str))")
    later = json.loads(later_cell.stdout)
    assert later_cell.wall < 5.0  # a cell is not held up by the two runs training beside it
    assert later["status"] == "running"
    assert later["env_steps"] > first["env_steps"]
    assert later["updates"] > first["updates"]
    assert kernel.value("len(handle.stats) > 0 and handle.latest_checkpoint is not None")

    # pause holds the run between updates, resume continues it
    kernel.ok("handle.pause()")
    paused = kernel.wait_for("handle.status == 'paused' and handle.progress")
    time.sleep(0.3)
    assert kernel.value("handle.progress['updates']") <= paused["updates"] + 1
    kernel.ok("handle.resume()")
    assert kernel.value("handle.status") == "running"

    # stop leaves a checkpoint; a new run resumes from it
    kernel.ok("ckpt = handle.stop(timeout=None)\nhandle_b.stop(timeout=None)", timeout=600)
    assert kernel.value("handle.status") == "stopped"
    ckpt = Path(kernel.value("str(ckpt)"))
    assert ckpt.is_file()
    saved_epoch = kernel.value("__import__('torch').load(ckpt, weights_only=True)['epoch']")
    assert saved_epoch >= 1
    kernel.ok("rc2 = RunContext(overrides={**TINY, 'input_dir': str(handle.run_dir)}, silent=True)")
    assert kernel.value("rc2.trainer.epoch") == saved_epoch
    kernel.ok("rc2.train(1)")
    assert kernel.value("rc2.trainer.epoch") == saved_epoch + 1
    summary = kernel.value("json.loads((rc2.run_dir / 'maze_lab_run.json').read_text())")
    assert summary["resumed_epoch"] == saved_epoch and summary["status"] == "done"
    assert Path(summary["resumed_from"]) == ckpt.parent.parent
    kernel.ok("rc.close(); rc_b.close(); rc2.close()")


EXPLODING_ENV = '''
from maze_lab.core.wrappers.gym_maze_env import make_gym_maze_env
from maze_lab.core.wrappers.wrapper import Wrapper

class Exploding(Wrapper):
    """Raises at the at-th step."""

    def __init__(self, env, at):
        super().__init__(env)
        self.n, self.at = 0, at

    def step(self, action):
        self.n += 1
        if self.n >= self.at:
            raise RuntimeError(f"the env exploded at step {self.n}")
        return self.env.step(action)

def exploding_env():
    return Exploding(make_gym_maze_env("CartPole-v1"), at=40)
'''


def test_background_failure_shows_traceback_and_kernel_survives(kernel: Kernel) -> None:
    kernel.ok(EXPLODING_ENV)
    start = kernel.ok("rc3 = RunContext(env=exploding_env, overrides=TINY, silent=True)\nh3 = rc3.train_async(50)")
    assert start.wall < 5.0
    kernel.wait_for("not h3.running")
    assert kernel.value("h3.status") == "failed"
    assert "the env exploded at step 40" in kernel.value("h3.traceback")
    assert "Traceback" in kernel.value("h3.traceback")
    # the traceback was printed under the cell that started the run
    shown = kernel.background_output(start.msg_id)
    assert "failed" in shown and "the env exploded at step 40" in shown and "Traceback" in shown
    waited = kernel.run("h3.wait()")
    assert waited.status == "error"
    assert waited.error["ename"] == "RunFailedError"
    assert "the env exploded at step 40" in waited.error["evalue"]
    summary = kernel.value("json.loads((h3.run_dir / 'maze_lab_run.json').read_text())")
    assert summary["status"] == "failed" and "the env exploded" in summary["error"]
    # the kernel is still usable
    assert kernel.ok("1 + 1").result == "2"
    assert kernel.value("sum(range(10))") == 45


def test_awaiting_a_run_keeps_the_event_loop_and_widgets_working(kernel: Kernel) -> None:
    """``await handle.wait_async()`` blocks the cell (papermill waits for it) while other tasks of the kernel's loop
    run and a widget's button click (a comm message) is handled: here the click stops the run."""
    kernel.ok("import asyncio, ipywidgets\nticks = []\n"
              "async def ticker():\n    while True:\n        ticks.append(1)\n        await asyncio.sleep(0.05)\n"
              "rc4 = RunContext(overrides=TINY, silent=True)\nh4 = rc4.train_async(0)\n"
              "stop_button = ipywidgets.Button(description='stop')\n"
              "stop_button.on_click(lambda _: h4.stop(timeout=0))\n"
              "task = asyncio.get_event_loop().create_task(ticker())")
    comm_id = kernel.value("stop_button.model_id")
    kernel.wait_for("h4.progress['epoch'] >= 1")
    msg_id = kernel.kc.execute("final = await h4.wait_async()\nticks_seen = len(ticks)\ntask.cancel()\nprint(final)")
    # the click arrives while the cell is still awaiting the run (which trains until stopped: n_epochs 0)
    kernel.kc.shell_channel.send(kernel.kc.session.msg(
        "comm_msg", {"comm_id": comm_id, "data": {"method": "custom", "content": {"event": "click"}}}))
    deadline = time.monotonic() + 120
    out = ""
    while True:
        msg = kernel.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            out += msg["content"]["text"]
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    assert out.strip() == "stopped"
    assert kernel.value("ticks_seen") > 1
    assert kernel.value("h4.latest_checkpoint is not None")


def test_a_background_run_gives_way_to_a_computing_cell_not_to_a_waiting_one(kernel: Kernel) -> None:
    """While a cell computes, the background run pauses at its step boundaries so that the cell has the interpreter
    (maze_lab.core.utils.yielding, told of the cells by IPython's cell events); a cell that only waits (on an event)
    finds the pauses unused and the run backs off; a blocking run in a cell never pauses."""
    kernel.ok("from maze_lab.core.utils import yielding\n"
              "rc_y = RunContext(overrides=TINY, silent=True)\nh_y = rc_y.train_async(2000)")
    kernel.wait_for("h_y.progress.get('updates', 0) >= 2")
    # a pure-Python cell, busy until the run has made 5 pauses that the cell used (or 60 s; the assert says so)
    kernel.ok("import time as _t\n_c = yielding.counts\n_used0, _t0 = _c['pauses'] - _c['unused'], _t.monotonic()\n"
              "while _c['pauses'] - _c['unused'] < _used0 + 5 and _t.monotonic() - _t0 < 60:\n"
              "    sum(i * i for i in range(2000))\n"
              "_busy_used = _c['pauses'] - _c['unused'] - _used0")
    assert kernel.value("_busy_used") >= 5
    # a waiting cell: the run's pauses go unused, and it probes again only every IDLE_BACKOFF_S
    kernel.ok("_n = dict(_c)\n_t0 = _t.monotonic()\n__import__('threading').Event().wait(1.0)\n"
              "_w = {k: _c[k] - _n[k] for k in _n}\n_w['seconds'] = _t.monotonic() - _t0")
    waited = kernel.value("_w")
    # (the cell's own first and last statements may use a pause or two)
    assert waited["unused"] >= waited["pauses"] - 2, waited
    assert waited["pauses"] <= waited["seconds"] / kernel.value("yielding.IDLE_BACKOFF_S") + 3, waited
    # trivial cells end the run's pauses early (``cut_short``): a short cell costs the run what it computes, not a
    # whole pause (a cell whose few milliseconds fall where the run has no step boundary, e.g. while it writes a
    # checkpoint, makes it no pause at all: several cells, on a loaded machine more)
    kernel.ok("_cut0 = yielding.counts['cut_short']")
    for _ in range(200):
        kernel.ok("1 + 1")
        if kernel.value("yielding.counts['cut_short'] - _cut0") > 0:
            break
    assert kernel.value("h_y.running"), kernel.value("h_y.status")
    assert kernel.value("yielding.counts['cut_short'] - _cut0") > 0
    kernel.ok("h_y.stop(); h_y.wait(timeout=120)")
    # a blocking run trains in the cell itself: no pauses
    kernel.ok("_n = yielding.counts['pauses']\n"
              "RunContext(overrides=TINY, silent=True).train(1)")
    assert kernel.value("yielding.counts['pauses'] - _n") == 0


def _background_thread_in_give_way() -> Any:
    """A thread marked as a background run that calls ``give_way`` once; returned when it is inside that call
    (waiting there), or the assertion says that it never got there."""
    import sys
    import threading

    from maze_lab.core.utils import yielding

    def body() -> None:
        with yielding.background_run():
            yielding.give_way()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()

    def in_give_way() -> bool:
        frame = sys._current_frames().get(thread.ident)
        while frame is not None:
            if frame.f_code.co_name == "give_way":
                return True
            frame = frame.f_back
        return False

    deadline = time.monotonic() + 60
    while not in_give_way():
        assert thread.is_alive() and time.monotonic() < deadline, "the background run never waited in give_way"
        time.sleep(0.01)
    return thread


def test_a_pause_ends_as_soon_as_the_cell_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pausing background run goes on when the cell ends, not after the longest pause (here 10 minutes): a short
    cell costs the run only what the cell computes."""
    from maze_lab.core.utils import yielding

    monkeypatch.setattr(yielding, "PAUSE_S", 600.0)
    cut0 = yielding.counts["cut_short"]

    yielding.cell_started()  # what the run layer says when the kernel starts a cell
    try:
        thread = _background_thread_in_give_way()
    finally:
        yielding.cell_finished()  # the cell has ended
    thread.join(timeout=60)
    assert not thread.is_alive(), "the run still waits out its pause after the cell ended"
    assert yielding.counts["cut_short"] == cut0 + 1


def test_a_short_cell_gets_one_unbroken_pause_and_a_long_one_shares_the_interpreter(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Within GRACE_S of a cell's start the run's pause lasts until the cell ends (here the longest pause is 1 ms and
    the grace 10 minutes: one pause, ended by the cell); past the grace a pause lasts at most PAUSE_S while the cell
    goes on (a long cell shares the interpreter with the run)."""
    import threading

    from maze_lab.core.utils import yielding

    monkeypatch.setattr(yielding, "PAUSE_S", 0.001)
    monkeypatch.setattr(yielding, "GRACE_S", 600.0)
    pauses0, cut0 = yielding.counts["pauses"], yielding.counts["cut_short"]
    yielding.cell_started()
    try:
        thread = _background_thread_in_give_way()
    finally:
        yielding.cell_finished()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert (yielding.counts["pauses"] - pauses0, yielding.counts["cut_short"] - cut0) == (1, 1)

    monkeypatch.setattr(yielding, "GRACE_S", 0.0)  # the cell has gone on for longer than the grace
    yielding.cell_started()
    try:
        def body() -> None:
            with yielding.background_run():
                yielding.give_way()

        thread = threading.Thread(target=body, daemon=True)
        thread.start()
        thread.join(timeout=60)
        assert not thread.is_alive(), "past the grace, a pause must end after PAUSE_S while the cell goes on"
        # a thread that is not a background run (a blocking run in the cell itself) never pauses
        pauses = yielding.counts["pauses"]
        yielding.give_way()
        assert yielding.counts["pauses"] == pauses
    finally:
        yielding.cell_finished()
    assert yielding.counts["cut_short"] - cut0 == 1


def test_the_end_of_an_epoch_gives_way_between_its_parts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Writing an epoch's statistics, evaluating and saving the checkpoint take tens of milliseconds together: a
    background run gives way between their parts too (each writer, each histogram, before the evaluation, between the
    checkpoint files), not only between updates and env steps, so that a cell arriving then is not held up."""
    import sys

    import maze_lab.core.log_stats.writers as writers
    import maze_lab.train.trainers.common.base as base
    import maze_lab.train.trainers.common.checkpoints as checkpoints
    import maze_lab.train.vector_env as vector_env
    from maze_lab.run.run_context import RunContext

    callers: set[str] = set()

    def record() -> None:
        callers.add(sys._getframe(1).f_code.co_name)

    for module in (writers, base, checkpoints, vector_env):
        monkeypatch.setattr(module, "give_way", record)
    rc = RunContext(overrides={**TINY, "log_base_dir": str(tmp_path)}, silent=True)
    rc.train(2)
    rc.close()
    assert {"_train_epochs", "_write_epoch_stats", "write_epoch_stats", "write_checkpoints"} <= callers, callers
    assert "write" in callers, callers  # the TensorBoard writer, between its histograms


def test_an_update_gives_way_between_the_loss_its_gradients_and_the_optimizer_step(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A PPO minibatch (loss, backward, optimizer step) takes 1.5-2 ms and preparing an update's batches 1.5 ms on
    CartPole: the run gives way inside them too (after the rollout, after the batches, before the backward pass and
    before the optimizer's step), so that a cell arriving during an update waits for about half as long."""
    import sys

    import maze_lab.train.trainers.common.actor_critic as actor_critic
    import maze_lab.train.trainers.ppo as ppo
    from maze_lab.run.run_context import RunContext

    where: list[tuple[str, int]] = []

    def record() -> None:
        frame = sys._getframe(1)
        where.append((frame.f_code.co_name, frame.f_lineno))

    monkeypatch.setattr(actor_critic, "give_way", record)
    monkeypatch.setattr(ppo, "give_way", record)
    rc = RunContext(overrides={**TINY, "log_base_dir": str(tmp_path)}, silent=True)
    rc.train(1)
    rc.close()
    steps = rc.trainer.updates * rc.trainer.config.n_optimization_epochs
    assert {name for name, _ in where} == {"_one_update", "update"}, where
    assert sum(name == "_one_update" for name, _ in where) == 2 * rc.trainer.updates
    # three give-ways per gradient step (PPO's update), at three different places in it: before the minibatch's
    # loss, before the backward pass and before the optimizer's step
    assert sum(name == "update" for name, _ in where) >= 3 * steps
    assert len({line for name, line in where if name == "update"}) == 3


def test_outside_a_kernel_a_background_run_changes_nothing() -> None:
    """A script's background run: no cell events to follow, the switch interval stays, give_way never pauses."""
    import sys
    import threading

    from maze_lab.core.utils import yielding
    from maze_lab.run import kernel_yield

    before, pauses = sys.getswitchinterval(), yielding.counts["pauses"]
    seen = []

    def body() -> None:
        with kernel_yield.background_run():
            seen.append(sys.getswitchinterval())
            for _ in range(1000):
                yielding.give_way()

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [before] and sys.getswitchinterval() == before
    assert yielding.counts["pauses"] == pauses
    assert kernel_yield._shell is None  # nothing registered anywhere


KERNEL_STATE = '''
import sys as _sys

def _kernel_state():
    """What maze-lab must leave as it found it: ipykernel's kernel, pyzmq's stream, the output streams, IPython's
    history and events, and the interpreter's switch interval."""
    shell = get_ipython()
    kernel = shell.kernel
    state = {
        "kernel class": type(kernel),
        "dispatch_shell": getattr(kernel.dispatch_shell, "__func__", kernel.dispatch_shell),
        "dispatch_shell set on the kernel": "dispatch_shell" in vars(kernel),
        "shell_stream._recv_callback": getattr(getattr(kernel, "shell_stream", None), "_recv_callback", None),
        "history db_cache_size": shell.history_manager.db_cache_size,
        "switch interval": _sys.getswitchinterval(),
        "events": {name: list(callbacks) for name, callbacks in shell.events.callbacks.items()},
    }
    for name in ("stdout", "stderr"):
        stream = getattr(_sys, name)
        state[f"{name}.flush"] = getattr(stream.flush, "__func__", stream.flush)
        state[f"{name}.flush set on the stream"] = "flush" in vars(stream)
        state[f"{name}.flush is its class's"] = getattr(stream.flush, "__func__", None) is type(stream).flush
    return state

def _changed(before, but=()):
    now = _kernel_state()
    return sorted(key for key in before if key not in but and now[key] != before[key])

_before = _kernel_state()
'''


def test_a_background_run_leaves_the_kernel_exactly_as_it_found_it(tmp_path: Path) -> None:
    """maze-lab lives in the user's kernel: a run training in the background changes none of ipykernel's, pyzmq's
    or IPython's attributes (the kernel's message dispatch, the shell stream's callback, the output streams' flush,
    the history's cache size) nor the interpreter's switch interval, while it trains and after it has stopped; the
    IPython events it follows cells with are gone once the run has ended."""
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg", **os.environ}
    k = Kernel.start(cwd=tmp_path, env=env)
    try:
        k.ok(KERNEL_STATE)  # before maze-lab is imported
        assert k.value("_before['stdout.flush is its class\\'s'] and _before['stderr.flush is its class\\'s']")
        assert k.value("_before['kernel class'].__module__") == "ipykernel.ipkernel"
        k.ok(f"from maze_lab.run.run_context import RunContext\n"
             f"TINY = {{**{TINY!r}, 'log_base_dir': {str(tmp_path / 'outputs')!r}}}\n"
             "h_a = RunContext(overrides=TINY, silent=True).train_async(0)")
        k.wait_for("h_a.progress.get('updates', 0) >= 2")
        for cell in ("print('a cell')", "sum(i * i for i in range(200_000))", "import sys; sys.stdout.flush()"):
            k.ok(cell)
            assert k.value("h_a.running")
            assert k.value("_changed(_before, but=('events',))") == []
        assert k.value("h_a.status") == "running"
        k.ok("h_a.stop(timeout=None); h_a.wait(timeout=120)", timeout=300)
        # the run's thread leaves its background mode right after it counts as ended
        k.wait_for("not _changed(_before)", timeout=30)
        for cell in ("print('after the run')", "1 + 1"):
            k.ok(cell)
            assert k.value("_changed(_before)") == []
        assert k.value("[getattr(f, '__module__', '') for fs in get_ipython().events.callbacks.values() for f in fs "
                       "if getattr(f, '__module__', '').startswith('maze_lab')]") == []
        # the cell that stopped the run ended after the callbacks were gone: no cell counts as running
        assert k.value("__import__('maze_lab.core.utils.yielding', fromlist=['_cells'])._cells") == 0
    finally:
        k.close()
