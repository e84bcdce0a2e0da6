"""plotly FigureWidgets that come up with their current data every time: in voila, in a re-opened notebook, after
a browser reload, and when many figures open at once: :class:`FigureWidget`, a subclass of plotly's that every
figure of the widgets is made from (``maze_lab.widgets.FigureWidget`` for a notebook's own figures). plotly's
``go.FigureWidget`` itself is left as it is.
"""

from __future__ import annotations

import json
from copy import deepcopy
from typing import Any

import ipywidgets as w
import plotly
import plotly.graph_objects as go

_RESYNC = "maze_lab_figure_state"
"""The custom message a figure's front-end sends once it is ready, and the kernel's answer after the state."""


_BUNDLE_ATTRIBUTE = "_maze_lab_bundle"
"""The state key through which a figure names the widget that carries plotly's code."""


def _figure_esm(key: str) -> str:
    """The small anywidget module of every figure: plotly's widget code comes once per page from one widget
    (see :class:`FigureWidget`) and is evaluated once; a figure's start (what anywidget gives 2 s)
    does not wait for it, only its drawing does. Once a figure is set up it asks the kernel for the figure as it is
    now, and redraws the views that were drawn from an older state."""
    return f"""const KEY = {json.dumps(key)};
function plotlyWidget(model) {{
  if (!globalThis[KEY]) {{
    globalThis[KEY] = (async () => {{
      const id = model.get({json.dumps(_BUNDLE_ATTRIBUTE)});
      let holder = null;
      for (let i = 0; i < 300 && !holder; i++) {{
        try {{
          holder = await model.widget_manager.get_model(id);
        }} catch (err) {{
          await new Promise((resolve) => setTimeout(resolve, 100));  // not restored yet
        }}
      }}
      if (!holder) throw new Error("[maze-lab] plotly's widget code did not arrive (model " + id + ")");
      const url = URL.createObjectURL(new Blob([holder.get("source")], {{ type: "text/javascript" }}));
      return import(url);
    }})().catch((err) => {{
      delete globalThis[KEY];
      throw err;
    }});
  }}
  return globalThis[KEY];
}}
export default () => {{
  let setup = null;
  let fresh = false;
  const views = new Set();
  // plotly's views register model listeners that they never remove; a view that is redrawn (below) would go on
  // drawing every later change into the page next to its successor (each new trace twice). Listeners registered
  // while a drawing renders go quiet when that drawing is replaced; the figure model's own stay.
  let registering = null;
  const listening = (model) => new Proxy(model, {{
    get(target, prop) {{
      if (prop === "on") {{
        return (name, callback, context) => {{
          const owner = registering;
          return target.on(name, function (...args) {{
            if (owner && !owner.active) return undefined;
            return callback.apply(this, args);
          }}, context);
        }};
      }}
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    }},
  }});
  return {{
    initialize(ctx) {{
      // changes the kernel sent before this figure was set up were not applied: ask for the current figure and
      // redraw the views drawn before the answer came; asked again while unanswered (an ask sent while the model
      // is still being set up can get lost)
      ctx.model.on("msg:custom", (msg) => {{
        if (!msg || msg.type !== {json.dumps(_RESYNC)} || fresh) return;
        fresh = true;
        for (const view of views) view.redraw();
        views.clear();
      }});
      setup = plotlyWidget(ctx.model).then((shared) => {{
        const inner = shared.default();
        inner.initialize({{ ...ctx, model: listening(ctx.model) }});
        let asks = 0;
        const ask = () => {{
          if (fresh || asks++ >= 20) return;
          try {{
            ctx.model.send({{ type: {json.dumps(_RESYNC)} }});
          }} catch (err) {{
            console.debug("[maze-lab] asking for the figure's state:", err);
          }}
          setTimeout(ask, 1000);
        }};
        ask();
        return inner;
      }});
    }},
    async render(ctx) {{
      const inner = await setup;
      const draw = () => {{
        const owner = {{ active: true }};
        const el = document.createElement("div");
        ctx.el.replaceChildren(el);
        let cleanup;
        registering = owner;
        try {{
          cleanup = inner.render({{ ...ctx, el }});
        }} finally {{
          registering = null;
        }}
        return () => {{
          owner.active = false;
          if (typeof cleanup === "function") cleanup();
          el.remove();
        }};
      }};
      const view = {{
        cleanup: draw(),
        redraw() {{
          view.cleanup();
          view.cleanup = draw();
        }},
      }};
      if (!fresh) views.add(view);
      return () => {{
        views.delete(view);
        view.cleanup();
      }};
    }},
  }};
}};
"""


_BUNDLE_HOLDER: Any = None


def _bundle_holder(source: str) -> Any:
    """The one widget of this kernel that carries plotly's widget code to the front-end."""
    global _BUNDLE_HOLDER
    if _BUNDLE_HOLDER is None or getattr(_BUNDLE_HOLDER, "comm", None) is None:
        import traitlets

        class PlotlyCode(w.Widget):
            """plotly's widget code, sent once for all figures (no view)."""

            source = traitlets.Unicode().tag(sync=True)

        _BUNDLE_HOLDER = PlotlyCode(source=source)
    return _BUNDLE_HOLDER


