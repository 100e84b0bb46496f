"""A widget panel for any registered experiment (chapter 00; every chapter uses it).

State and validation live in the experiment's config class; this module only lays out
controls built from the config's metadata and glues them to ``run``:

- a control per chosen config field (slider, dropdown, checkbox), ``continuous_update=False``;
- a Run button that starts the run in a background thread, a Cancel button, a progress bar;
- a one-line status: bad input and failures show as one line, never as a traceback
  (the last traceback is kept in ``panel.last_error`` for the curious);
- a plotly ``FigureWidget`` updated in place inside ``batch_update()``.

``live=True`` re-runs on every control change (for runs that take well under a second).
``accumulate=True`` keeps earlier results and plots all of them (points add up).
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Any

from hpclab.config import ConfigError
from hpclab.progress import Cancelled, Progress
from hpclab.results import Result

CONTROL_CLASS = "hpclab-control"  # the browser test finds controls by this class


def _control(field: dict[str, Any], value: Any) -> Any:
    import ipywidgets as w

    label = field["name"].replace("_", " ")
    common = {"description": label, "style": {"description_width": "initial"}}
    if field["choices"] is not None and not isinstance(value, tuple):
        ctl = w.Dropdown(options=list(field["choices"]), value=value, **common)
    elif isinstance(value, bool):
        ctl = w.Checkbox(value=value, indent=False, **common)
    elif isinstance(value, int) and field["min"] is not None and field["max"] is not None:
        ctl = w.IntSlider(
            value=value,
            min=int(field["min"]),
            max=int(field["max"]),
            continuous_update=False,
            **common,
        )
    elif isinstance(value, float) and field["min"] is not None and field["max"] is not None:
        ctl = w.FloatSlider(
            value=value,
            min=field["min"],
            max=field["max"],
            step=(field["max"] - field["min"]) / 100,
            continuous_update=False,
            **common,
        )
    elif isinstance(value, int):
        ctl = w.IntText(value=value, **common)
    elif isinstance(value, float):
        ctl = w.FloatText(value=value, **common)
    else:
        ctl = w.Text(value=",".join(map(str, value)) if isinstance(value, tuple) else str(value))
        ctl.description = label
    ctl.tooltip = field["help"]
    ctl.add_class(CONTROL_CLASS)
    return ctl


def _read(ctl: Any, default: Any) -> Any:
    value = ctl.value
    if isinstance(default, tuple) and isinstance(value, str):
        elem = type(default[0]) if default else str
        try:
            return tuple(elem(x) for x in value.split(",") if x.strip())
        except ValueError:
            raise ConfigError(
                f"{ctl.description}={value!r} must be comma-separated {elem.__name__} values"
            ) from None
    return value


def update_figure(fig: Any, new: Any) -> None:
    """Make FigureWidget ``fig`` show figure ``new``, updating traces in place where possible."""
    new_data = list(new.data)
    if len(fig.data) != len(new_data) or any(
        a.type != b.type for a, b in zip(fig.data, new_data, strict=False)
    ):
        fig.data = ()
        fig.add_traces(new_data)
        fig.layout = new.layout
        return
    with fig.batch_update():
        for old, trace in zip(fig.data, new_data, strict=True):
            old.update(trace.to_plotly_json(), overwrite=True)
        fig.layout.update(new.layout.to_plotly_json(), overwrite=True)


class ExperimentPanel:
    """Controls + Run/Cancel + progress + status + a live plotly figure for one experiment."""

    def __init__(
        self,
        experiment: str,
        fields: tuple[str, ...] | None = None,
        fixed: dict[str, Any] | None = None,
        plot: Callable[[Result], Any] | None = None,
        live: bool = False,
        accumulate: bool = False,
        run_now: bool = True,
    ) -> None:
        import ipywidgets as w
        import plotly.graph_objects as go

        from hpclab import experiments

        self.experiment = experiments.get(experiment)
        self.fixed = dict(fixed or {})
        self.plot = plot or self.experiment.plot
        self.live = live
        self.accumulate = accumulate
        self.results: list[Result] = []
        self.last_error: str = ""
        self._thread: threading.Thread | None = None
        self._progress: Progress | None = None
        self._lock = threading.Lock()

        base = self.experiment.config.create(**self.fixed)
        described = {f["name"]: f for f in self.experiment.config.describe()}
        names = fields if fields is not None else tuple(n for n in described if n not in self.fixed)
        unknown = [n for n in names if n not in described]
        if unknown:
            raise ConfigError(f"unknown field {unknown[0]!r}; known: {', '.join(described)}")
        self.controls = {n: _control(described[n], getattr(base, n)) for n in names}
        self._defaults = {n: described[n]["default"] for n in names}

        self.run_button = w.Button(description="Run", button_style="primary", icon="play")
        self.cancel_button = w.Button(description="Cancel", icon="stop", disabled=True)
        self.bar = w.FloatProgress(value=0.0, min=0.0, max=1.0, description="progress")
        self.status = w.HTML(value="")
        self.figure = go.FigureWidget()
        self.figure.add_class("hpclab-figure")  # the browser test finds the figure by it

        self.run_button.on_click(lambda _b: self.start())
        self.cancel_button.on_click(lambda _b: self.cancel())
        if live:
            for ctl in self.controls.values():
                ctl.observe(lambda _change: self.start(), names="value")
        buttons = w.HBox([self.run_button, self.cancel_button, self.bar])
        self.widget = w.VBox(
            [w.HBox(list(self.controls.values()), layout={"flex_flow": "row wrap"}), buttons]
            + [self.status, self.figure]
        )
        if run_now:
            self.start(wait=True)

    # --- state -----------------------------------------------------------------------------
    def config(self) -> Any:
        values = dict(self.fixed)
        for name, ctl in self.controls.items():
            values[name] = _read(ctl, self._defaults[name])
        return self.experiment.config.create(**values)

    def _say(self, text: str, kind: str = "info") -> None:
        import html

        color = {"info": "#444", "ok": "#1a7f37", "error": "#b42318"}[kind]
        self.status.value = f'<span style="color:{color}">{html.escape(text)}</span>'

    # --- glue ------------------------------------------------------------------------------
    def start(self, wait: bool = False) -> None:
        """Validate the controls and run in the background (``wait`` blocks, for notebooks)."""
        try:
            config = self.config()
        except ConfigError as err:
            self._say(f"error: {err}", "error")
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                self._progress.cancel()  # a newer request replaces the running one
                self._thread.join(timeout=30)
            self._progress = Progress(self._on_progress)
            self._thread = threading.Thread(
                target=self._work, args=(config, self._progress), daemon=True
            )
            self.run_button.disabled = True
            self.cancel_button.disabled = False
            self.bar.value = 0.0
            self._say("running ...")
            self._thread.start()
        if wait:
            self._thread.join()

    def cancel(self) -> None:
        if self._progress is not None:
            self._progress.cancel()

    def _on_progress(self, done: float, total: float, note: str) -> None:
        self.bar.value = 0.0 if total <= 0 else min(1.0, done / total)
        if note:
            self._say(note)

    def _work(self, config: Any, progress: Progress) -> None:
        try:
            result = self.experiment.run(config, progress)
            self.results = [*self.results, result] if self.accumulate else [result]
            combined = self.results[0]
            for extra in self.results[1:]:
                combined = combined + extra
            if self.plot is not None:
                update_figure(self.figure, self.plot(combined))
            self.bar.value = 1.0
            self._say(f"done: {len(result.records)} record(s)", "ok")
        except Cancelled:
            self._say("cancelled", "info")
        except ConfigError as err:
            self._say(f"error: {err}", "error")
        except Exception as err:  # noqa: BLE001 - a callback must never spill a traceback
            self.last_error = traceback.format_exc()
            first = str(err).splitlines()[0] if str(err) else ""
            self._say(f"error: {type(err).__name__}: {first} (details: panel.last_error)", "error")
        finally:
            self.run_button.disabled = False
            self.cancel_button.disabled = True

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def panel(experiment: str, **kwargs: Any) -> ExperimentPanel:
    """Build the panel for ``experiment`` (see :class:`ExperimentPanel`)."""
    return ExperimentPanel(experiment, **kwargs)
