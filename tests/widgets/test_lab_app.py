"""The Lab app (``maze-lab lab``): in a kernel, and in headless Chromium served by voila; plotly figures render with
their data in voila and in JupyterLab, also after a reload. Screenshots go to ``test-artifacts/`` (and one of the app
to ``docs/lab_app.png``)."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
import time
from pathlib import Path

import pytest
from browser_utils import (
    ARTIFACTS,
    REPO,
    browser_skip_reason,
    chromium_page,
    jupyter_env,
    kernel_known,
    kernel_processes,
    page_kernel_id,
    plots,
    screenshot,
    start_jupyterlab,
    start_maze_lab_lab,
    wait_for_plots,
    wait_until,
    write_notebook,
)
from run_utils import stop_if_live, train_tiny_run

# a CartPole run of many tiny epochs: it keeps going until the test stops it, a point per epoch
LIVE_OVERRIDES = ["algorithm.epoch_length=1", "algorithm.n_rollout_steps=16", "runner.concurrency=1",
                  "runner.eval_concurrency=1", "algorithm.eval_repeats=1", "algorithm.patience=0"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished one-epoch CartPole run under its own base directory."""
    return train_tiny_run(tmp_path_factory.mktemp("lab-app-runs"))


# ---- in a kernel -----------------------------------------------------------------------------------------------------
def test_form_is_built_from_the_config_groups(tmp_path: Path) -> None:
    from maze_lab.run.config import available_options
    from maze_lab.widgets.lab_app import LabApp

    app = LabApp(tmp_path)
    options = available_options()
    assert list(app.env.options) == options["env"] and list(app.algorithm.options) == options["algorithm"]
    assert list(app.model.options) == options["model"] and list(app.wrappers.options) == options["wrappers"]
    assert "no runs yet" in app.runs_note.value
    app.overrides.value = "algorithm.lr=0.001\n# a comment\nalgorithm=a2c\n\nrunner.concurrency=2"
    app.n_epochs.value = 3
    args = app.run_arguments()
    assert args["algorithm"] == "a2c" and args["env"] == "gym_env" and args["experiment"] is None
    seed = args["overrides"].pop("seed")
    assert args["overrides"] == {"env.name": "CartPole-v1", "n_epochs": 3, "algorithm.lr": 0.001,
                                 "runner.concurrency": 2, "log_base_dir": str(tmp_path.resolve())}
    # an empty seed field: a fresh seed for every run (recorded in its configuration); a number is used as given
    assert isinstance(seed, int) and app.seed.value == ""
    assert len({app.run_arguments()["overrides"]["seed"] for _ in range(5)}) > 1
    app.seed.value = " 42 "
    assert app.run_arguments()["overrides"]["seed"] == 42
    app.overrides.value += "\nseed=7"  # a seed line of the overrides wins
    assert app.run_arguments()["overrides"]["seed"] == 7
    # an env with a model and wrappers of its own picks them
    cutting = next(o for o in options["env"] if o.startswith("cutting2d"))
    app.env.value = cutting
    assert app.model.value == cutting and app.wrappers.value == "cutting2d"
    assert app.env_name.layout.display == "none"
    app.close()


def test_bad_input_is_shown_in_the_app_not_raised(tmp_path: Path) -> None:
    from maze_lab.widgets.lab_app import LabApp

    app = LabApp(tmp_path)
    app.overrides.value = "algorithm.lr=fast"
    app.start_button.click()
    assert "expected a value of type float" in app.form_message.value and "maze-lab-error" in app.form_message.value
    app.overrides.value = "no_equals_sign"
    app.start_button.click()
    assert "must look like key=value" in app.form_message.value
    app.overrides.value = ""
    app.n_epochs.value = -5  # refused as `maze-lab train n_epochs=-5` is, never turned into 1
    assert app.n_epochs.value == -5
    app.start_button.click()
    assert "n_epochs must be &gt;= 0" in app.form_message.value and "maze-lab-error" in app.form_message.value
    from maze_lab.widgets.lab_app import STATE_FILE

    # nothing was started, no run directory made (the page's state is kept beside the runs)
    assert app.handle is None and [p.name for p in tmp_path.iterdir()] == [STATE_FILE]
    app.compare_button.click()
    assert "select two or more runs" in app.runs_message.value
    app.n_epochs.value = 1
    app.seed.value = "lucky"
    app.start_button.click()
    assert "seed must be an integer (or empty for a fresh seed per run), got &#x27;lucky&#x27;" in \
        app.form_message.value and "traceback" not in app.form_message.value
    assert app.handle is None
    app.close()