def _plotly_bundle() -> str | None:
    """plotly's widget code (the module of its FigureWidget), where it is an anywidget module this was made for."""
    esm = getattr(go.FigureWidget, "_esm", None)
    bundle = str(esm) if esm is not None else None  # anywidget keeps a file module as FileContents: str reads it
    return bundle if bundle is not None and "export" in bundle else None


_PLOTLY_BUNDLE = _plotly_bundle()


class FigureWidget(go.FigureWidget):
    """plotly's FigureWidget that comes up with its current data in voila, in a re-opened notebook and after a
    browser reload, also when many figures open at once (use it as ``go.FigureWidget``).

    Three things made plotly's figures blank:

    - A FigureWidget sends later changes (new traces, new points) as transient messages and keeps its synced state
      (``_widget_data``, ``_widget_layout``) as it was when it was created. A front-end that connects later (voila,
      which renders after the notebook ran; JupyterLab after a reload) asks the kernel for the state and gets the
      figure as created: empty axes. Here the full state is brought up to date whenever it is asked for (nothing
      more is sent while the figure updates).
    - Each FigureWidget carries plotly's whole widget bundle (about 5 MB of JavaScript) as its anywidget module, and
      every figure's module is evaluated separately; anywidget gives a model 2 s to load its module. A page that
      opens several figures at once (a reload, voila, a cockpit) misses that deadline on a busy machine:
      "[anywidget] Failed to initialize model" and blank figures. Here one hidden widget carries the bundle once,
      the figures carry a small module that evaluates it once per page, and a figure's start does not wait for it
      (only its drawing does).
    - Changes sent while a figure's module was still loading (a figure made and filled in one go, as the cockpit
      does) reach the front-end before plotly's code listens for them and are lost: the figure stays as created
      ("4 of 5 figures came up as empty axes"). Here a figure's front-end asks for the current state once it is
      ready (the custom message ``maze_lab_figure_state``), and redraws a view that was drawn before the answer came;
      ``_maze_lab_resyncs`` counts the answers given.

    With a plotly whose widget code is not an anywidget module (a version this was not made for) the figure keeps
    plotly's module and is brought up to date when its state is asked for.
    """

    # anywidget sends a class's ``_esm`` as the model's module (AnyWidget.__init__ reads it from the instance's class)
    _esm = (_figure_esm(f"__maze_lab_plotly_widget_{plotly.__version__}") if _PLOTLY_BUNDLE is not None
            else go.FigureWidget._esm)

    def _current_state(self) -> bool:
        if "_layout_obj" not in self.__dict__ or "_data" not in self.__dict__:
            return False
        # written without notification: only the front-end that asks receives it
        self._trait_values["_widget_data"] = deepcopy(self._data)
        self._trait_values["_widget_layout"] = deepcopy(self._layout_obj._props)
        return True

    def get_state(self, key: Any = None, drop_defaults: bool = False) -> dict[str, Any]:
        if key is None:
            self._current_state()
        state = super().get_state(key=key, drop_defaults=drop_defaults)
        if key is None and _PLOTLY_BUNDLE is not None:
            state[_BUNDLE_ATTRIBUTE] = _bundle_holder(_PLOTLY_BUNDLE).model_id
        return state

    def _handle_custom_msg(self, content: Any, buffers: Any) -> None:
        if isinstance(content, dict) and content.get("type") == _RESYNC:
            if self._current_state():
                self.send_state(["_widget_data", "_widget_layout"])
            self.send({"type": _RESYNC})  # after the state: the front-end has it when this arrives
            self._maze_lab_resyncs = getattr(self, "_maze_lab_resyncs", 0) + 1  # answers given (tests wait on it)
            return
        super()._handle_custom_msg(content, buffers)


AXIS_STYLE = {"showgrid": True, "gridcolor": "#e6e9ef", "zeroline": False, "linecolor": "#9aa0a6", "showline": True,
              "ticks": "outside", "tickcolor": "#9aa0a6", "automargin": True}
"""The axes of every curve maze-lab draws (cockpit, comparison): light grid, a plain line, ticks outside."""


def chart_layout(title: str, height: int, x_title: str, y_title: str | None = None, **extra: object) -> dict:
    """The layout of a curve figure in maze-lab's one look: plotly's bare template (a named template is deep-copied
    into every figure, which made opening a run ten times slower) on white, a small title at the top left, axis
    titles, the toolbar down the side (not over the title)."""
    layout = {"template": "none", "title": {"text": title, "font": {"size": 13}, "x": 0.02, "y": 0.97},
              "height": height, "paper_bgcolor": "#fff", "plot_bgcolor": "#fff", "font": {"size": 11},
              "hovermode": "x unified", "modebar": {"orientation": "v"},
              "xaxis": {**AXIS_STYLE, "title": {"text": x_title, "standoff": 2}},
              "yaxis": {**AXIS_STYLE, **({"title": {"text": y_title, "standoff": 4}} if y_title else {})}}
    layout.update(extra)
    return layout
