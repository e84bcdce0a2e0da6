"""maze-lab's Jupyter kernel: IPython's kernel (ipykernel) with its shell messages handled on the main thread.

ipykernel 7 receives every shell message (a cell's execute request, a widget's comm message) on a thread of its own,
the shell-channel thread, which reads the message's header and hands it over to the main thread through a socket pair;
that thread exists for kernel subshells (cells that run concurrently in other threads of one kernel). In a kernel
that trains in the background, every such hand-over also waits for the training thread to let go of the interpreter
lock and takes it from the run once more. Measured within one background PPO run with a trivial cell every 100 ms
(``tests/benchmarks/background_overhead.py``), the cells cost the run a median 5.1% of its env steps per second with
the shell-channel thread and 3.8% without it (13 and 14 runs; single runs spread from 0% to 9%). Its logger also
passes on only what its handlers write (traitlets' applications build a record for every debug call and drop it at
the handler). The kernel is ipykernel's otherwise: messages, comms (widgets), the debugger, interrupts, ``await`` at
the top level of a cell and the event loop integrations.

Subshells are off by default (the kernel does not advertise them, as ipykernel 6 did not); the option
``--MazeLabKernelApp.subshells=True`` (in the kernel spec's ``argv``, or ``c.MazeLabKernelApp.subshells = True`` in an
``ipython_kernel_config.py``) keeps ipykernel's shell-channel thread and subshells.

The kernel spec ``maze-lab`` starts this module (``python -m maze_lab.run.kernel_app -f {connection_file}``);
``python -m maze_lab.run.kernel_app install --sys-prefix`` writes that spec (``scripts/setup.sh`` does). Imported only
by the kernel process: the engine never imports ipykernel.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Any

MODULE = "maze_lab.run.kernel_app"
"""What the kernel spec's ``argv`` runs with ``python -m``."""


class _NoShellChannelThread:
    """Stands where ipykernel keeps its shell-channel thread when there is none: false in ipykernel's checks (so the
    shell stream is read on the main thread's event loop and no subshells are advertised), with the one attribute
    that ipykernel 7 reads without checking (``parent_thread``, the thread that runs cells and is interrupted by
    SIGINT)."""

    parent_thread = threading.main_thread()

    def __bool__(self) -> bool:
        return False


def _app_class() -> type:
    """The kernel application (classes made on demand: ipykernel is imported only in the kernel process)."""
    from ipykernel.ipkernel import IPythonKernel
    from ipykernel.kernelapp import IPKernelApp
    from traitlets import Bool, Type

    class MazeLabKernel(IPythonKernel):
        """IPython's kernel; supports subshells only where its application kept the shell-channel thread."""

        @property
        def _supports_kernel_subshells(self) -> bool:
            return bool(self.shell_channel_thread)

    class MazeLabKernelApp(IPKernelApp):
        """IPython's kernel application without ipykernel's shell-channel thread (unless ``subshells`` is set)."""

        name = "maze-lab-kernel"
        kernel_class = Type(MazeLabKernel, klass="ipykernel.kernelbase.Kernel", config=True,
                            help="The kernel class (maze-lab's IPython kernel).")
        subshells = Bool(False, config=True,
                         help="Keep ipykernel's shell-channel thread and kernel subshells (costs a background "
                              "training run a few percent of its speed while cells run).")

        def _configure_logging(self) -> None:
            # traitlets sets the application's logger to DEBUG and filters at its handlers, so every debug call of
            # ipykernel (four per shell message) builds a log record that no handler writes, in the interpreter
            # that a background run shares: the logger passes only what one of its handlers would write
            super()._configure_logging()
            levels = [handler.level for handler in self.log.handlers]
            if levels:
                self.log.setLevel(min(levels))

        def init_sockets(self) -> None:
            super().init_sockets()
            if not self.subshells and getattr(self, "shell_channel_thread", None) is not None:
                self.shell_channel_thread = _NoShellChannelThread()

    return MazeLabKernelApp


def install(name: str = "maze-lab", display_name: str | None = None, prefix: str | None = None,
            user: bool = False) -> Path:
    """Write the kernel spec ``name`` that starts this kernel with this Python (``prefix``: under that prefix, e.g.
    ``sys.prefix``; ``user``: the user's own kernels; neither: the system's). Returns the spec's directory."""
    from ipykernel.kernelspec import install as install_ipykernel

    where = install_ipykernel(kernel_name=name, display_name=display_name, prefix=prefix, user=user)
    spec_file = Path(where) / "kernel.json"
    spec: dict[str, Any] = json.loads(spec_file.read_text())
    argv = spec["argv"]
    if "ipykernel_launcher" not in argv:
        raise RuntimeError(f"{spec_file}: ipykernel wrote a kernel spec without 'ipykernel_launcher' in its argv "
                           f"({argv}); maze-lab cannot point it at its kernel")
    argv[argv.index("ipykernel_launcher")] = MODULE
    spec_file.write_text(json.dumps(spec, indent=1))
    return Path(where)


def main(argv: list[str] | None = None) -> None:
    """``python -m maze_lab.run.kernel_app [kernel options]`` starts the kernel; ``… install [--sys-prefix | --user
    | --prefix DIR] [--name N] [--display-name D]`` writes its kernel spec."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["install"]:
        parser = argparse.ArgumentParser(prog=f"python -m {MODULE} install",
                                         description="Write the Jupyter kernel spec that starts maze-lab's kernel.")
        parser.add_argument("--name", default="maze-lab")
        parser.add_argument("--display-name", default=None)
        where = parser.add_mutually_exclusive_group()
        where.add_argument("--sys-prefix", action="store_true", help="under this Python's prefix (its environment)")
        where.add_argument("--prefix", default=None, help="under this prefix")
        where.add_argument("--user", action="store_true", help="among the user's own kernels")
        opts = parser.parse_args(args[1:])
        prefix = sys.prefix if opts.sys_prefix else opts.prefix
        print(install(opts.name, opts.display_name, prefix=prefix, user=opts.user))
        return
    app = _app_class()
    app.launch_instance(argv=args)


if __name__ == "__main__":
    # as ipykernel_launcher does: the kernel's working directory (where ``-m`` put it) must not shadow the modules the
    # kernel imports now; IPython adds it back for the cells
    if sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
        del sys.path[0]
    main()