def test_runs_appearing_failing_and_vanishing_keep_the_app_going(tmp_path: Path, finished_run: Path) -> None:
    from maze_lab.widgets.lab_app import LabApp

    base = tmp_path / "runs"
    base.mkdir()
    app = LabApp(base)
    assert len(app.runs_select.options) == 0
    first = base / "default" / "first"
    shutil.copytree(finished_run, first)
    broken = base / "default" / "broken"
    shutil.copytree(finished_run, broken)
    app.tick()
    assert [v for _, v in app.runs_select.options] and len(app.runs_select.options) == 2
    app.runs_select.value = (str(first), str(broken))
    (broken / "maze_lab_run.json").write_text("{ not json")  # a run whose summary is damaged
    app.tick()
    labels = dict((v, k) for k, v in app.runs_select.options)
    assert "damaged" in labels[str(broken)]
    app.open_button.click()  # two selected: refused with a message
    assert "select one run" in app.runs_message.value
    app.runs_select.value = (str(first),)
    app.open_button.click()
    assert app.cockpit is not None and "data-status='done'" in app.run_status.value
    shutil.rmtree(first)  # deleted while it is open
    app.tick()
    assert [v for _, v in app.runs_select.options] == [str(broken)]
    assert app.runs_select.value == ()
    assert "data-status='deleted'" in app.run_status.value
    shutil.rmtree(base)  # even the base directory
    app.tick()
    assert len(app.runs_select.options) == 0 and not app.errors
    app.close()


def test_runs_are_filtered_sorted_tagged_archived_and_deleted_from_the_app(tmp_path: Path,
                                                                          finished_run: Path) -> None:
    import json

    from maze_lab.run.run_dir import RunDirectory
    from maze_lab.run.runs import LABELS_FILE, list_runs
    from maze_lab.widgets.lab_app import LabApp

    base = tmp_path / "runs"
    runs = {}
    for name, reward, created in (("low", 10.0, "2026-01-01T10:00:00"), ("high", 90.0, "2026-01-02T10:00:00"),
                                  ("mid", 50.0, "2026-01-03T10:00:00")):
        runs[name] = base / "default" / name
        shutil.copytree(finished_run, runs[name])
        RunDirectory(runs[name]).write_summary(best_eval_reward=reward, created=created)
    app = LabApp(base)
    try:
        listed = lambda: [Path(v).name for _, v in app.runs_select.options]  # noqa: E731
        assert listed() == ["mid", "high", "low"]  # newest first
        app.runs_sort.value = "best"
        assert listed() == ["high", "mid", "low"]
        app.runs_sort.value = "oldest"
        assert listed() == ["low", "high", "mid"]
        # tags: set on the selected runs, shown in the list, found by the filter
        app.runs_select.value = (str(runs["high"]), str(runs["mid"]))
        app.tag_text.value = "baseline, good"
        app.tag_button.click()
        assert json.loads((runs["high"] / LABELS_FILE).read_text())["tags"] == ["baseline", "good"]
        assert "#baseline #good" in dict((v, k) for k, v in app.runs_select.options)[str(runs["mid"])]
        app.runs_filter.value = "GOOD baseline"
        assert listed() == ["high", "mid"]
        app.runs_filter.value = "done low"
        assert listed() == ["low"] and "2 not shown" in app.runs_note.value
        app.runs_filter.value = ""
        app.tag_text.value = "no spaces please!"
        app.runs_select.value = (str(runs["low"]),)
        app.tag_button.click()
        assert "refused" in app.runs_message.value and "please!" in app.runs_message.value
        # archive: hidden unless asked for; archiving a shown archived run brings it back
        app.archive_button.click()
        assert listed() == ["high", "mid"] and list_runs(base).set_index("run_dir").archived[str(runs["low"])]
        app.show_archived.value = True
        assert "low" in listed() and "[archived]" in dict((v, k) for k, v in app.runs_select.options)[str(runs["low"])]
        app.runs_select.value = (str(runs["low"]),)
        app.archive_button.click()
        app.show_archived.value = False
        assert "low" in listed()
        # delete: asked first; cancel keeps the run, yes deletes its directory
        app.runs_select.value = (str(runs["low"]),)
        app.delete_button.click()
        assert app.confirm_box.layout.display is None and "Delete 1 run(s) (low)" in app.confirm_html.value
        app.confirm_no.click()
        assert runs["low"].is_dir() and app.confirm_box.layout.display == "none"
        app.runs_select.value = (str(runs["low"]), str(runs["mid"]))
        app.delete_button.click()
        app.confirm_yes.click()
        assert not runs["low"].exists() and not runs["mid"].exists() and listed() == ["high"]
        assert "2 run(s) deleted" in app.runs_message.value
        assert len(app.errors) == 1 and "please!" in app.errors[0]  # the refused tag, nothing else
    finally:
        app.close()


def test_a_live_run_is_stopped_before_it_is_deleted(tmp_path: Path) -> None:
    from run_utils import TINY

    from maze_lab.run.run_context import RunContext
    from maze_lab.run.run_status import RunControlError
    from maze_lab.run.runs import delete_run
    from maze_lab.widgets.lab_app import LabApp

    base = tmp_path / "runs"
    handle = RunContext(overrides={**TINY, "n_epochs": 100000, "algorithm.patience": 0,
                                   "log_base_dir": str(base)}, silent=True).train_async(detach=True)
    run_dir = Path(handle.run_dir)
    app = LabApp(base)
    try:
        wait_until(lambda: handle.progress.get("epoch", 0) >= 1, timeout=180, what="the detached run's first epoch")
        with pytest.raises(RunControlError, match="is live .* stop it first"):
            delete_run(run_dir)
        app.tick()
        app.runs_select.value = (str(run_dir),)
        app.delete_button.click()
        assert "1 of them live: stopped first" in app.confirm_html.value
        app.confirm_yes.click()
        assert run_dir.exists() and "stopping, deleted once they have ended" in app.runs_message.value
        wait_until(lambda: (app.tick(), not run_dir.exists())[1], timeout=180, what="the run deleted after its stop")
        assert not app.errors, app.errors
    finally:
        app.close()
        if run_dir.exists():
            stop_if_live(run_dir)


