"""maze-lab's Jupyter kernel (``maze_lab.run.kernel_app``), started through the project's kernel spec as JupyterLab
and papermill start it: shell messages on the main thread (no shell-channel thread, which costs a background run
its speed while cells run), everything else as ipykernel's own kernel; subshells when asked for."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

pytest.importorskip("ipykernel")
from kernel_utils import Kernel  # noqa: E402

SHELL_CHANNEL_THREAD = "Shell channel"
"""The name ipykernel 7 gives its shell-channel thread."""


def features(kernel: Kernel) -> list[str]:
    """What the kernel's kernel_info reply advertises."""
    return kernel.reply(kernel.kc.kernel_info(), time.monotonic() + 120)["content"].get("supported_features", [])


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    k = Kernel.start()
    yield k
    k.close()


def test_shell_messages_are_handled_on_the_main_thread(kernel: Kernel) -> None:
    """No shell-channel thread and no subshells advertised: a cell's request is read and handled by the thread
    that runs it, without a hand-over between threads that a background run would pay for."""
    assert "kernel subshells" not in features(kernel)
    threads = kernel.ok("import threading; print(sorted(t.name for t in threading.enumerate()))").stdout
    assert SHELL_CHANNEL_THREAD not in threads and "MainThread" in threads and "IOPub" in threads
    assert kernel.ok("print(type(get_ipython().kernel).__name__)").stdout.strip() == "MazeLabKernel"


def test_debug_messages_are_not_built_unless_written(kernel: Kernel) -> None:
    """At the default log level ipykernel's debug calls (four per message) stop at the logger; with
    ``log_level=DEBUG`` (see the subshell kernel below) they are written."""
    assert kernel.ok("import logging; print(get_ipython().kernel.log.isEnabledFor(logging.DEBUG), "
                     "get_ipython().kernel.log.isEnabledFor(logging.ERROR))").stdout == "False True\n"


def test_cells_run_as_in_ipykernel(kernel: Kernel) -> None:
    """Output, values, top-level ``await`` (the path of ipykernel that reads the shell-channel thread unchecked)
    and an error's reply."""
    assert kernel.ok("print('hello')").stdout == "hello\n"
    assert kernel.ok("import asyncio\nawait asyncio.sleep(0.01)\nprint('awaited')").stdout == "awaited\n"
    assert kernel.ok("x = 6 * 7\nx").result == "42"
    failed = kernel.run("1 / 0")
    assert failed.status == "error" and failed.error["ename"] == "ZeroDivisionError"
    assert kernel.ok("print(x)").stdout == "42\n"


def test_interrupt_stops_a_running_cell_and_the_kernel_goes_on(kernel: Kernel) -> None:
    msg_id = kernel.kc.execute("import time\nprint('started', flush=True)\nfor _ in range(600): time.sleep(0.1)")
    while True:  # the cell's code runs (an interrupt between ipykernel's execute_input and the code is lost, in
        # ipykernel's own kernel too)
        msg = kernel.kc.get_iopub_msg(timeout=60)
        if msg["msg_type"] == "stream" and msg["parent_header"].get("msg_id") == msg_id:
            break
    kernel.km.interrupt_kernel()
    reply = kernel.reply(msg_id, time.monotonic() + 60)
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
    assert kernel.ok("print('still here')").stdout == "still here\n"


def test_subshells_when_asked_for() -> None:
    """``--MazeLabKernelApp.subshells=True`` keeps ipykernel's shell-channel thread and its subshells."""
    k = Kernel.start("--MazeLabKernelApp.subshells=True", "--MazeLabKernelApp.log_level=DEBUG")
    try:
        assert k.ok("import logging; print(get_ipython().kernel.log.isEnabledFor(logging.DEBUG))").stdout == "True\n"
        assert "kernel subshells" in features(k)
        assert SHELL_CHANNEL_THREAD in k.ok("import threading; print([t.name for t in threading.enumerate()])").stdout
        request = k.kc.session.msg("create_subshell_request", {})
        k.kc.control_channel.send(request)
        reply = k.kc.control_channel.get_msg(timeout=60)
        assert reply["parent_header"]["msg_id"] == request["header"]["msg_id"]
        assert reply["content"].get("subshell_id"), reply["content"]
        assert k.ok("print(1 + 1)").stdout == "2\n"
    finally:
        k.close()
