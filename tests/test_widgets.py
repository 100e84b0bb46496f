"""The experiment panel in-process: controls from the config, runs, one-line errors, cancel,
a figure that is plain plotly JSON (survives a reload), replace-not-stack, "press Run"."""

from __future__ import annotations

import pytest

pytest.importorskip("ipywidgets")

from hpclab.widgets import CONTROL_CLASS, panel  # noqa: E402
from hpclab.widgets.figure_view import PLOTLY_MIME  # noqa: E402


def _bars(p):
    return [tuple(t.y) for t in p.figure.data if t.type == "bar"]


def test_panel_builds_controls_and_runs():
    p = panel("hardware", fields=("cores", "probe_size"), fixed={}, live=True, run_now=False)
    assert set(p.controls) == {"cores", "probe_size"}
    assert CONTROL_CLASS in p.controls["cores"]._dom_classes
    cores = dict((v, k) for k, v in p.controls["cores"].options)
    assert cores[0].startswith("auto") and max(cores) == 256  # 0 is an explicit "auto" choice
    assert dict((v, k) for k, v in p.controls["probe_size"].options)[0] == "none"
    p.controls["probe_size"].value = 0
    p._thread.join(30)
    p.controls["cores"].value = 1
    p._thread.join(30)
    one = _bars(p)[0]
    p.controls["cores"].value = 4
    p._thread.join(30)
    four = _bars(p)[0]
    assert four == pytest.approx(tuple(4 * y for y in one))  # peak scales with cores
    assert "done" in p.status.value and not p.run_button.disabled


def test_the_figure_is_plotly_json_in_an_output_not_a_figurewidget():
    p = panel("hardware", fields=("cores",), fixed={"probe_size": 0}, run_now=False)
    (placeholder,) = p.view.widget.outputs
    assert "press Run" in placeholder["data"]["text/plain"]  # no empty axes before a run
    p.start(wait=True)
    (out,) = p.view.widget.outputs
    assert set(out["data"]) == {PLOTLY_MIME, "text/plain"}
    assert out["data"][PLOTLY_MIME]["data"][0]["type"] == "bar"
    assert type(p.figure).__name__ == "Figure"  # not a FigureWidget (anywidget)


def test_same_settings_replace_their_points_other_settings_add():
    p = panel("hardware", fields=("cores",), fixed={"probe_size": 0}, accumulate=True)
    p.start(wait=True)  # the same settings again
    assert len(p.results) == 1 and "1 run shown" in p.status.value
    p.controls["cores"].value = 1
    p.start(wait=True)
    assert len(p.results) == 2 and "2 runs shown" in p.status.value


def test_learning_rate_is_auto_or_a_log_slider():
    p = panel("hogwild", fields=("lr",), run_now=False)
    lr = p.controls["lr"]
    assert lr.value == 0.0 and lr.auto.value and lr.slider.disabled  # 0 = the model's default
    assert type(lr.slider).__name__ == "FloatLogSlider" and 10**lr.slider.max == 10.0
    lr.auto.value = False
    assert 0 < lr.value <= 10 and not lr.slider.disabled
    assert p.config().lr == lr.value


def test_tuple_text_accepts_auto():
    p = panel("gemm", fields=("threads",), run_now=False)
    assert p.controls["threads"].value == "auto"
    p.controls["threads"].value = "1, auto"
    assert p.config().threads == (1, 0)


def test_bad_input_is_one_line_in_the_status():
    p = panel("gemm", fields=("size",), run_now=False)
    p.controls["size"].value = "64,x"
    p.start(wait=True)
    assert "must be comma-separated int values" in p.status.value
    assert "Traceback" not in p.status.value


def test_a_failing_run_never_raises_from_the_callback(monkeypatch):
    p = panel("hardware", fields=("probe_size",), run_now=False)

    def broken(config, progress):
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setattr(
        p, "experiment", p.experiment.__class__(**{**p.experiment.__dict__, "run": broken})
    )
    p.start(wait=True)
    assert "RuntimeError: disk on fire" in p.status.value and "second line" not in p.status.value
    assert "Traceback" in p.last_error and not p.run_button.disabled


def test_a_disturbed_run_says_so_in_the_status_and_on_the_plot(monkeypatch):
    from hpclab.measure import cpu_share

    monkeypatch.setattr(cpu_share, "DISTURBED_CORES", -1.0)  # any run counts as disturbed
    monkeypatch.setattr(cpu_share, "WAITED_CORES", -1.0)
    monkeypatch.setattr(cpu_share, "MIN_WALL_S", 0.0)
    # A live probe: a run that only evaluates the model (probe_size 0) carries no load note.
    p = panel("hardware", fields=("cores",), fixed={"probe_size": 16})
    title = p.figure.layout.title.text
    assert title.startswith("Theoretical peak") and "these numbers are low" in title
    # the status warns and points at the plot's note instead of repeating it
    assert "see the note under the plot" in p.status.value
    assert "these numbers are low" not in p.status.value


def test_cancel_leaves_the_panel_usable(monkeypatch):
    import threading

    p = panel("hardware", fields=("probe_size",), run_now=False)
    started = threading.Event()

    def slow(config, progress):
        started.set()
        while True:
            progress.update(0, 1)

    monkeypatch.setattr(
        p, "experiment", p.experiment.__class__(**{**p.experiment.__dict__, "run": slow})
    )
    p.start()
    started.wait(5)
    p.cancel()
    p._thread.join(5)
    assert "cancelled" in p.status.value and not p.run_button.disabled


def test_no_topic_package_imports_the_widgets():
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1] / "hpclab"
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.parts[len(root.parts)] not in ("widgets", "cli.py")
        and re.search(r"^\s*(from|import) hpclab\.widgets", p.read_text(), re.M)
    ]
    assert offenders == []