def test_start_and_stop_a_run_from_the_form(tmp_path: Path) -> None:
    from maze_lab.run.run_dir import RunDirectory
    from maze_lab.widgets.lab_app import LabApp

    app = LabApp(tmp_path)
    app.overrides.value = "\n".join(LIVE_OVERRIDES)
    app.n_epochs.value = 1000
    app.start_button.click()
    handle = app.handle
    assert handle is not None, app.form_message.value
    assert handle.run_dir.parent.parent == tmp_path.resolve()
    assert not app.stop_button.disabled and app.cockpit is not None
    wait_until(lambda: handle.progress["epoch"] >= 1, timeout=120, what="the first epoch")
    app.start_button.click()  # one run at a time
    assert "stop it first" in app.form_message.value
    app.stop_button.click()
    assert handle.wait(120) == "stopped"
    app.tick()
    assert "data-status='stopped'" in app.run_status.value and app.stop_button.disabled
    assert "state_dict_last.pt" in app.run_status.value  # the checkpoints are named
    assert RunDirectory(handle.run_dir).last_checkpoint.exists()
    assert [v for _, v in app.runs_select.options] == [str(handle.run_dir)]
    app.close()


def test_a_new_page_shows_what_the_last_one_showed_and_stops_its_detached_run(tmp_path: Path,
                                                                             finished_run: Path) -> None:
    """The form starts a detached run; a new page (a reload, another browser: a new LabApp) comes up with the form's
    values, the run open in its cockpit, the comparison and the selection of the last page; the run is listed live
    and the new page's Stop stops it."""
    from maze_lab.run.attach import AttachedRun, attach
    from maze_lab.run.run_dir import RunDirectory
    from maze_lab.widgets.lab_app import STATE_FILE, LabApp

    base = tmp_path / "runs"
    first, second = base / "default" / "first", base / "default" / "second"
    shutil.copytree(finished_run, first)
    shutil.copytree(finished_run, second)
    app = LabApp(base)
    app.algorithm.value = "a2c"
    app.env_name.value = "CartPole-v1"
    app.overrides.value = "\n".join(LIVE_OVERRIDES)
    app.n_epochs.value = 1000
    app.start_button.click()
    run = app.handle
    try:
        assert isinstance(run, AttachedRun), app.form_message.value
        wait_until(lambda: run.progress["epoch"] >= 1, timeout=120, what="the first epoch of the detached run")
        app.tick()
        app.runs_select.value = (str(first), str(second))
        app.compare_button.click()
        assert app.detail_kind == "comparison"
        saved = json.loads((base / STATE_FILE).read_text())
        assert saved["current_run"] == saved["open_run"] == str(run.run_dir)
        app.close()  # the page goes: the run goes on
        assert run.running

        page = LabApp(base)
        assert (page.algorithm.value, page.env_name.value, page.n_epochs.value) == ("a2c", "CartPole-v1", 1000)
        assert page.overrides.value == "\n".join(LIVE_OVERRIDES)
        assert isinstance(page.handle, AttachedRun) and page.handle.run_dir == run.run_dir
        assert not page.stop_button.disabled
        assert page.cockpit is not None and page.cockpit.source.run_dir == run.run_dir
        assert page.cockpit.source.controllable and page.cockpit.controls.layout.display is None
        assert page.detail_kind == "comparison" and set(page.runs_select.value) == {str(first), str(second)}
        assert set(page.detail.table().run_dir) == {str(first), str(second)}
        labels = {v: k for k, v in page.runs_select.options}
        assert re.search(r"\srunning\s+live\s", labels[str(run.run_dir)]), labels[str(run.run_dir)]
        assert " live " not in labels[str(first)] and "done" in labels[str(first)]
        page.stop_button.click()
        assert "stopping" in page.form_message.value
        assert run.wait(120) == "stopped"
        page.tick()
        assert "data-status='stopped'" in page.run_status.value and page.stop_button.disabled
        assert RunDirectory(run.run_dir).last_checkpoint.exists()
        assert not page.errors, page.errors
        page.close()
    finally:
        if run is not None and attach(run.run_dir).running:
            attach(run.run_dir).stop(timeout=60)


