"""Shared by the browser tests: a voila or JupyterLab server in a subprocess, headless Chromium through Playwright,
screenshots into ``test-artifacts/``, and helpers that read what plotly drew on the page.

Every wait polls a condition against a deadline; nothing sleeps a fixed time. Servers run with their own runtime
and config directories (under the test's temporary directory), so they neither see nor disturb the user's
JupyterLab, and they are stopped (terminate, then kill) however the test ends.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
"""Screenshots of the browser tests (git-ignored); look at them after a run."""

CHROMIUM = os.environ.get("MAZE_LAB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

T = TypeVar("T")


def browser_skip_reason() -> str | None:
    """Why the browser tests cannot run here (None where they can)."""
    if importlib.util.find_spec("playwright") is None:
        return "the playwright Python package is not installed (bash scripts/setup.sh --dev installs it)"
    if not os.path.exists(CHROMIUM):
        return f"chromium is not installed at {CHROMIUM} (bash scripts/setup.sh --dev installs it)"
    return None


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(condition: Callable[[], T], timeout: float, interval: float = 0.2, what: str = "a condition") -> T:
    """Poll ``condition`` until it returns something truthy (returned) or ``timeout`` seconds pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class Server:
    """A Jupyter-family server (voila, JupyterLab, ``maze-lab lab``) started in a subprocess; its output goes to a
    log file that failures quote.

    :param command: the command line.
    :param url: the page to open once the server answers.
    :param log: file for the server's stdout and stderr.
    """

    def __init__(self, command: list[str], url: str, log: Path, cwd: Path | None = None,
                 env: dict[str, str] | None = None):
        self.command, self.url, self.log = command, url, log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = log.open("w")
        # its own process group: stopping it also stops the kernels it started
        self.proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=self._log_file, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def output(self) -> str:
        """What the server printed so far."""
        if not self._log_file.closed:
            self._log_file.flush()
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Poll the server's URL until it answers (any HTTP status below 500)."""
        def answers() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    return response.status < 500
            except urllib.error.HTTPError as err:
                return err.code < 500
            except (urllib.error.URLError, OSError):
                return False

        try:
            wait_until(answers, timeout, interval=0.25, what=f"{self.url} to answer")
        except AssertionError as err:
            raise AssertionError(f"{err}\nserver output:\n{self.output()[-3000:]}") from None

    def stop(self, timeout: float = 20.0) -> None:
        """Terminate the server and its kernels (the whole process group); kill what is left after ``timeout``."""
        if self.proc.poll() is None:
            with _ignore_missing():
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with _ignore_missing():
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout)
        # kernels left behind in the group (a server that died before stopping them)
        with _ignore_missing():
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._log_file.close()


@contextmanager
def _ignore_missing() -> Iterator[None]:
    try:
        yield
    except (ProcessLookupError, PermissionError):
        pass


def jupyter_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a test server: this venv first on PATH, private Jupyter runtime/config/data-less dirs,
    one torch/BLAS thread, plus ``extra`` (e.g. ``MAZE_LAB_OUTPUTS``)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path / "jupyter-runtime")
    env["JUPYTER_CONFIG_DIR"] = str(tmp_path / "jupyter-config")  # no user settings or extensions of the user
    env["JUPYTERLAB_SETTINGS_DIR"] = str(tmp_path / "lab-settings")
    env["JUPYTERLAB_WORKSPACES_DIR"] = str(tmp_path / "lab-workspaces")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    env["MPLBACKEND"] = "Agg"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def start_voila(notebook: Path, tmp_path: Path, port: int | None = None, env: dict[str, str] | None = None,
                extra_args: list[str] | tuple[str, ...] = ()) -> Server:
    """voila serving ``notebook`` on 127.0.0.1 (started, not yet waited for)."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "voila", str(notebook), f"--port={port}", "--no-browser", "--Voila.ip=127.0.0.1",
           *extra_args]
    return Server(cmd, f"http://127.0.0.1:{port}/", tmp_path / f"voila-{port}.log", cwd=notebook.parent,
                  env=env or jupyter_env(tmp_path))


def start_maze_lab_lab(tmp_path: Path, cwd: Path, env: dict[str, str], port: int | None = None,
                       voila_args: list[str] | tuple[str, ...] = ()) -> Server:
    """``maze-lab lab --no-browser --port P [-- VOILA_ARGS]``: the Lab app, as a user starts it."""
    port = port or free_port()
    script = Path(sys.executable).parent / "maze-lab"
    base = [str(script)] if script.exists() else [sys.executable, "-m", "maze_lab.cli"]
    extra = ["--", *voila_args] if voila_args else []
    return Server([*base, "lab", "--no-browser", f"--port={port}", *extra], f"http://127.0.0.1:{port}/",
                  tmp_path / f"maze-lab-lab-{port}.log", cwd=cwd, env=env)


def kernel_processes(server: Server) -> list[int]:
    """The pids of the kernels a server runs now: its child processes whose command line names a kernel
    connection file (``-f .../kernel-<id>.json``); a process that ended but was not yet collected is left out."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # ended meanwhile
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] in ("Z", "X") or int(fields[1]) != server.proc.pid:
            continue
        if any(arg.startswith(b"-f") for arg in cmdline) and any(b"kernel-" in arg for arg in cmdline):
            found.append(int(entry.name))
    return found


