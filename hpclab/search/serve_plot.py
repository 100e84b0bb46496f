"""The plot and table of experiment ``serve`` (chapter 08): latency and throughput vs batch."""

from __future__ import annotations

from typing import Any

from hpclab.display import REFERENCE_GREY, figure, number, plural, series_color
from hpclab.results import Result


@figure
def plot_serve(result: Result) -> Any:
    """Left: latency of one call vs requests per call (direct, Celery, the broker alone), and a
    request's latency with the wait for its batch to fill (a model, dash-dot). Right: requests
    per second for a burst of all requests vs requests per task."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    recs = result.records
    workers = next((r["workers"] for r in recs if r["mode"] == "celery"), 0)
    celery = f"Celery, {plural(workers, 'worker')}"
    fig = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.12,
        subplot_titles=("latency of one call (what each of its requests waits)",
                        f"throughput: {recs[0]['requests']} requests sent at once"),
    )  # fmt: skip
    lines = (
        ("direct", "direct call in this process", {"color": REFERENCE_GREY, "dash": "dash"}),
        ("celery", celery, {}),
    )
    for mode, name, line in lines:
        rs = sorted((r for r in recs if r["mode"] == mode), key=lambda r: r["batch"])
        if not rs:
            continue
        x = [r["batch"] for r in rs]
        fig.add_trace(go.Scatter(
            x=x, y=[r["latency_ms"] for r in rs], name=name, legendgroup=name,
            mode="lines+markers", line=line,
            error_y={"type": "data", "symmetric": False,
                     "array": [r["latency_ms_max"] - r["latency_ms"] for r in rs],
                     "arrayminus": [r["latency_ms"] - r["latency_ms_min"] for r in rs]},
            hovertemplate="%{x} requests per call: %{y:.3g} ms<extra>" + name + "</extra>",
        ), row=1, col=1)  # fmt: skip
        fig.add_trace(go.Scatter(
            x=x, y=[r["requests_per_s"] for r in rs], name=name, legendgroup=name,
            mode="lines+markers", line=line, showlegend=False,
            error_y={"type": "data", "symmetric": False,
                     "array": [r["requests_per_s_max"] - r["requests_per_s"] for r in rs],
                     "arrayminus": [r["requests_per_s"] - r["requests_per_s_min"] for r in rs]},
            hovertemplate="%{x} requests per task: %{y:.3g} requests/s<extra>" + name + "</extra>",
        ), row=1, col=2)  # fmt: skip
        if mode == "celery":
            arrivals = number(result.config.get("arrivals", 0))
            fig.add_trace(go.Scatter(
                x=x, y=[r["request_latency_ms"] for r in rs],
                name=f"{celery} + waiting for the batch to fill (model: {arrivals} requests/s arrive)",
                mode="lines", line={"dash": "dashdot", "color": series_color(celery)},
                hovertemplate="%{x} requests per call: %{y:.3g} ms<extra>with the fill</extra>",
            ), row=1, col=1)  # fmt: skip
            fig.add_trace(go.Scatter(
                x=x, y=[r["broker_ms"] for r in rs], name="broker alone (echo task)",
                mode="lines+markers", line={"dash": "dot"},
                hovertemplate="%{x} requests per call: %{y:.3g} ms<extra>broker</extra>",
            ), row=1, col=1)  # fmt: skip
    ticks = sorted({r["batch"] for r in recs})
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[str(t) for t in ticks])
    fig.update_xaxes(title_text="requests per call (batch)", row=1, col=1)
    fig.update_xaxes(title_text="requests per task (batch)", row=1, col=2)
    fig.update_yaxes(title_text="milliseconds (median, min-max bars)", type="log", row=1, col=1)
    fig.update_yaxes(title_text="requests per second", type="log", row=1, col=2)
    fig.update_layout(title=f"serving the {recs[0]['model']} model: latency vs throughput")
    return fig


def serve_table(result: Result) -> Any:
    """One row per (mode, batch): a call's latency, the broker's and the client's share,
    requests per second, and predictions that differ from the direct model's (0 expected)."""
    import pandas as pd

    from hpclab.display import readable

    cols = {
        "mode": "mode", "batch": "requests per task", "latency_ms": "one call (ms)",
        "broker_ms": "broker alone (ms)", "send_ms": "client send per task (ms)",
        "requests_per_s": "requests/s", "fill_ms": "batch fill wait (ms, model)",
        "mismatches": "predictions differing",
    }  # fmt: skip
    frame = pd.DataFrame(result.records)[list(cols)]
    # A direct call has no broker, no task to send and nothing to compare with: blank, not 0.
    direct = frame["mode"] == "direct"
    for key in ("broker_ms", "send_ms", "mismatches"):
        frame[key] = frame[key].astype(object).where(~direct, "")
    frame = frame.rename(columns=cols)
    return readable(frame.set_index(["mode", "requests per task"]))