def test_the_kept_state_is_checked_before_use(tmp_path: Path, finished_run: Path) -> None:
    """The state file holds plain values and run paths of an earlier page, and anyone who can write the base
    directory can write it: values that do not fit the form, and paths that are not run directories under the base
    directory (outside it, through a link, relative, the base itself), are left out; a broken file is ignored."""
    from maze_lab.widgets.lab_app import STATE_FILE, LabApp

    base = tmp_path / "runs"
    inside = base / "default" / "inside"
    shutil.copytree(finished_run, inside)
    outside = tmp_path / "elsewhere" / "run"
    shutil.copytree(finished_run, outside)
    link = base / "default" / "link"
    link.symlink_to(outside, target_is_directory=True)
    state = {"version": 1,
             "form": {"experiment": "no-such-experiment", "env": ["gym_env"], "env_name": "x" * 1000,
                      "algorithm": "no-such-algorithm", "model": None, "wrappers": 3, "n_epochs": "many",
                      "overrides": {"algorithm.lr": 1}},
             "current_run": str(outside), "open_run": str(link),
             "detail": {"kind": "comparison", "runs": [str(inside), "default/inside", str(base), str(link),
                                                       f"{inside}/../../../elsewhere/run", str(base / "nothing")]},
             "selected": [str(outside), str(base), 7]}
    (base / STATE_FILE).write_text(json.dumps(state))
    defaults = LabApp(tmp_path / "fresh")
    app = LabApp(base)
    for name in ("experiment", "env", "env_name", "algorithm", "model", "wrappers", "n_epochs", "overrides"):
        assert getattr(app, name).value == getattr(defaults, name).value, name
    assert app.handle is None and app.cockpit is None and app.detail is None  # one run alone is no comparison
    assert app.runs_select.value == () and not app.errors
    app.close()

    state["detail"]["runs"].append(str(inside.parent / ".." / "default" / "inside"))
    state["selected"] = [str(inside)]
    state["open_run"] = str(inside)
    (base / STATE_FILE).write_text(json.dumps(state))
    app = LabApp(base)
    assert app.cockpit is not None and app.cockpit.source.run_dir == inside
    assert app.detail_kind == "comparison" and app.runs_select.value == (str(inside),)
    app.close()

    for broken in (b"{ not json", b"[1, 2]", b"\xff\xfe", json.dumps({"version": 99, "open_run": str(inside)}).encode(),
                   b"{" + b" " * 200_000 + b"}"):
        (base / STATE_FILE).write_bytes(broken)
        app = LabApp(base)
        assert app.cockpit is None and not app.errors, broken[:20]
        app.close()
    defaults.close()


def test_the_lab_server_shuts_down_kernels_without_a_page() -> None:
    """``maze-lab lab`` serves with :class:`LabKernelManager` (the user's own voila options replace its defaults): a
    kernel is shut down once no page has been connected to it for its timeout, whatever it sends; one whose page
    is connected, or still loading within its grace, stays."""
    import asyncio

    from maze_lab.cli import lab_app_command
    from maze_lab.widgets.lab_server import LabKernelManager

    command = lab_app_command(Path("lab.ipynb"), 8866)
    assert "--VoilaConfiguration.multi_kernel_manager_class=maze_lab.widgets.lab_server.LabKernelManager" in command
    assert "--MappingKernelManager.cull_interval=60" in command
    command = lab_app_command(Path("lab.ipynb"), 8866, voila_args=["--MappingKernelManager.cull_interval=1"])
    assert [a for a in command if "cull_interval" in a] == ["--MappingKernelManager.cull_interval=1"]

    manager = LabKernelManager(cull_disconnected_timeout=5, cull_unconnected_timeout=60)
    stopped: list[str] = []

    async def shutdown_kernel(kernel_id: str, now: bool = False, restart: bool = False) -> None:
        stopped.append(kernel_id)
        manager._kernels.pop(kernel_id)

    manager.shutdown_kernel = shutdown_kernel
    now = time.monotonic()
    for kernel_id in ("left", "left-lately", "open", "loading", "never-came"):
        manager._kernels[kernel_id] = object()
        manager._kernel_connections[kernel_id] = 0
    for kernel_id in ("left", "left-lately", "open"):
        manager.notify_connect(kernel_id)
    manager.notify_disconnect("left")
    manager.notify_disconnect("left-lately")
    manager._alone_since.update({"left": now - 6, "left-lately": now - 2, "loading": now - 30,
                                 "never-came": now - 61})
    asyncio.run(manager.cull_pageless_kernels())
    assert sorted(stopped) == ["left", "never-came"]
    assert set(manager._kernels) == {"left-lately", "open", "loading"}


# ---- in the browser --------------------------------------------------------------------------------------------------
def _skip_without_browser() -> None:
    reason = browser_skip_reason()
    if reason is not None:
        pytest.skip(reason)


def _reward_points(page: object) -> int:
    """Points of the cockpit's reward curve (the longest trace of its reward figure), counted only where the figure
    drew its traces."""
    cockpit = page.query_selector(".maze-lab-cockpit")
    found = plots(page, cockpit) if cockpit is not None else []
    reward = [p for p in found if "reward" in str(p["title"]).lower() and p["drawn"] > 0]
    return max((p["maxPoints"] for p in reward), default=0)


