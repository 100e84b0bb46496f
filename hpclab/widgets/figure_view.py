"""A live figure that survives a browser reload and keeps saved notebooks small (chapter 00).

A plotly ``FigureWidget`` is an anywidget: its JavaScript (~5 MB) travels into the page and
into every notebook saved with widget state, and after a browser reload JupyterLab cannot
re-create it ("[anywidget] Failed to initialize model"): the figure stays blank. Here the figure
is plain data instead: an ipywidgets ``Output`` holding one ``application/vnd.plotly.v1+json``
display (the mime type JupyterLab renders with no extension build). Each redraw replaces the
output, from any thread. The widget's state is that JSON: after a reload JupyterLab asks the
kernel for it and draws the figure again; a saved notebook carries the figure's data only.
"""

from __future__ import annotations

from typing import Any

PLOTLY_MIME = "application/vnd.plotly.v1+json"
FIGURE_CLASS = "hpclab-figure"  # the browser test finds live figures by this class


def mime_bundle(fig: Any) -> dict[str, Any]:
    """The display data of a plotly figure: its JSON, and a one-line text fallback."""
    data = fig.to_plotly_json()
    title = fig.layout.title.text or "plotly figure"
    return {PLOTLY_MIME: {"data": data["data"], "layout": data["layout"]}, "text/plain": title}


class FigureView:
    """``view.show(fig)`` replaces what the view shows; ``view.say(text)`` shows a line instead
    (e.g. "press Run" before a panel's first run). ``view.figure`` is the last figure shown."""

    def __init__(self, placeholder: str = "") -> None:
        import ipywidgets as w

        self.widget = w.Output(layout={"width": "100%", "min_height": "40px"})
        self.widget.add_class(FIGURE_CLASS)
        self.figure: Any = None
        if placeholder:
            self.say(placeholder)

    def _set(self, data: dict[str, Any]) -> None:
        # Assigning ``outputs`` (not ``with output:``) works from a background thread.
        self.widget.outputs = ({"output_type": "display_data", "data": data, "metadata": {}},)

    def show(self, fig: Any) -> None:
        self.figure = fig
        self._set(mime_bundle(fig))

    def say(self, text: str) -> None:
        import html

        self._set(
            {
                "text/html": f'<p style="color:#666;font-style:italic">{html.escape(text)}</p>',
                "text/plain": text,
            }
        )
