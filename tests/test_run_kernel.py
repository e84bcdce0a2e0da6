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
        "algorithm.eval_repeats": 1}


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
    assert start.wall < 1.0, f"the cell starting train_async took {start.wall:.2f} s"
    # a second run lives in the same kernel at the same time
    kernel.ok("rc_b = RunContext(overrides={**TINY, 'seed': 7}, silent=True)\nhandle_b = rc_b.train_async(500)")

    kernel.wait_for("handle.progress['epoch'] >= 1 and handle_b.progress['env_steps'] > 0")
    first = kernel.value("handle.progress")
    assert first["status"] == "running"
    # later cells run while training goes on: poll (two runs share 2 cores, so allow time) until it moved on
    kernel.wait_for(f"handle.progress['updates'] > {first['updates']}", timeout=60)
    later_cell = kernel.ok("import json as _json; print(_json.dumps(handle.progress, default=str))")
    later = json.loads(later_cell.stdout)
    assert later_cell.wall < 1.0
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
    assert start.wall < 1.0
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
    (maze_lab.run.kernel_yield); a cell that only waits (on an event) finds the pauses unused and the run
    backs off; a blocking run in a cell never pauses."""
    kernel.ok("from maze_lab.run import kernel_yield\n"
              "rc_y = RunContext(overrides=TINY, silent=True)\nh_y = rc_y.train_async(2000)")
    kernel.wait_for("h_y.progress.get('updates', 0) >= 2")
    # a pure-Python cell, busy until the run has made 5 pauses that the cell used (or 60 s; the assert says so)
    kernel.ok("import time as _t\n_c = kernel_yield.counts\n_used0, _t0 = _c['pauses'] - _c['unused'], _t.monotonic()\n"
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
    assert waited["pauses"] <= waited["seconds"] / kernel.value("kernel_yield.IDLE_BACKOFF_S") + 3, waited
    kernel.ok("h_y.stop(); h_y.wait(timeout=120)")
    # a blocking run trains in the cell itself: no pauses
    kernel.ok("_n = kernel_yield.counts['pauses']\n"
              "RunContext(overrides=TINY, silent=True).train(1)")
    assert kernel.value("kernel_yield.counts['pauses'] - _n") == 0


def test_a_background_run_gives_way_to_a_widget_message_and_not_only_to_cells(kernel: Kernel) -> None:
    """The run gives way while the kernel handles any shell message, not only a cell: a button's click handler (a
    comm message sent while no cell runs) that computes gets the interpreter through the run's pauses; trivial cells
    end the run's pauses early (``cut_short``), so a short cell does not cost the run a whole pause."""
    kernel.ok("from maze_lab.run import kernel_yield\nimport ipywidgets, time as _t\n"
              "rc_w = RunContext(overrides=TINY, silent=True)\nh_w = rc_w.train_async(0)\nclicked = {}\n"
              "def busy_click(_):\n"
              "    c = kernel_yield.counts\n"
              "    used0, t0 = c['pauses'] - c['unused'], _t.monotonic()\n"
              "    while c['pauses'] - c['unused'] < used0 + 5 and _t.monotonic() - t0 < 60:\n"
              "        sum(i * i for i in range(2000))\n"
              "    clicked['used'] = c['pauses'] - c['unused'] - used0\n"
              "busy_button = ipywidgets.Button(description='busy')\nbusy_button.on_click(busy_click)")
    comm_id = kernel.value("busy_button.model_id")
    # the kernel's shell messages are followed from their arrival and through their handler
    assert kernel.value("get_ipython().kernel.shell_stream._recv_callback.__qualname__") == \
        "_follow_arrivals.<locals>.on_recv"
    assert kernel.value("get_ipython().kernel.dispatch_shell.__qualname__") == \
        "_follow_dispatch.<locals>.dispatch_shell"
    try:
        kernel.wait_for("h_w.progress.get('updates', 0) >= 2")
        kernel.kc.shell_channel.send(kernel.kc.session.msg(
            "comm_msg", {"comm_id": comm_id, "data": {"method": "custom", "content": {"event": "click"}}}))
        assert kernel.wait_for("clicked.get('used')", timeout=180) >= 5
        # trivial cells until one has cut a pause short (a cell whose few milliseconds fall where the run has no
        # step boundary, e.g. while it writes a checkpoint, makes it no pause at all: several cells, on a loaded
        # machine more)
        kernel.ok("_cut0 = kernel_yield.counts['cut_short']")
        for _ in range(200):
            kernel.ok("1 + 1")
            if kernel.value("kernel_yield.counts['cut_short'] - _cut0") > 0:
                break
        assert kernel.value("kernel_yield.counts['cut_short'] - _cut0") > 0
    finally:
        kernel.ok("h_w.stop(); h_w.wait(timeout=120)")