def page_kernel_id(page: Any) -> str:
    """The id of the kernel of a voila page (from its page config)."""
    return page.evaluate("() => JSON.parse(document.getElementById('jupyter-config-data').textContent).kernelId")


def kernel_known(server: Server, kernel_id: str) -> bool:
    """Whether the server still has kernel ``kernel_id`` (``GET /api/kernels/<id>``: voila lists no kernels, but
    answers for one)."""
    try:
        with urllib.request.urlopen(f"{server.url.rstrip('/')}/api/kernels/{kernel_id}", timeout=10) as response:
            return response.status == 200
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return False
        raise


LAB_TOKEN = "maze-lab-browser-test"


def start_jupyterlab(root: Path, tmp_path: Path, port: int | None = None, env: dict[str, str] | None = None) -> Server:
    """JupyterLab serving ``root`` on 127.0.0.1 with a fixed token (started, not yet waited for)."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root}", f"--port={port}", "--no-browser",
           "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={LAB_TOKEN}", "--allow-root",
           "--ServerApp.disable_check_xsrf=False", "--LabApp.news_url=", "--LabApp.collaborative=False"]
    return Server(cmd, f"http://127.0.0.1:{port}/lab?token={LAB_TOKEN}", tmp_path / f"lab-{port}.log", cwd=root,
                  env=env or jupyter_env(tmp_path))


@contextmanager
def chromium_page(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A page of a fresh headless Chromium; the browser is closed afterwards. Console errors are kept in
    ``page.console_errors`` for failure messages."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.console_errors = []
            page.on("console", lambda msg: page.console_errors.append(msg.text) if msg.type == "error" else None)
            page.on("pageerror", lambda err: page.console_errors.append(str(err)))
            yield page
        finally:
            browser.close()


def screenshot(page: Any, name: str, full_page: bool = True, locator: Any = None) -> Path:
    """Save a screenshot into ``test-artifacts/<name>.png`` (of ``locator`` where given); returns its path."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    if locator is not None:
        try:
            locator.screenshot(path=str(path), timeout=30_000)
        except Exception as err:  # noqa: BLE001 - playwright's TimeoutError: a live view that redraws every second
            # may never hold still for two frames on a loaded machine; the artifact is then the whole page
            if "Timeout" not in type(err).__name__:
                raise
            page.screenshot(path=str(path), full_page=full_page)
    else:
        page.screenshot(path=str(path), full_page=full_page)
    return path


PLOTS_JS = """(root) => {
    const scope = root || document;
    return Array.from(scope.querySelectorAll('.js-plotly-plot')).map((el) => {
        const data = el.data || [];
        const first = data[0] || {};
        const length = (a) => (a && typeof a.length === 'number') ? a.length : 0;
        const box = el.getBoundingClientRect();
        return {
            traces: data.length,
            points: length(first.x),
            maxPoints: data.reduce((m, t) => Math.max(m, length(t.x)), 0),
            title: (el.layout && el.layout.title && (el.layout.title.text || el.layout.title)) || '',
            names: data.map((t) => t.name || ''),
            pointsByName: Object.fromEntries(data.map((t) => [t.name || '', length(t.x)])),
            visible: box.width > 0 && box.height > 0,
            drawn: el.querySelectorAll('.scatterlayer .trace, .barlayer .trace, .pielayer .trace').length,
        };
    });
}"""
"""Per ``.js-plotly-plot`` element: its number of traces, ``data[0].x.length``, the longest trace, its title, the
trace names with their lengths, whether it has a size on the page, and how many traces are drawn in its SVG (data
that never reached the drawing shows as ``traces > 0`` with ``drawn == 0``)."""


def plots(page: Any, within: Any = None) -> list[dict[str, Any]]:
    """What plotly drew: see :data:`PLOTS_JS` (``within``: an element handle to restrict to)."""
    return page.evaluate(PLOTS_JS, within)


def wait_for_plots(page: Any, min_plots: int = 1, min_points: int = 1, timeout: float = 60.0,
                   only_visible: bool = True) -> list[dict[str, Any]]:
    """Wait until at least ``min_plots`` plotly plots (visible ones, by default) have ``min_points`` points in their
    first trace; returns :func:`plots` then. The AssertionError names what was on the page."""
    last: list[dict[str, Any]] = []

    def ready() -> bool:
        nonlocal last
        last = plots(page)
        drawn = [p for p in last if p["points"] >= min_points and (p["visible"] or not only_visible)]
        return len(drawn) >= min_plots

    try:
        wait_until(ready, timeout, interval=0.25, what=f"{min_plots} plot(s) with >= {min_points} points")
    except AssertionError as err:
        errors = "\n".join(getattr(page, "console_errors", [])[-10:])
        raise AssertionError(f"{err}; plots on the page: {last}; console errors:\n{errors}") from None
    return last


def write_notebook(path: Path, cells: list[str]) -> Path:
    """A notebook of these code cells for the stock ``python3`` kernel, written to ``path`` (its folder is made)."""
    import nbformat

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)
    return path
