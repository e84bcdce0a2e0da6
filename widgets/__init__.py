"""Notebook dashboards and viewers (ipywidgets + plotly); installed as ``maze_lab.widgets``."""

# Imported here, in the thread that uses the widgets, before any plotly code runs: plotly looks pandas up in
# sys.modules without importing it, and a background run's statistics thread imports pandas (through pyarrow)
# while the kernel builds its widgets. A plain ``import`` waits for an import another thread has begun, so the
# widgets never see a half-initialised pandas ("partially initialized module 'pandas' has no attribute 'Series'").
import pandas  # noqa: F401


def _import_jsonschema_without_iri_grammar() -> None:
    """Import jsonschema (plotly's FigureWidget imports it through nbformat) without ``rfc3987_syntax``.

    jsonschema registers checkers for the ``iri`` formats when ``rfc3987_syntax`` is installed (Jupyter's
    ``jsonschema[format-nongpl]`` installs it), and that module builds its grammar on import: 1–6 s on a 2-core
    machine, paid by the first plot of every kernel. Widgets validate no IRIs; the module stays importable for
    anyone who does (only jsonschema's optional ``iri`` format checks are left out in this process).
    """
    import sys

    if "jsonschema" in sys.modules or "rfc3987_syntax" in sys.modules:
        return
    sys.modules["rfc3987_syntax"] = None  # an import of it now raises ImportError, which jsonschema expects
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        pass
    finally:
        if sys.modules.get("rfc3987_syntax", ...) is None:
            del sys.modules["rfc3987_syntax"]


_import_jsonschema_without_iri_grammar()


def _robust_figures() -> None:
    import warnings

    try:
        from maze_lab.widgets.plotly_widgets import make_plotly_widgets_robust

        make_plotly_widgets_robust()
    except Exception as err:  # noqa: BLE001 - a plotly version this was not made for: plain FigureWidgets
        warnings.warn(f"maze-lab could not prepare plotly's FigureWidget for reloads and voila ({err!r}); figures "
                      f"may come up empty after a browser reload", stacklevel=2)


_robust_figures()