def test_an_empty_flush_does_not_wait_for_the_io_thread_and_output_still_arrives(kernel: Kernel) -> None:
    """ipykernel flushes stdout and stderr up to seven times per cell and each flush hands over to its I/O thread and
    waits, written or not: in a kernel that maze-lab follows, a flush with nothing buffered returns at once (no
    hand-over), while what a cell or another thread prints arrives as before, ahead of the cell's idle status."""
    kernel.ok("import sys, threading\nfrom maze_lab.run import kernel_yield\nkernel_yield.hook_kernel_cells()\n"
              "_pub = sys.stdout.pub_thread\n_handed = []\n_schedule = _pub.schedule\n"
              "_pub.schedule = lambda f: (_handed.append(f), _schedule(f))[1]")
    try:
        kernel.ok("_h0 = len(_handed)\nfor _s in (sys.stdout, sys.stderr, sys.stdout):\n    _s.flush()\n"
                  "_empty_handovers = len(_handed) - _h0")
        assert kernel.value("_empty_handovers") == 0
        cell = kernel.ok("print('written', end=' ')\n_h1 = len(_handed)\nsys.stdout.flush()\n"
                         "_full_handovers = len(_handed) - _h1\n"
                         "_t = threading.Thread(target=print, args=('from a thread',))\n_t.start(); _t.join()\n"
                         "sys.stderr.write('to stderr')")
        assert kernel.value("_full_handovers") >= 1  # what was written is flushed through the I/O thread
        assert cell.stdout == "written from a thread\n" and cell.stderr == "to stderr"
    finally:
        kernel.ok("_pub.schedule = _schedule")


def test_while_a_run_trains_history_is_written_in_batches_and_all_of_it_when_the_run_ends(kernel: Kernel) -> None:
    """While a background run trains, IPython writes its input history every HISTORY_CACHE cells instead of after
    each (each write wakes its history thread, which takes the interpreter from the run); the session's history
    stays complete in memory, and when the run ends the setting is back and every cell is in the database."""
    kernel.ok("from maze_lab.run import kernel_yield\n_hm = get_ipython().history_manager\n_size0 = _hm.db_cache_size\n"
              "rc_h = RunContext(overrides=TINY, silent=True)\nh_h = rc_h.train_async(0)")
    try:
        kernel.wait_for("h_h.progress.get('updates', 0) >= 1")
        assert kernel.value("_hm.db_cache_size") == kernel.value("kernel_yield.HISTORY_CACHE") > kernel.value("_size0")
        kernel.ok("_during_training_marker = 1")
        session = kernel.value("_hm.session_number")
        in_memory = kernel.value("[src for _, _, src in _hm.get_range(raw=True)]")
        assert "_during_training_marker = 1" in in_memory
    finally:
        kernel.ok("h_h.stop(); h_h.wait(timeout=120)")
    assert kernel.value("_hm.db_cache_size") == kernel.value("_size0")
    kernel.wait_for(f"'_during_training_marker = 1' in [r[0] for r in _hm.db.execute("
                    f"'SELECT source_raw FROM history WHERE session = ?', ({session},))]", timeout=60)


def _background_thread_in_give_way() -> Any:
    """A thread marked as a background run that calls ``give_way`` once; returned when it is inside that call
    (waiting there), or the assertion says that it never got there."""
    import sys
    import threading

    from maze_lab.run import kernel_yield

    def body() -> None:
        with kernel_yield.background_run():
            kernel_yield.give_way()

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


def test_a_pause_ends_as_soon_as_the_kernel_has_handled_its_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pausing background run goes on when the kernel's message is done, not after the longest pause (here
    10 minutes): a short cell costs the run only what the cell computes."""

    from maze_lab.run import kernel_yield

    monkeypatch.setattr(kernel_yield, "PAUSE_S", 600.0)
    cut0 = kernel_yield.counts["cut_short"]

    kernel_yield._enter()  # what the kernel does when a shell message arrives
    try:
        thread = _background_thread_in_give_way()
    finally:
        kernel_yield._leave()  # the kernel has handled its message
    thread.join(timeout=60)
    assert not thread.is_alive(), "the run still waits out its pause after the kernel's message was handled"
    assert kernel_yield.counts["cut_short"] == cut0 + 1


def test_a_short_message_gets_one_unbroken_pause_and_a_long_one_shares_the_interpreter(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Within GRACE_S of the kernel starting a message the run's pause lasts until the message is handled (here the
    longest pause is 1 ms and the grace 10 minutes: one pause, ended by the message); past the grace a pause lasts
    at most PAUSE_S while the message goes on (a long cell shares the interpreter with the run)."""
    import threading

    from maze_lab.run import kernel_yield

    monkeypatch.setattr(kernel_yield, "PAUSE_S", 0.001)
    monkeypatch.setattr(kernel_yield, "GRACE_S", 600.0)
    pauses0, cut0 = kernel_yield.counts["pauses"], kernel_yield.counts["cut_short"]
    kernel_yield._enter()
    try:
        thread = _background_thread_in_give_way()
    finally:
        kernel_yield._leave()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert (kernel_yield.counts["pauses"] - pauses0, kernel_yield.counts["cut_short"] - cut0) == (1, 1)

    monkeypatch.setattr(kernel_yield, "GRACE_S", 0.0)  # the message has gone on for longer than the grace
    kernel_yield._enter()
    try:
        def body() -> None:
            with kernel_yield.background_run():
                kernel_yield.give_way()

        thread = threading.Thread(target=body, daemon=True)
        thread.start()
        thread.join(timeout=60)
        assert not thread.is_alive(), "past the grace, a pause must end after PAUSE_S while the message goes on"
    finally:
        kernel_yield._leave()
    assert kernel_yield.counts["cut_short"] - cut0 == 1


