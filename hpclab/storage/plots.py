"""Plots for chapter 04's experiments (one function per experiment, plotly figures)."""

from __future__ import annotations

from hpclab.axes import tick_label
from hpclab.display import figure, plural, split_runs
from hpclab.results import Result


@figure
def plot_pack(result: Result):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = result.records
    fig = make_subplots(
        rows=1, cols=3, subplot_titles=("write samples/s", "MB on disk", "files (inodes)")
    )
    x = [r["format"] for r in rows]
    for col, key in enumerate(("samples_per_s", "mb_on_disk", "files"), start=1):
        fig.add_trace(go.Bar(x=x, y=[r[key] for r in rows], showlegend=False), row=1, col=col)
    fig.update_yaxes(type="log", row=1, col=3)
    fig.update_layout(title="Packing: speed, size and file count", height=360)
    return fig


@figure
def plot_read(result: Result):
    """Samples/s per format, one group per (cache, order), bars from zero on a linear axis
    (each bar says its value: a slow format stays readable beside a fast one)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    groups: dict[str, list[dict]] = {}
    for cache in ("warm", "cold"):
        for order in ("random", "sequential"):
            sel = [r for r in result.records if r["cache"] == cache and r["order"] == order]
            if sel:
                groups[f"{cache}, {order}"] = sel
    for name, sel in split_runs(groups, shown=("format", "cache", "order")).items():
        fig.add_bar(
            x=[r["format"] for r in sel],
            y=[r["samples_per_s"] for r in sel],
            name=name,
            text=[tick_label(float(f"{r['samples_per_s']:.3g}")) for r in sel],
            textposition="outside",
            hovertext=[
                f"{r['mb_per_s']:.0f} MB/s, cached before: {r['resident_before']:.0%}" for r in sel
            ],
        )
    fig.update_layout(
        title="Reading one sample at a time (live)",
        barmode="group",
        height=420,
        yaxis={"type": "linear", "rangemode": "tozero", "title": "samples/s"},
        xaxis={"title": "format"},
    )
    return fig


@figure
def plot_loader(result: Result, reference: Result | None = None):
    """Seconds per 100 batches vs batch size: live lines beside Fox et al. 2015's Caffe table."""
    import plotly.graph_objects as go

    from hpclab.results import load_reference

    reference = reference or load_reference("fox2015_caffe_loading")
    fig = go.Figure()
    live = [r for r in result.records if r.get("tier") == "live"]
    for key in sorted({(r["format"], r["workers"]) for r in live}):
        sel = sorted(
            (r for r in live if (r["format"], r["workers"]) == key), key=lambda r: r["batch_size"]
        )
        fig.add_scatter(
            x=[r["batch_size"] for r in sel],
            y=[r["seconds_per_100_batches"] for r in sel],
            mode="lines+markers",
            name=f"{key[0]}, {plural(key[1], 'worker')} (live)",
        )
    for fmt in sorted({r["format"] for r in reference.records}):
        sel = [r for r in reference.records if r["format"] == fmt]
        fig.add_scatter(
            x=[r["batch_size"] for r in sel],
            y=[r["seconds_per_100_batches"] for r in sel],
            mode="lines+markers",
            line={"dash": "dot"},
            name=f"{fmt} (reference: Fox et al. 2015, Caffe ImageNet)",
        )
    fig.update_layout(
        title="Time to load 100 batches",
        height=440,
        xaxis={"title": "batch size", "type": "log"},
        yaxis={"title": "seconds", "type": "log"},
    )
    return fig


@figure
def plot_wait(result: Result):
    """Per step: waiting for data (red) on top of computing (blue), one panel per format."""
    from plotly.subplots import make_subplots

    steps = [r for r in result.records if r.get("kind") == "step"]
    summary = {r["format"]: r for r in result.records if r.get("kind") == "summary"}
    formats = list(dict.fromkeys(r["format"] for r in steps))
    titles = [
        f"{f}: {summary[f]['wait_fraction']:.0%} waiting" if f in summary else f for f in formats
    ]
    fig = make_subplots(rows=1, cols=max(1, len(formats)), subplot_titles=titles, shared_yaxes=True)
    for col, fmt in enumerate(formats, start=1):
        sel = [r for r in steps if r["format"] == fmt]
        x = [r["step"] for r in sel]
        for field, name, color in (
            ("compute_s", "computing", "#1f77b4"),
            ("wait_s", "waiting for data", "#d62728"),
        ):
            fig.add_bar(
                x=x,
                y=[1e3 * r[field] for r in sel],
                name=name,
                marker_color=color,
                showlegend=col == 1,
                row=1,
                col=col,
            )
    fig.update_layout(barmode="stack", title="Where each training step's time goes", height=400)
    fig.update_yaxes(title_text="ms per step", row=1, col=1)
    return fig


@figure
def plot_staging(result: Result):
    """Left: staging time per method (live vs model). Right: Mao 2017's Lustre stripe table."""
    from plotly.subplots import make_subplots

    rows = result.records
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            "staging to local disk (simulated shared FS)",
            "reference: Mao 2017, Lustre rsync MB/s",
        ),
    )
    for tier in ("live", "model"):
        sel = [r for r in rows if r.get("tier") == tier and "method" in r]
        fig.add_bar(
            x=[r["method"] for r in sel], y=[r["seconds"] for r in sel], name=tier, row=1, col=1
        )
    ref = [r for r in rows if r.get("tier") == "reference"]
    labels = [f"{r['stripe_size_mb']}m-{r['stripe_count']}c" for r in ref]
    fig.add_scatter(
        x=labels,
        y=[r["mb_per_s"] for r in ref],
        mode="markers",
        name="Mao 2017 (reference)",
        row=1,
        col=2,
    )
    fig.update_yaxes(title_text="seconds", type="log", row=1, col=1)
    fig.update_yaxes(title_text="MB/s", row=1, col=2)
    fig.update_layout(barmode="group", height=400, title="Stage small files as a tar or a database")
    return fig
