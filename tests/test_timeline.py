"""The one timeline helper (hpclab/timeline.py) and the chapter 03 trace drawn with it."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from hpclab.timeline import add_spans


def test_spans_start_at_base_and_last_their_length():
    fig = go.Figure()
    add_spans(
        fig, ["a", "b"], [1.0, 3.0], [2.0, 0.5], name="work", color="#123456", text=["x", "y"]
    )
    (bar,) = fig.data
    assert (bar.orientation, bar.name) == ("h", "work")
    assert list(bar.y) == ["a", "b"] and list(bar.base) == [1.0, 3.0] and list(bar.x) == [2.0, 0.5]
    assert bar.marker.color == "#123456" and list(bar.text) == ["x", "y"]
    with pytest.raises(ValueError, match="differ in length: 2, 1, 2"):
        add_spans(fig, ["a", "b"], [1.0], [2.0, 0.5], name="bad")


def test_chrome_trace_events_become_lanes_in_ms_from_the_first_event():
    from hpclab.profiling.torch_tool import plot_timeline

    events = [  # Chrome trace "X" events: ts and dur in microseconds
        {"name": "step", "cat": "user_annotation", "ts": 1000.0, "dur": 5000.0, "tid": 1},
        {"name": "aten::mm", "cat": "cpu_op", "ts": 2000.0, "dur": 1500.0, "tid": 7},
        {"name": "aten::add", "cat": "cpu_op", "ts": 4000.0, "dur": 500.0, "tid": 7},
    ]
    fig = plot_timeline(events)
    lanes = {t.name: t for t in fig.data}
    assert set(lanes) == {"ranges", "CPU cpu_op (thread 7)"}
    ops = lanes["CPU cpu_op (thread 7)"]
    assert list(ops.base) == [1.0, 3.0] and list(ops.x) == [1.5, 0.5]
    assert list(ops.text) == ["aten::mm", "aten::add"]
