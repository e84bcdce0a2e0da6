"""A real Jupyter kernel driven cell by cell, as a frontend drives it (jupyter_client), for the kernel tests."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Cell:
    """What one executed cell produced."""

    status: str
    wall: float
    stdout: str = ""
    stderr: str = ""
    result: str | None = None
    error: dict[str, Any] | None = None
    msg_id: str = ""


@dataclass
class Kernel:
    """A real IPython kernel driven cell by cell; every iopub message is kept (background output included)."""

    km: Any
    kc: Any
    messages: list[dict] = field(default_factory=list)

    def run(self, code: str, timeout: float = 120.0) -> Cell:
        """Execute one cell; its wall time runs from the request to the kernel going idle again."""
        t0 = time.perf_counter()
        msg_id = self.kc.execute(code, allow_stdin=False)
        cell = Cell(status="?", wall=0.0, msg_id=msg_id)
        deadline = time.monotonic() + timeout
        while True:
            msg = self.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            self.messages.append(msg)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content["execution_state"] == "idle":
                break
            if kind == "stream":
                if content["name"] == "stdout":
                    cell.stdout += content["text"]
                else:
                    cell.stderr += content["text"]
            elif kind == "execute_result":
                cell.result = content["data"].get("text/plain")
            elif kind == "error":
                cell.error = content
        cell.wall = time.perf_counter() - t0
        cell.status = self.reply(msg_id, deadline)["content"]["status"]
        return cell

    def reply(self, msg_id: str, deadline: float) -> dict:
        """The shell reply to ``msg_id``. Replies to other requests are skipped: ``wait_for_ready`` sends a
        kernel_info request every second until one is answered, so a kernel slow to start (a loaded machine)
        leaves extra kernel_info replies queued, and taking the next reply would give each cell the status of an
        earlier request (a failing cell would read as "ok")."""
        while True:
            reply = self.kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    def ok(self, code: str, timeout: float = 120.0) -> Cell:
        """Execute a cell that must succeed."""
        cell = self.run(code, timeout)
        assert cell.status == "ok", f"cell failed: {code}\n" + "\n".join((cell.error or {}).get("traceback", []))
        return cell

    def value(self, expr: str) -> Any:
        """The value of an expression in the kernel (through JSON)."""
        cell = self.ok(f"import json as _json; print(_json.dumps({expr}, default=str))")
        return json.loads(cell.stdout.strip().splitlines()[-1])

    def wait_for(self, expr: str, timeout: float = 300.0) -> Any:
        """Poll an expression from cells until it is true."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.value(expr)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"{expr} still false after {timeout} s")

    def background_output(self, parent_msg_id: str) -> str:
        """Everything streamed with ``parent_msg_id`` as parent, also after that cell ended."""
        while True:  # collect what is already queued
            try:
                self.messages.append(self.kc.get_iopub_msg(timeout=0.2))
            except Exception:  # noqa: BLE001 - queue.Empty: nothing more queued
                break
        return "".join(m["content"].get("text", "") for m in self.messages
                       if m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == parent_msg_id)

    @classmethod
    def start(cls, *extra: str, name: str = "python3", cwd: Path | None = None,
              env: dict[str, str] | None = None) -> Kernel:
        """Start the kernel ``name`` (its kernel spec, as JupyterLab and papermill start it) with ``extra`` kernel
        options, and wait until it answers."""
        from jupyter_client import KernelManager

        km = KernelManager(kernel_name=name)
        km.start_kernel(cwd=None if cwd is None else str(cwd),
                        extra_arguments=["--IPKernelApp.log_level=ERROR", *extra], env=env or dict(os.environ))
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
        return cls(km, kc)

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)

