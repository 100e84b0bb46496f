"""A widget panel for any registered experiment (chapter 00; every chapter uses it).

State and validation live in the experiment's config class; the controls come from its
metadata (:mod:`hpclab.widgets.controls`); Run/Cancel/progress/status and the background thread
are the shared glue (:mod:`hpclab.widgets.runner`); the figure is a :class:`FigureView` that
survives a browser reload (:mod:`hpclab.widgets.figure_view`).

``live=True`` re-runs on every control change (for runs that take well under a second).
``accumulate=True`` keeps earlier results and plots all of them; running the same settings
again replaces that run's points instead of stacking a duplicate.
Before the first run the figure area says "press Run".
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hpclab.config import ConfigError
from hpclab.display import load_note, plural
from hpclab.progress import Progress
from hpclab.results import Result
from hpclab.widgets.controls import CONTROL_CLASS, link_compare, make_control, read_control
from hpclab.widgets.figure_view import FigureView
from hpclab.widgets.runner import Runner

__all__ = ["CONTROL_CLASS", "ExperimentPanel", "panel"]


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

        from hpclab import experiments

        self.experiment = experiments.get(experiment)
        self.fixed = dict(fixed or {})
        self.plot = plot or self.experiment.plot
        self.live = live
        self.accumulate = accumulate
        self._runs: dict[str, Result] = {}  # by config: the same settings replace, not stack

        base = self.experiment.config.create(**self.fixed)
        described = {f["name"]: f for f in self.experiment.config.describe()}
        names = fields if fields is not None else tuple(n for n in described if n not in self.fixed)
        unknown = [n for n in names if n not in described]
        if unknown:
            raise ConfigError(f"unknown field {unknown[0]!r}; known: {', '.join(described)}")
        self.controls = {n: make_control(described[n], getattr(base, n)) for n in names}
        for n, ctl in self.controls.items():
            if isinstance(getattr(ctl, "options", None), tuple):
                value = ctl.value  # new options would reset it to the first one
                ctl.options = [o for o in ctl.options if self._accepts(n, o)]
                ctl.value = value
        link_compare(self.controls)
        self._defaults = {n: described[n]["default"] for n in names}
        self._ranges = {n: (described[n]["min"], described[n]["max"]) for n in names}

        self.runner = Runner(self._work, before=self.config)
        self.view = FigureView(placeholder="press Run to measure")
        if live:
            for ctl in self.controls.values():
                ctl.observe(lambda _change: self.start(), names="value")
        boxes = [getattr(c, "widget", c) for c in self.controls.values()]
        self.widget = w.VBox(
            [w.HBox(boxes, layout={"flex_flow": "row wrap"}), self.runner.buttons]
            + [self.runner.status, self.view.widget]
        )
        if run_now:
            self.start(wait=True)

    # --- what the notebook and tests read ----------------------------------------------------
    @property
    def results(self) -> list[Result]:
        return list(self._runs.values())

    @property
    def figure(self) -> Any:
        """The plotly figure shown now (None before the first run)."""
        return self.view.figure

    @property
    def status(self) -> Any:
        return self.runner.status

    @property
    def run_button(self) -> Any:
        return self.runner.run_button

    @property
    def cancel_button(self) -> Any:
        return self.runner.cancel_button

    @property
    def bar(self) -> Any:
        return self.runner.bar

    @property
    def last_error(self) -> str:
        return self.runner.last_error

    @property
    def _thread(self) -> Any:
        return self.runner.thread

    def config(self) -> Any:
        values = dict(self.fixed)
        for name, ctl in self.controls.items():
            values[name] = read_control(ctl, self._defaults[name], *self._ranges[name])
        return self.experiment.config.create(**values)

    def _accepts(self, name: str, option: Any) -> bool:
        """Does the config take ``option`` for ``name`` (the other settings as the panel starts)?
        A dropdown offers no value its config refuses: hardware's probe sizes below 16, the
        what-if's ``custom`` workload beside its hidden ``scaling=preset``. A device is offered
        for when its "compare devices" checkbox is off (:func:`link_compare`)."""
        value = option[1] if isinstance(option, tuple) else option
        values = {**self.fixed, name: value}
        if name == "device" and "compare_devices" in self.controls:
            values["compare_devices"] = False
        try:
            self.experiment.config.create(**values)
        except ConfigError:
            return False
        return True

    # --- glue -------------------------------------------------------------------------------
    def start(self, wait: bool = False) -> None:
        """Validate the controls and run in the background (``wait`` blocks, for notebooks)."""
        self.runner.start(wait=wait)

    def cancel(self) -> None:
        self.runner.cancel()

    def _work(self, progress: Progress, config: Any) -> str:
        from hpclab.experiments import run_config

        result = run_config(self.experiment, config, progress)
        key = json.dumps(config.to_dict(), sort_keys=True, default=str)
        kept = dict(self._runs) if self.accumulate else {}
        kept.pop(key, None)
        kept[key] = result
        runs = list(kept.values())
        records = _marked(runs)
        combined = Result(result.experiment, result.config, result.env, records)
        fig = self.plot(combined) if self.plot is not None else None
        with self.runner.current(progress):  # a cancelled or replaced run shows nothing
            self._runs = kept
            if fig is not None:
                self.view.show(fig)
        line = f"done: {plural(len(result.records), 'record')}"
        if self.accumulate:
            line += f" ({plural(len(runs), 'run')} shown)"
        note = load_note(result)
        if note and fig is not None:  # the figure says it under its title: the status points there
            note = "other processes took cores meanwhile: see the note under the plot's title"
        return f"{line}\n{note}" if note else line

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def _marked(runs: list[Result]) -> list[dict[str, Any]]:
    """The records of accumulated ``runs``, each (a copy) carrying ``run``: the settings that
    differ between the runs, so a plot can give each run its own labelled series
    (:func:`hpclab.display.split_runs`)."""
    seen: dict[str, set[str]] = {}
    for run in runs:
        for k, v in run.config.items():
            seen.setdefault(k, set()).add(json.dumps(v, sort_keys=True, default=str))
    differ = [k for k, values in seen.items() if len(values) > 1]
    if not differ:
        return [r for run in runs for r in run.records]
    return [
        {**r, "run": {k: run.config.get(k) for k in differ}} for run in runs for r in run.records
    ]


def panel(experiment: str, **kwargs: Any) -> ExperimentPanel:
    """Build the panel for ``experiment`` (see :class:`ExperimentPanel`)."""
    return ExperimentPanel(experiment, **kwargs)