def test_the_pause_lasts_until_the_kernels_io_thread_has_sent_the_idle_status() -> None:
    """A handled message ends the pause only once the kernel's I/O thread has sent what the handler published (the
    idle status the user waits for): the release is queued behind those sends, not done when the handler returns."""
    import asyncio
    import types

    from maze_lab.run import kernel_yield

    queued: list = []
    seen: list[int] = []

    async def dispatch_shell(msg: object) -> None:
        seen.append(kernel_yield._busy)  # the kernel counts as busy while its handler runs
        queued.append(lambda: None)  # what the handler publishes (the idle status) is queued first

    kernel = types.SimpleNamespace(dispatch_shell=dispatch_shell,
                                   iopub_thread=types.SimpleNamespace(schedule=queued.append))
    assert kernel_yield._follow_dispatch(kernel)
    busy0 = kernel_yield._busy
    asyncio.run(kernel.dispatch_shell("a message"))
    assert seen == [busy0 + 1]
    assert kernel_yield._busy == busy0 + 1 and not kernel_yield._quiet.is_set()  # the sends are still queued
    for send in queued:  # the I/O thread works through its queue in order
        send()
    assert kernel_yield._busy == busy0 and kernel_yield._quiet.is_set() == (busy0 == 0)


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
    from maze_lab.run.run_context import RunContext

    where: list[tuple[str, int]] = []

    def record() -> None:
        frame = sys._getframe(1)
        where.append((frame.f_code.co_name, frame.f_lineno))

    monkeypatch.setattr(actor_critic, "give_way", record)
    rc = RunContext(overrides={**TINY, "log_base_dir": str(tmp_path)}, silent=True)
    rc.train(1)
    rc.close()
    steps = rc.trainer.updates * rc.trainer.config.n_optimization_epochs
    assert {name for name, _ in where} == {"_one_update", "_step"}, where
    assert sum(name == "_one_update" for name, _ in where) == 2 * rc.trainer.updates
    # two give-ways per gradient step, at two different places in it (before the backward pass and after it)
    assert sum(name == "_step" for name, _ in where) >= 2 * steps
    assert len({line for name, line in where if name == "_step"}) == 2


def test_a_run_waits_for_an_arrived_message_to_reach_its_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between a shell message's arrival and its handler, the kernel's threads pass it on: a background run that
    reaches a step boundary then waits (without the lock) until the handler starts, instead of competing with them;
    once the message is handled it goes on."""
    import types

    from maze_lab.run import kernel_yield

    monkeypatch.setattr(kernel_yield, "ARRIVAL_S", 600.0)
    received: list = []
    stream = types.SimpleNamespace(_recv_callback=received.append)
    assert kernel_yield._follow_arrivals(types.SimpleNamespace(shell_stream=stream))
    arrivals0 = kernel_yield.counts["arrivals"]
    stream._recv_callback("a message")  # what pyzmq calls in the receiving thread
    assert received == ["a message"] and kernel_yield._arriving

    thread = _background_thread_in_give_way()
    kernel_yield._enter()  # the handler starts ...
    kernel_yield._leave()  # ... and ends
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert kernel_yield.counts["arrivals"] == arrivals0 + 1 and not kernel_yield._arriving


def test_outside_a_kernel_a_background_run_changes_nothing() -> None:
    """A script's background run: no cell events to follow, the switch interval stays, give_way never pauses."""
    import sys
    import threading

    from maze_lab.run import kernel_yield

    before, pauses = sys.getswitchinterval(), kernel_yield.counts["pauses"]
    seen = []

    def body() -> None:
        with kernel_yield.background_run():
            seen.append(sys.getswitchinterval())
            for _ in range(1000):
                kernel_yield.give_way()

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [before] and sys.getswitchinterval() == before
    assert kernel_yield.counts["pauses"] == pauses