def _wait_reward_points(page: object, what: str, timeout: float = 120, more_than: int = 0) -> int:
    """Wait until the cockpit's reward curve has more than ``more_than`` drawn points; a timeout names what the
    cockpit's plots held and the page's console errors."""
    try:
        return wait_until(lambda: _reward_points(page) > more_than and _reward_points(page), timeout=timeout,
                          interval=0.3, what=what)
    except AssertionError as err:
        cockpit = page.query_selector(".maze-lab-cockpit")
        found = plots(page, cockpit) if cockpit is not None else "no cockpit"
        errors = "\n".join(getattr(page, "console_errors", [])[-10:])
        raise AssertionError(f"{err}; the cockpit's plots: {found}; console errors:\n{errors}") from None


def _blank_plots(page: object, within: str) -> list[dict]:
    """Visible plots under ``within`` whose data never made it into the drawing."""
    root = page.query_selector(within)
    return [p for p in plots(page, root) if p["visible"] and p["traces"] > 0 and p["drawn"] == 0] if root else []


def _status(page: object) -> str | None:
    element = page.query_selector(".maze-lab-run-status .maze-lab-status")
    return element.get_attribute("data-status") if element is not None else None


@pytest.mark.browser
def test_lab_app_in_the_browser(tmp_path: Path, finished_run: Path) -> None:
    _skip_without_browser()
    from maze_lab.run.run_dir import RunDirectory

    base = tmp_path / "runs"
    shutil.copytree(finished_run, base / "default" / "earlier")
    server = start_maze_lab_lab(tmp_path, cwd=tmp_path, env=jupyter_env(tmp_path, MAZE_LAB_OUTPUTS=str(base)))
    try:
        server.wait_ready(timeout=90)
        assert "the Lab app at http://localhost:" in server.output()
        with chromium_page(width=1400, height=1000) as page:
            page.goto(server.url)
            page.wait_for_selector(".maze-lab-app .maze-lab-start", timeout=120_000)
            assert page.locator(".jp-InputArea, .jp-Cell-inputWrapper").count() == 0  # no code shown
            page.wait_for_selector(".maze-lab-runs option", timeout=30_000)

            # ---- start a run from the form and watch its reward curve grow
            page.fill(".maze-lab-overrides textarea", "\n".join(LIVE_OVERRIDES))
            page.fill(".maze-lab-n-epochs input", "1000")
            page.press(".maze-lab-n-epochs input", "Enter")
            page.click(".maze-lab-start")
            wait_until(lambda: _status(page) in ("running", "starting"), timeout=60, what="the run to start")
            first = _wait_reward_points(page, "the first points of the reward curve")
            grown = _wait_reward_points(page, f"the reward curve to grow past {first} points", more_than=first)
            assert grown > first
            wait_until(lambda: _status(page) == "running", timeout=30, what="the status 'running'")
            assert not _blank_plots(page, ".maze-lab-cockpit"), plots(page, page.query_selector(".maze-lab-cockpit"))
            # the README's picture: the top of the app with the run going
            page.evaluate("() => { window.scrollTo(0, 0); document.querySelectorAll('*').forEach((e) => { "
                          "if (e.scrollTop) e.scrollTop = 0; }); }")
            docs = REPO / "docs"
            docs.mkdir(exist_ok=True)
            page.screenshot(path=str(docs / "lab_app.png"), full_page=False)
            screenshot(page, "lab_app_live")
            screenshot(page, "lab_cockpit", locator=page.locator(".maze-lab-cockpit"))

            # ---- stop it: the status changes and a checkpoint is there
            page.click(".maze-lab-stop")
            wait_until(lambda: _status(page) == "stopped", timeout=120, what="the status 'stopped'")
            runs = sorted(p.parent for p in base.glob("*/*/maze_lab_run.json") if p.parent.name != "earlier")
            assert len(runs) == 1
            live_run = runs[0]
            assert RunDirectory(live_run).last_checkpoint.exists()
            assert json.loads((live_run / "maze_lab_run.json").read_text())["status"] == "stopped"

            # ---- compare the two runs
            wait_until(lambda: page.locator(".maze-lab-runs option").count() == 2, timeout=30,
                       what="both runs in the runs list")
            page.select_option(".maze-lab-runs select", index=[0, 1])
            page.click(".maze-lab-compare")
            message = page.locator(".maze-lab-runs-message")
            if "not available" in (message.inner_text() or ""):
                pytest.fail(f"comparison missing: {message.inner_text()}")
            page.wait_for_selector(".maze-lab-detail .js-plotly-plot", timeout=60_000)
            wait_until(lambda: any(p["points"] > 0 for p in plots(page, page.query_selector(".maze-lab-detail"))),
                       timeout=60, what="the comparison's curves")
            # what the click opened is scrolled into view (it opens below the runs list, off the visible page)
            wait_until(lambda: page.evaluate("() => { const box = document.querySelector('.maze-lab-detail')"
                                             ".getBoundingClientRect(); return box.top >= -2 && "
                                             "box.top < window.innerHeight / 2; }"),
                       timeout=30, what="the comparison scrolled into view")
            screenshot(page, "lab_comparison", locator=page.locator(".maze-lab-detail"))

            # ---- trajectories: record one with the rollout button, then move the viewer's slider
            page.select_option(".maze-lab-runs select", index=[0])
            page.click(".maze-lab-trajectories")
            page.wait_for_selector(".maze-lab-rollout", timeout=30_000)
            page.click(".maze-lab-rollout")
            slider = page.locator(".maze-lab-detail .widget-slider .noUi-handle").first
            slider.wait_for(timeout=120_000)
            readout = page.locator(".maze-lab-detail .widget-slider .widget-readout").first
            assert readout.inner_text().strip() == "0"
            slider.focus()
            for _ in range(3):
                page.keyboard.press("ArrowRight")
            wait_until(lambda: readout.inner_text().strip() == "3", timeout=30, what="the step slider to move")
            # the viewer shows the step the slider is on (its step table and the strip's marker follow the slider)
            detail = page.locator(".maze-lab-detail")
            wait_until(lambda: re.search(r"step\s+3\s*/\s*\d+", detail.inner_text()), timeout=60,
                       what="the viewer to show step 3")
            assert list((live_run / "trajectories").rglob("*")), "the rollout recorded nothing"
            screenshot(page, "lab_trajectories", locator=page.locator(".maze-lab-detail"))

            # ---- reload: a new kernel, the app and its plots come up again
            page.reload()
            page.wait_for_selector(".maze-lab-app .maze-lab-start", timeout=120_000)
            wait_until(lambda: page.locator(".maze-lab-runs option").count() == 2, timeout=30,
                       what="the runs list after the reload")
            page.select_option(".maze-lab-runs select", index=[0])
            page.click(".maze-lab-open")
            wait_until(lambda: _status(page) == "stopped", timeout=60, what="the reopened run's status")
            points = _wait_reward_points(page, "the reward curve after the reload")
            assert points >= grown
            assert not _blank_plots(page, ".maze-lab-cockpit"), plots(page, page.query_selector(".maze-lab-cockpit"))
            screenshot(page, "lab_app_after_reload")
            errors = [e for e in page.console_errors if "anywidget" in e.lower()]
            assert not errors, errors
    finally:
        server.stop()


