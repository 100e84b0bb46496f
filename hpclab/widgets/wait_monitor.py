"""A live "waiting for data" monitor: the bars grow while the model trains (chapter 04).

The same ``run_wait`` as the ``data-wait`` experiment, in a background thread with Run/Cancel
and a progress bar; every few steps the plotly ``FigureWidget`` is updated inside
``batch_update()``. Red is time spent waiting for the next batch, blue is computing.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from hpclab.storage.loading import WaitConfig, run_wait


class WaitMonitor:
    def __init__(self, **params: Any) -> None:
        import ipywidgets as w
        import plotly.graph_objects as go

        self.config = WaitConfig.create(**params)  # bad input raises here, in one line
        self.steps: list[dict] = []
        self.result = None
        self._last_draw = 0.0
        self._progress = None
        self.figure = go.FigureWidget(
            data=[
                go.Bar(name="computing", marker_color="#1f77b4"),
                go.Bar(name="waiting for data", marker_color="#d62728"),
            ],
            layout={
                "barmode": "stack",
                "height": 380,
                "title": "press Run",
                "xaxis": {"title": "training step (all formats, in order)"},
                "yaxis": {"title": "ms per step"},
            },
        )
        self.run_button = w.Button(description="Run", button_style="primary", icon="play")
        self.cancel_button = w.Button(description="Cancel", icon="stop", disabled=True)
        self.bar = w.FloatProgress(value=0.0, min=0.0, max=1.0, description="progress")
        self.status = w.HTML("")
        self.run_button.on_click(lambda _b: self.start())
        self.cancel_button.on_click(lambda _b: self._progress and self._progress.cancel())
        self.widget = w.VBox(
            [w.HBox([self.run_button, self.cancel_button, self.bar]), self.status, self.figure]
        )

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_draw < 0.25:  # at most 4 redraws per second
            return
        self._last_draw = now
        x = list(range(1, len(self.steps) + 1))
        with self.figure.batch_update():
            self.figure.data[0].x, self.figure.data[0].y = (
                x,
                [1e3 * s["compute_s"] for s in self.steps],
            )
            self.figure.data[1].x, self.figure.data[1].y = (
                x,
                [1e3 * s["wait_s"] for s in self.steps],
            )
            fmt = self.steps[-1]["format"] if self.steps else ""
            self.figure.layout.title = f"now reading: {fmt}" if not force else self._summary()

    def _summary(self) -> str:
        if self.result is None:
            return "stopped"
        rows = [r for r in self.result.records if r.get("kind") == "summary"]
        return "waiting: " + ", ".join(f"{r['format']} {r['wait_fraction']:.0%}" for r in rows)

    def _on_step(self, rec: dict) -> None:
        self.steps.append(rec)
        self._draw()

    def _work(self) -> None:
        from hpclab.progress import Cancelled

        try:
            self.result = run_wait(self.config, self._progress, on_step=self._on_step)
            self.status.value = "done"
        except Cancelled:
            self.status.value = "cancelled"
        except Exception as err:  # noqa: BLE001 - a widget thread must not spill a traceback
            self.status.value = (
                f"error: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            )
        finally:
            self._draw(force=True)
            self.run_button.disabled, self.cancel_button.disabled = False, True

    def start(self, wait: bool = False) -> None:
        from hpclab.progress import Progress

        self.steps, self.result = [], None
        self._progress = Progress(lambda d, t, note: setattr(self.bar, "value", d / t if t else 0))
        self.run_button.disabled, self.cancel_button.disabled = True, False
        self.status.value = "running ..."
        thread = threading.Thread(target=self._work, daemon=True)
        thread.start()
        if wait:
            thread.join()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def wait_monitor(**params: Any) -> WaitMonitor:
    """The live monitor for ``data-wait`` with these parameters (see :class:`WaitConfig`)."""
    return WaitMonitor(**params)
