"""maze-lab is imported into other people's kernels: importing the widgets and building every view that draws
figures changes nothing of plotly, anywidget or ipywidgets (no class attribute of theirs is replaced), blocks no
module (no ``sys.modules`` entry set to None, which took jsonschema's ``iri`` format checks away from the whole
process) and leaves plotly's own ``go.FigureWidget`` as plotly made it; maze-lab's figures are a subclass of its
own (``maze_lab.widgets.FigureWidget``). Each check runs in a fresh interpreter: what an import changes is seen
only where nothing was imported before."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from run_utils import train_tiny_run

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")


def _run(code: str, *args: str) -> dict:
    """``code`` in a fresh interpreter; what it printed last, as JSON."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A finished one-epoch CartPole run and a folder with one recorded Cutting-2D episode."""
    from maze_lab.core.rollout import SequentialRolloutRunner
    from maze_lab.examples.cutting2d import SIMPLE_PROBLEM, GreedyPolicy, make_masked_env

    run_dir = train_tiny_run(tmp_path_factory.mktemp("runs"))
    episodes = tmp_path_factory.mktemp("episodes")
    SequentialRolloutRunner(lambda: make_masked_env(**{**SIMPLE_PROBLEM, "max_steps": 4}), GreedyPolicy(),
                            n_episodes=1, trajectory_dir=episodes, seed=0, writers=[]).run()
    return run_dir, episodes


_EVERY_VIEW = """
    import importlib.util, json, sys
    from pathlib import Path

    import anywidget, ipywidgets, plotly, plotly.basedatatypes, plotly.basewidget, plotly.io as pio
    import plotly.graph_objects as go

    run_dir, episodes = Path(sys.argv[1]), Path(sys.argv[2])
    CLASSES = {"plotly.basewidget.BaseFigureWidget": plotly.basewidget.BaseFigureWidget,
               "plotly FigureWidget": go.FigureWidget,
               "plotly.basedatatypes.BaseFigure": plotly.basedatatypes.BaseFigure,
               "anywidget.AnyWidget": anywidget.AnyWidget, "ipywidgets.Widget": ipywidgets.Widget,
               "ipywidgets.DOMWidget": ipywidgets.DOMWidget}

    def snapshot():
        classes = {name: dict(vars(cls)) for name, cls in CLASSES.items()}
        # the attributes maze-lab replaced, by name (absent ones too: set on the class is a change)
        figure = {key: plotly.basewidget.BaseFigureWidget.__dict__.get(key, "<absent>")
                  for key in ("get_state", "_handle_custom_msg", "_esm")}
        return {"classes": classes, "figure": figure, "go.FigureWidget": go.FigureWidget,
                "blocked": {name for name, module in sys.modules.items() if module is None},
                "renderer": pio.renderers.default, "template": pio.templates.default}

    before = snapshot()

    import maze_lab.widgets
    from maze_lab.widgets.comparison import RunComparison
    from maze_lab.widgets.dashboard import TrainingDashboard
    from maze_lab.widgets.distributions import DistributionsView
    from maze_lab.widgets.event_logs import EventLogExplorer
    from maze_lab.widgets.lab_app import LabApp
    from maze_lab.widgets.model_graph import ModelGraphView
    from maze_lab.widgets.trajectory_viewer import TrajectoryViewer

    def figures_in(widget):
        if isinstance(widget, go.FigureWidget):
            yield widget
        for child in getattr(widget, "children", ()):
            yield from figures_in(child)

    views = [TrainingDashboard(run_dir), RunComparison([run_dir]), DistributionsView(run_dir),
             ModelGraphView(run_dir), EventLogExplorer(run_dir), LabApp(run_dir.parent.parent)]
    for view in views:
        view.tick()
    viewer = TrajectoryViewer(episodes)
    viewer.show_step(1)
    own = maze_lab.widgets.FigureWidget(layout={"title": "own"})
    own.add_scatter(x=[0, 1], y=[1, 0])
    figures = set()
    for fig in [own, *figures_in(viewer.widget), *[f for view in views for f in figures_in(view.widget)]]:
        fig.get_state()  # what a front-end that opens late asks for
        figures.add(id(fig))
    for view in views:
        view.close()

    after = snapshot()
    changed = []
    for name, attrs in before["classes"].items():
        now = after["classes"][name]
        changed += [f"{name}.{key}" for key in sorted(attrs.keys() | now.keys())
                    if attrs.get(key, "<absent>") is not now.get(key, "<absent>")]
    changed += [f"BaseFigureWidget.__dict__[{key!r}]" for key, value in before["figure"].items()
                if after["figure"][key] is not value]
    if after["go.FigureWidget"] is not before["go.FigureWidget"]:
        changed.append("plotly.graph_objects.FigureWidget")
    changed += [f"plotly.io {key}" for key in ("renderer", "template") if after[key] != before[key]]

    import jsonschema
    print(json.dumps({
        "changed": changed,
        "blocked": sorted(after["blocked"] - before["blocked"]),
        "figures": len(figures),
        "rfc3987_syntax installed": importlib.util.find_spec("rfc3987_syntax") is not None,
        "iri checked": "iri" in jsonschema.FormatChecker.checkers,
    }))
"""