CULL_S = 3
"""Seconds after its page left that the test's server shuts a kernel down (users get minutes)."""
DETACHED_OVERRIDES = [o.replace("epoch_length=1", "epoch_length=4") for o in LIVE_OVERRIDES]
"""A run of epochs of a few updates: it goes on until it is stopped, with a few hundred epochs to draw per page."""
DETACHED_EPOCHS = "1500"
"""Long enough for the test (a minute or two of training), short enough that a run a killed test left behind (no
``finally``) ends by itself within minutes."""
PAGES_AT_ONCE = 4
"""Pages opened side by side, twice, each closed without a word to the server (their kernels start together)."""
PAGES_TIMEOUT = 480.0
"""Seconds a batch of pages may take to show the app: each page's kernel imports the whole stack, and on a loaded
2-core machine five of them starting together (with other work beside) took more than the three minutes one page
was given before."""


@pytest.mark.browser
def test_runs_outlive_the_page_and_closed_pages_leave_no_kernels(tmp_path: Path) -> None:
    """A run started from the form trains in a process of its own: after a reload the page shows what it showed
    (form, open run), the run is listed live and the reloaded page's Stop stops it. Pages closed without a word to
    the server (a killed tab: no ``beforeunload``) leave no kernels once the cull interval has passed."""
    _skip_without_browser()
    from maze_lab.run.attach import attach
    from maze_lab.run.run_dir import RunDirectory

    base = tmp_path / "runs"
    server = start_maze_lab_lab(tmp_path, cwd=tmp_path, env=jupyter_env(tmp_path, MAZE_LAB_OUTPUTS=str(base)),
                                voila_args=[f"--LabKernelManager.cull_disconnected_timeout={CULL_S}",
                                            "--MappingKernelManager.cull_interval=1"])
    run_dir: Path | None = None
    try:
        server.wait_ready(timeout=90)
        with chromium_page(width=1400, height=1000) as page:
            page.goto(server.url)
            page.wait_for_selector(".maze-lab-app .maze-lab-start", timeout=120_000)
            started = time.monotonic()
            overrides = "\n".join(DETACHED_OVERRIDES)
            page.fill(".maze-lab-overrides textarea", overrides)
            page.fill(".maze-lab-n-epochs input", DETACHED_EPOCHS)
            page.press(".maze-lab-n-epochs input", "Enter")
            page.click(".maze-lab-start")
            wait_until(lambda: _status(page) in ("running", "starting"), timeout=60, what="the run to start")
            _wait_reward_points(page, "the first reward points")
            run_dir = next(p.parent for p in base.glob("*/*/maze_lab_run.json"))
            first_kernel = page_kernel_id(page)

            # ---- reload: a new kernel shows what the page showed, and the run goes on, live
            phases = {"start": time.monotonic() - started}
            page.reload()
            page.wait_for_selector(".maze-lab-app .maze-lab-start", timeout=120_000)
            assert page.input_value(".maze-lab-overrides textarea") == overrides
            assert page.input_value(".maze-lab-n-epochs input") == DETACHED_EPOCHS
            option = page.locator(".maze-lab-runs option").first
            wait_until(lambda: re.search(rf"{run_dir.name}\s+running\s+live", option.inner_text()), timeout=30,
                       what=f"the run listed as running and live (listed: {option.inner_text()!r})")
            wait_until(lambda: _status(page) == "running", timeout=60, what="the reopened run in the cockpit")
            shown = _wait_reward_points(page, "the reward curve after the reload")
            _wait_reward_points(page, "the reward curve to grow after the reload", more_than=shown)
            assert page.locator(".maze-lab-stop").is_enabled()
            cockpit = page.locator(".maze-lab-cockpit")
            assert cockpit.locator(".maze-lab-cockpit-stop button, button.maze-lab-cockpit-stop").count() == 1
            assert not _blank_plots(page, ".maze-lab-cockpit")
            page.evaluate("() => window.scrollTo(0, 0)")
            screenshot(page, "lab_app_reloaded", full_page=False)
            screenshot(page, "lab_cockpit_detached_run", locator=cockpit)
            screenshot(page, "lab_runs_reloaded", locator=page.locator(".maze-lab-runs").locator("xpath=.."))
            reloaded_kernel = page_kernel_id(page)
            phases["reload"] = time.monotonic() - started - sum(phases.values())

            # ---- the kernel that started the run is gone (culled after the reload): the run trains on
            wait_until(lambda: not kernel_known(server, first_kernel), timeout=CULL_S + 60,
                       what="the first page's kernel to be shut down")
            assert attach(run_dir).running

            # ---- stop it from the reloaded page
            page.click(".maze-lab-stop")
            wait_until(lambda: _status(page) == "stopped", timeout=120, what="the status 'stopped'")
            assert json.loads((run_dir / "maze_lab_run.json").read_text())["status"] == "stopped"
            assert RunDirectory(run_dir).last_checkpoint.exists()
            wait_until(lambda: not page.locator(".maze-lab-stop").is_enabled(), timeout=30,
                       what="the form's Stop disabled")
            reason = page.locator(".maze-lab-cockpit .maze-lab-cockpit-reason")
            wait_until(lambda: "stopped on request" in reason.inner_text(), timeout=30, what="the ending's reason")
            screenshot(page, "lab_cockpit_stopped", locator=page.locator(".maze-lab-cockpit .maze-lab-cockpit-header"))

            phases["stop"] = time.monotonic() - started - sum(phases.values())
            # ---- more pages (two batches opened at once: the server starts their kernels side by side), each closed
            # once it showed the app, without telling the server
            closed = [first_kernel]
            most = 0
            for _ in range(2):
                others = [page.context.browser.new_page() for _ in range(PAGES_AT_ONCE)]
                for other in others:
                    other.goto(server.url, wait_until="commit")
                deadline = time.monotonic() + PAGES_TIMEOUT  # for the batch: their kernels share the machine
                for other in others:
                    left_ms = max(1_000.0, (deadline - time.monotonic()) * 1000)
                    other.wait_for_selector(".maze-lab-app .maze-lab-start", timeout=left_ms)
                    closed.append(page_kernel_id(other))
                most = max(most, len(kernel_processes(server)))
                for other in others:
                    other.close()  # run_before_unload=False: voila's shutdown beacon is not sent
            after_closes = len(kernel_processes(server))
            phases["more pages"] = time.monotonic() - started - sum(phases.values())

            # ---- once the cull interval has passed, the kernels of closed pages are gone
            remaining = wait_until(lambda: (n := len(kernel_processes(server))) <= 2 and str(n),
                                   timeout=CULL_S + 60, what="at most two kernels")
            wait_until(lambda: not any(kernel_known(server, k) for k in closed), timeout=30,
                       what="the server to forget the closed pages' kernels")
            assert kernel_known(server, reloaded_kernel)  # the open page keeps its kernel
            phases["culled"] = time.monotonic() - started - sum(phases.values())
            print(f"kernels: {most} at most while pages opened, {after_closes} after {2 * PAGES_AT_ONCE} closes, "
                  f"{remaining} once "
                  f"the cull interval ({CULL_S} s) had passed; seconds: "
                  + ", ".join(f"{k} {v:.0f}" for k, v in phases.items()))
            errors = [e for e in page.console_errors if "anywidget" in e.lower()]
            assert not errors, errors
    finally:
        server.stop()
        stop_if_live(run_dir)


