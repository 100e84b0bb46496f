"""The experiment panel in-process: controls from the config, runs, one-line errors, cancel."""

from __future__ import annotations

import pytest

pytest.importorskip("ipywidgets")

from hpclab.widgets import CONTROL_CLASS, panel  # noqa: E402


def _bars(p):
    return [tuple(t.y) for t in p.figure.data if t.type == "bar"]


def test_panel_builds_controls_and_runs():
    p = panel("hardware", fields=("cores", "probe_size"), fixed={}, live=True, run_now=False)
    assert set(p.controls) == {"cores", "probe_size"}
    assert CONTROL_CLASS in p.controls["cores"]._dom_classes
    assert p.controls["cores"].max == 256 and p.controls["probe_size"].max == 8192
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


def test_bad_input_is_one_line_in_the_status():
    p = panel("hardware", fields=("probe_size",), run_now=False)
    p.controls["probe_size"].value = 8
    p.start(wait=True)
    assert "probe_size=8 is too small" in p.status.value
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
