"""maze-lab's Jupyter kernel (``maze_lab.run.kernel_app``), started through the project's kernel spec as JupyterLab
and papermill start it: shell messages on the main thread (no shell-channel thread, which costs a background run
its speed while cells run), everything else as ipykernel's own kernel; subshells when asked for."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("ipykernel")
from jupyter_client import KernelManager  # noqa: E402

SHELL_CHANNEL_THREAD = "Shell channel"
"""The name ipykernel 7 gives its shell-channel thread."""


class Kernel:
    def __init__(self, *extra: str) -> None:
        self.km = KernelManager(kernel_name="maze-lab")
        self.km.start_kernel(extra_arguments=["--IPKernelApp.log_level=ERROR", *extra], env=dict(os.environ))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    def reply(self, msg_id: str, timeout: float = 120) -> dict[str, Any]:
        """The shell reply to ``msg_id`` (replies to earlier requests are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            msg = self.kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    def stdout(self, code: str) -> str:
        out: list[str] = []
        reply = self.kc.execute_interactive(code, timeout=120, output_hook=lambda m: out.append(
            m["content"].get("text", "") if m["msg_type"] == "stream" else ""))
        assert reply["content"]["status"] == "ok", reply["content"]
        return "".join(out)

    def features(self) -> list[str]:
        return self.reply(self.kc.kernel_info())["content"].get("supported_features", [])

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    k = Kernel()
    yield k
    k.close()


def test_project_kernel_spec_starts_maze_labs_kernel() -> None:
    from jupyter_client.kernelspec import KernelSpecManager

    argv = KernelSpecManager().get_kernel_spec("maze-lab").argv
    assert argv[argv.index("-m") + 1] == "maze_lab.run.kernel_app" and "{connection_file}" in argv


def test_shell_messages_are_handled_on_the_main_thread(kernel: Kernel) -> None:
    """No shell-channel thread and no subshells advertised: a cell's request is read and handled by the thread
    that runs it, without a hand-over between threads that a background run would pay for."""
    assert "kernel subshells" not in kernel.features()
    threads = kernel.stdout("import threading; print(sorted(t.name for t in threading.enumerate()))")
    assert SHELL_CHANNEL_THREAD not in threads and "MainThread" in threads and "IOPub" in threads
    assert kernel.stdout("print(type(get_ipython().kernel).__name__)").strip() == "MazeLabKernel"


def test_debug_messages_are_not_built_unless_written(kernel: Kernel) -> None:
    """At the default log level ipykernel's debug calls (four per message) stop at the logger; with
    ``log_level=DEBUG`` (see the subshell kernel below) they are written."""
    assert kernel.stdout("import logging; print(get_ipython().kernel.log.isEnabledFor(logging.DEBUG), "
                         "get_ipython().kernel.log.isEnabledFor(logging.ERROR))") == "False True\n"


def test_cells_run_as_in_ipykernel(kernel: Kernel) -> None:
    """Output, values, top-level ``await`` (the path of ipykernel that reads the shell-channel thread unchecked)
    and an error's reply."""
    assert kernel.stdout("print('hello')") == "hello\n"
    assert kernel.stdout("import asyncio\nawait asyncio.sleep(0.01)\nprint('awaited')") == "awaited\n"
    reply = kernel.kc.execute_interactive("x = 6 * 7\nx", timeout=60)
    assert reply["content"]["status"] == "ok"
    failed = kernel.kc.execute_interactive("1 / 0", timeout=60)
    assert failed["content"]["status"] == "error" and failed["content"]["ename"] == "ZeroDivisionError"
    assert kernel.stdout("print(x)") == "42\n"


def test_interrupt_stops_a_running_cell_and_the_kernel_goes_on(kernel: Kernel) -> None:
    msg_id = kernel.kc.execute("import time\nprint('started', flush=True)\nfor _ in range(600): time.sleep(0.1)")
    while True:  # the cell's code runs (an interrupt between ipykernel's execute_input and the code is lost, in
        # ipykernel's own kernel too)
        msg = kernel.kc.get_iopub_msg(timeout=60)
        if msg["msg_type"] == "stream" and msg["parent_header"].get("msg_id") == msg_id:
            break
    kernel.km.interrupt_kernel()
    reply = kernel.reply(msg_id, timeout=60)
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
    assert kernel.stdout("print('still here')") == "still here\n"


def test_subshells_when_asked_for() -> None:
    """``--MazeLabKernelApp.subshells=True`` keeps ipykernel's shell-channel thread and its subshells."""
    k = Kernel("--MazeLabKernelApp.subshells=True", "--MazeLabKernelApp.log_level=DEBUG")
    try:
        assert k.stdout("import logging; print(get_ipython().kernel.log.isEnabledFor(logging.DEBUG))") == "True\n"
        assert "kernel subshells" in k.features()
        assert SHELL_CHANNEL_THREAD in k.stdout("import threading; print([t.name for t in threading.enumerate()])")
        request = k.kc.session.msg("create_subshell_request", {})
        k.kc.control_channel.send(request)
        reply = k.kc.control_channel.get_msg(timeout=60)
        assert reply["parent_header"]["msg_id"] == request["header"]["msg_id"]
        assert reply["content"].get("subshell_id"), reply["content"]
        assert k.stdout("print(1 + 1)") == "2\n"
    finally:
        k.close()
