"""What maze-lab sends to worker processes keeps the source file of code pickled by value, so a worker's traceback
says where a notebook's or a test module's env was defined (cloudpickle >= 3.1.3 alone names it ``<dynamic-code>``)."""

from __future__ import annotations

import subprocess
import sys

import cloudpickle

from maze_lab.core.utils import pickling

SOURCE = '''
class BrokenEnv:
    def step(self, action):
        return helper(action)

def helper(action):
    return (lambda a: 1 / a)(action)

def make(scale):
    def factory():
        return BrokenEnv()
    return factory
'''
LOAD_AND_FAIL = """
import pickle, sys, traceback
make, factory = pickle.loads(sys.stdin.buffer.read())
print(make.__code__.co_filename, factory.__code__.co_filename)
try:
    factory().step(0)
except ZeroDivisionError:
    traceback.print_exc()
"""


def _module_not_importable(filename: str) -> dict:
    """Functions and a class as a notebook cell defines them: in a module no worker can import (pickled by value)."""
    namespace: dict = {"__name__": "defined_in_a_cell"}
    exec(compile(SOURCE, filename, "exec"), namespace)  # noqa: S102 - the test's own source
    return namespace


def _in_fresh_interpreter(payload: bytes) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LOAD_AND_FAIL], input=payload, capture_output=True, timeout=120,
                          check=True)


def test_code_pickled_by_value_keeps_its_file_in_a_worker_traceback(tmp_path):
    filename = str(tmp_path / "my_env.py")
    ns = _module_not_importable(filename)
    done = _in_fresh_interpreter(pickling.dumps((ns["make"], ns["make"](2))))
    assert done.stdout.decode().split() == [filename, filename]
    trace = done.stderr.decode()
    # every frame of the env's code (method, module function, lambda) names the file and its line
    assert trace.count(f'File "{filename}"') == 3, trace
    assert f'File "{filename}", line 4, in step' in trace
    assert "<dynamic-code>" not in trace


def test_payload_loads_with_plain_pickle_and_equals_cloudpickles_behaviour(tmp_path):
    ns = _module_not_importable(str(tmp_path / "env.py"))
    ours = cloudpickle.loads(pickling.dumps(ns["make"](1)))
    theirs = cloudpickle.loads(cloudpickle.dumps(ns["make"](1)))
    assert type(ours()).__name__ == type(theirs()).__name__ == "BrokenEnv"
    # code of importable modules is still pickled by reference, as cloudpickle does
    assert pickling.dumps(pickling.dumps) == cloudpickle.dumps(pickling.dumps)
