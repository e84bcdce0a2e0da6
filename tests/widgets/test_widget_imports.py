"""Importing the widgets imports pandas in the importing thread first: plotly peeks at ``sys.modules['pandas']``
without importing it, and a background run's statistics thread imports pandas (through pyarrow) at the same time,
which gave "partially initialized module 'pandas' has no attribute 'Series'" when train.ipynb built its cockpit."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_widgets_wait_for_a_complete_pandas() -> None:
    code = textwrap.dedent("""
        import importlib.machinery, sys, threading
        started = threading.Event()

        class SlowPandas:
            # another thread's import of pandas, caught in the middle of pandas/__init__ (the module is already in
            # sys.modules, without its attributes), as the statistics thread of a starting run can be
            def find_spec(self, name, path=None, target=None):
                if name != "pandas" or threading.current_thread() is threading.main_thread():
                    return None
                spec = importlib.machinery.PathFinder.find_spec(name, path)
                real = spec.loader.exec_module

                def slow_exec(module):
                    started.set()
                    threading.Event().wait(1.0)
                    real(module)

                spec.loader.exec_module = slow_exec
                return spec

        sys.meta_path.insert(0, SlowPandas())
        background = threading.Thread(target=lambda: __import__("pandas"))
        background.start()
        started.wait()
        import maze_lab.widgets  # noqa: F401
        # what plotly does: look pandas up without importing it
        print(hasattr(sys.modules.get("pandas"), "Series"))
        background.join()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"]
