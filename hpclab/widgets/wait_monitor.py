"""A live "waiting for data" monitor: the bars grow while the model trains (chapter 04).

The same ``run_wait`` as the ``data-wait`` experiment, on the shared glue of every panel
(:class:`~hpclab.widgets.runner.Runner`: Run/Cancel, progress, one-line status, background
thread) and the shared :class:`~hpclab.widgets.figure_view.FigureView` (survives a reload);
every few steps the figure is redrawn. Red is time spent waiting for the next batch, blue is
computing.
"""

from __future__ import annotations

import time
from typing import Any

from hpclab.display import apply_series_colors, plural
from hpclab.progress import Progress
from hpclab.storage.loading import WaitConfig, run_wait
from hpclab.widgets.figure_view import FigureView
from hpclab.widgets.runner import Runner


class WaitMonitor:
    def __init__(self, **params: Any) -> None:
        import ipywidgets as w

        self.config = WaitConfig.create(**params)  # bad input raises here, in one line
        self.steps: list[dict] = []
        self.result = None
        self._last_draw = 0.0
        self.runner = Runner(self._work)
        self.view = FigureView(placeholder="press Run: the bars grow while the model trains")
        self.widget = w.VBox([self.runner.buttons, self.runner.status, self.view.widget])

    @property
    def status(self) -> Any:
        return self.runner.status

    @property
    def figure(self) -> Any:
        """The plotly figure shown now (None before the first run)."""
        return self.view.figure

    def _figure(self, title: str) -> Any:
        import plotly.graph_objects as go

        x = list(range(1, len(self.steps) + 1))
        fig = go.Figure(
            [
                go.Bar(name="computing", x=x, y=[1e3 * s["compute_s"] for s in self.steps]),
                go.Bar(name="waiting for data", x=x, y=[1e3 * s["wait_s"] for s in self.steps]),
            ],
            layout={
                "barmode": "stack",
                "height": 380,
                "title": title,
                "xaxis": {"title": "training step (all formats, in order)"},
                "yaxis": {"title": "ms per step"},
            },
        )
        return apply_series_colors(fig)

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_draw < 0.25:  # at most 4 redraws per second
            return
        self._last_draw = now
        fmt = self.steps[-1]["format"] if self.steps else ""
        self.view.show(self._figure(self._summary() if force else f"now reading: {fmt}"))

    def _summary(self) -> str:
        if self.result is None:
            return "stopped"
        rows = [r for r in self.result.records if r.get("kind") == "summary"]
        return "waiting: " + ", ".join(f"{r['format']} {r['wait_fraction']:.0%}" for r in rows)

    def _on_step(self, rec: dict) -> None:
        self.steps.append(rec)
        self._draw()

    def _work(self, progress: Progress, _arg: Any) -> str:
        self.steps, self.result = [], None
        try:
            self.result = run_wait(self.config, progress, on_step=self._on_step)
        finally:
            self._draw(force=True)
        return f"done: {plural(len(self.steps), 'step')}"

    def start(self, wait: bool = False) -> None:
        self.runner.start(wait=wait)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def wait_monitor(**params: Any) -> WaitMonitor:
    """The live monitor for ``data-wait`` with these parameters (see :class:`WaitConfig`)."""
    return WaitMonitor(**params)