def test_building_every_view_changes_nothing_of_plotly_ipywidgets_or_sys_modules(run_dirs: tuple[Path, Path]) -> None:
    run_dir, episodes = run_dirs
    found = _run(_EVERY_VIEW, str(run_dir), str(episodes))
    assert found["figures"] >= 8  # the cockpit's, the comparison's, 3 distributions, graph, events, strip, own
    assert found["changed"] == []
    assert found["blocked"] == []
    # jsonschema checks IRIs where rfc3987_syntax is installed, as in any process without maze-lab
    assert found["iri checked"] == found["rfc3987_syntax installed"]


_PLAIN_FIGURE = """
    import importlib.util, json, sys
    from pathlib import Path

    blocked = {name for name, module in sys.modules.items() if module is None}
    import maze_lab.widgets

    maze_lab.widgets.FigureWidget().get_state()  # maze-lab's figures in use in the same kernel
    import anywidget, ipywidgets, plotly
    import plotly.graph_objects as go

    fig = go.FigureWidget(layout={"title": "plain"})
    fig.add_scatter(x=[0, 1], y=[1, 0])
    cls = type(fig)

    def owner(name):
        # the class whose own attribute the figure's class uses, and that attribute's module where it has one
        holder = next(c for c in cls.__mro__ if name in vars(c))
        value = vars(holder)[name]
        return [holder.__module__, getattr(value, "__module__", None)]

    state = fig.get_state()
    bundle = (Path(plotly.__file__).parent / "package_data" / "widgetbundle.js").read_text()
    print(json.dumps({
        "mro": [c.__module__ for c in cls.__mro__],
        "get_state": owner("get_state"),
        "_handle_custom_msg": owner("_handle_custom_msg"),
        "get_state is ipywidgets'": cls.get_state is ipywidgets.Widget.get_state,
        "_handle_custom_msg is ipywidgets'": cls._handle_custom_msg is ipywidgets.Widget._handle_custom_msg,
        "esm is plotly's bundle": state["_esm"] == bundle,
        "state keys": sorted(k for k in state if k.startswith("_maze_lab")),
        "blocked": sorted({name for name, module in sys.modules.items() if module is None} - blocked),
        "rfc3987_syntax installed": importlib.util.find_spec("rfc3987_syntax") is not None,
        "rfc3987_syntax imported": "rfc3987_syntax" in sys.modules,
        "iri checked": "iri" in __import__("jsonschema").FormatChecker.checkers,
    }))
"""


@pytest.fixture(scope="module")
def plain_kernel() -> dict:
    """A fresh interpreter that imports the widgets first, uses maze-lab's figures and then plotly's own."""
    return _run(_PLAIN_FIGURE)


def test_importing_the_widgets_first_leaves_jsonschema_whole(plain_kernel: dict) -> None:
    """jsonschema, imported for plotly's figures (through nbformat), checks IRIs where ``rfc3987_syntax`` is
    installed, as in a process without maze-lab (the widgets hid that module while jsonschema was imported)."""
    found = plain_kernel
    assert found["blocked"] == []
    assert found["rfc3987_syntax imported"] == found["rfc3987_syntax installed"]
    assert found["iri checked"] == found["rfc3987_syntax installed"]


def test_a_plain_plotly_figure_widget_is_plotlys_after_importing_the_widgets(plain_kernel: dict) -> None:
    found = plain_kernel
    assert not [m for m in found["mro"] if m.startswith("maze_lab")], found["mro"]
    for name in ("get_state", "_handle_custom_msg"):
        assert not [m for m in found[name] if m and m.startswith("maze_lab")], (name, found[name])
    # plotly's own or, where plotly defines neither (plotly 6 and 7), ipywidgets'
    for name in ("get_state", "_handle_custom_msg"):
        assert found[name][0].split(".")[0] in ("plotly", "ipywidgets"), (name, found[name])
        assert found[name][0].split(".")[0] == "plotly" or found[f"{name} is ipywidgets'"], name
    assert found["esm is plotly's bundle"]
    assert found["state keys"] == []