_JUPYTER_NOTEBOOK_CELLS = [
    """
    from maze_lab.widgets.dashboard import TrainingDashboard
    import plotly.graph_objects as go
    import ipywidgets as w

    cockpit = TrainingDashboard(RUN_DIR)
    # figures made empty and filled afterwards, as every live plot is
    figures = [maze_lab.widgets.FigureWidget(layout={"title": f"later {i}", "height": 220}) for i in range(3)]
    for i, fig in enumerate(figures):
        fig.add_scatter(x=list(range(10 + i)), y=[v * v for v in range(10 + i)])
    w.VBox([cockpit.widget, *figures])
    """,
    """
    for fig in figures:
        fig.data[0].x = list(range(25))
        fig.data[0].y = list(range(25))
    """,
]


@pytest.mark.browser
def test_figures_render_in_jupyterlab_and_after_a_reload(tmp_path: Path, finished_run: Path) -> None:
    """Figures filled after they were made show their current data in JupyterLab, after a reload and in a re-opened
    notebook: importing ``maze_lab.widgets`` (as any notebook using a widget does) makes plotly's figures robust."""
    _skip_without_browser()

    cells = [f"import maze_lab.widgets\nRUN_DIR = {str(finished_run)!r}"]
    cells += [textwrap.dedent(c).strip() for c in _JUPYTER_NOTEBOOK_CELLS]
    root = write_notebook(tmp_path / "lab" / "figures.ipynb", cells).parent
    server = start_jupyterlab(root, tmp_path)
    try:
        server.wait_ready(timeout=120)
        url = server.url.replace("/lab?", "/lab/tree/figures.ipynb?")
        with chromium_page(width=1300, height=1400) as page:
            page.goto(url)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
            page.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')", timeout=120_000)
            page.click(".jp-Notebook .jp-Cell .jp-InputArea-editor")
            for _ in cells:
                page.keyboard.press("Shift+Enter")

            def drawn() -> list[dict]:
                found = plots(page)
                later = [p for p in found if str(p["title"]).startswith("later")]
                ready = len(later) == 3 and all(p["points"] == 25 for p in later)
                cockpit = [p for p in found if not str(p["title"]).startswith("later")]
                return found if ready and cockpit and all(p["traces"] > 0 for p in cockpit) else []

            def check(when: str) -> list[dict]:
                try:
                    return wait_until(drawn, timeout=90, interval=0.3, what=f"every figure with its data {when}")
                except AssertionError as err:
                    raise AssertionError(f"{err}; plots: {plots(page)}; console: {page.console_errors[-5:]}") \
                        from None

            before = check("after running the cells")
            screenshot(page, "jupyterlab_figures")
            page.keyboard.press("Control+s")
            # the reload shows what was saved: wait until the save holds the figures (a reload right after the key
            # press could load the notebook without them on a busy machine: no figures at all after the reload)
            saved = root / "figures.ipynb"
            wait_until(lambda: "application/vnd.jupyter.widget-view+json" in saved.read_text(), timeout=60,
                       interval=0.2, what="the notebook to be saved with its figures")
            page.reload()
            page.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')", timeout=120_000)
            after = check("after a browser reload")
            assert [p["points"] for p in after] == [p["points"] for p in before]
            screenshot(page, "jupyterlab_figures_after_reload")
            # closed and opened again from the file browser
            page.goto(url.replace("/lab/tree/figures.ipynb?", "/lab?reset&"))
            page.goto(url)
            page.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')", timeout=120_000)
            check("after re-opening the notebook")
            assert not [e for e in page.console_errors if "anywidget" in e.lower()], page.console_errors
    finally:
        server.stop()
    assert (ARTIFACTS / "jupyterlab_figures_after_reload.png").is_file()


@pytest.mark.browser
def test_traces_added_after_a_figure_was_redrawn_show_once(tmp_path: Path) -> None:
    """A figure whose front-end redrew it once its code was ready (the state it asks for) shows traces added later
    once: the replaced drawing's listeners go quiet. (They did not: notebook 06's cockpit showed 'train mean' and
    'train min–max' twice, because its first training statistics came after the figure was drawn.)"""
    _skip_without_browser()

    cells = ["import asyncio\nimport maze_lab.widgets\nimport plotly.graph_objects as go\n"
             "fig = maze_lab.widgets.FigureWidget(layout={'title': 'added later'})\n"
             "fig.add_scatter(x=[0, 1], y=[1, 2], name='first')\nfig",
             # the front-end has asked for the figure's state and got the answer: its drawing was redrawn
             "while not getattr(fig, '_maze_lab_resyncs', 0):\n    await asyncio.sleep(0.05)\n"
             "fig.add_scatter(x=[0, 1], y=[2, 1], name='second')\n"
             "fig.add_scatter(x=[0, 1], y=[0, 3], name='third')\nNone"]
    root = write_notebook(tmp_path / "lab" / "later.ipynb", cells).parent
    server = start_jupyterlab(root, tmp_path)
    try:
        server.wait_ready(timeout=120)
        with chromium_page(width=1300, height=1000) as page:
            page.goto(server.url.replace("/lab?", "/lab/tree/later.ipynb?reset&"))
            page.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')", timeout=120_000)
            page.click(".jp-Notebook .jp-Cell .jp-InputArea-editor")
            page.keyboard.press("Shift+Enter")
            wait_for_plots(page, min_plots=1, min_points=2, timeout=90)
            page.keyboard.press("Shift+Enter")

            def three_traces() -> list[dict]:
                found = plots(page)
                return found if found and found[0]["traces"] >= 3 else []

            # a duplicate comes in the same dispatch as the trace itself: it is there when the third trace is
            found = wait_until(three_traces, timeout=90, interval=0.3, what="the traces added later")
            screenshot(page, "jupyterlab_traces_added_later")
            assert [p["names"] for p in found] == [["first", "second", "third"]], found
            assert found[0]["drawn"] == 3
    finally:
        server.stop()
