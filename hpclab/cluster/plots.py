"""Figures of chapter 07's runs (one function per experiment, each ``plot(result) -> Figure``)."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from hpclab.display import figure
from hpclab.results import Result


@figure
def plot_hello(result: Result) -> go.Figure:
    tasks = [r for r in result.records if r.get("kind") == "task"]
    fig = go.Figure()
    names = [r["node"] for r in tasks]
    fig.add_bar(x=names, y=[r["node_cores"] for r in tasks], name="cores on the node")
    fig.add_bar(x=names, y=[r["nproc"] for r in tasks], name="cores the job may use (nproc)")
    fig.update_layout(title="What the job sees: the cores it asked for", barmode="group")
    fig.update_yaxes(title="cores")
    return fig


@figure
def plot_multinode(result: Result) -> go.Figure:
    recs = result.records
    fig = make_subplots(rows=1, cols=2, subplot_titles=("samples/s", "max |w - one process|"))
    for col, key in enumerate(("samples_per_s", "params_max_diff"), start=1):
        fig.add_bar(
            x=[r["layout"] for r in recs],
            y=[r[key] for r in recs],
            row=1,
            col=col,
            showlegend=False,
        )
    fig.update_yaxes(exponentformat="e", row=1, col=2)  # 1.5e-8, not plotly's "15n"
    fig.update_layout(title="The same DDP training: nodes x ranks per node")
    return fig


@figure
def plot_requeue(result: Result) -> go.Figure:
    losses = [r for r in result.records if r.get("kind") == "loss"]
    fig = go.Figure()
    for attempt in sorted({r["attempt"] for r in losses}):
        pts = [r for r in losses if r["attempt"] == attempt]
        label = "first run" if attempt == 0 else f"after requeue {attempt}"
        fig.add_scatter(
            x=[r["step"] for r in pts], y=[r["loss"] for r in pts], mode="lines+markers", name=label
        )
    fig.update_layout(title="Training loss across a checkpoint and requeue")
    fig.update_xaxes(title="step")
    fig.update_yaxes(title="loss", type="log")
    return fig


@figure
def plot_array(result: Result) -> go.Figure:
    trials = [r for r in result.records if r.get("kind") == "trial"]
    summary = next(r for r in result.records if r.get("kind") == "summary")
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("validation accuracy per trial", "wall time (s)")
    )
    for b in sorted({r["params"]["batch_size"] for r in trials}):
        pts = [r for r in trials if r["params"]["batch_size"] == b]
        fig.add_scatter(
            x=[r["params"]["lr"] for r in pts],
            y=[r["val_acc"] for r in pts],
            mode="lines+markers",
            name=f"batch {b}",
            row=1,
            col=1,
        )
    walls = {"array": summary["array_wall_s"]}
    if "serial_wall_s" in summary:
        walls["one after another"] = summary["serial_wall_s"]
    fig.add_bar(x=list(walls), y=list(walls.values()), showlegend=False, row=1, col=2)
    fig.update_xaxes(type="log", title="learning rate", row=1, col=1)
    fig.update_layout(title="Parameter search as a job array")
    return fig


def horovod_table():
    """Guan 2019's Horovod ResNet-50 runs on Graham (2 GPUs per node), with the efficiency
    relative to one node: images/s per GPU / (images/s per GPU on one node)."""
    from hpclab.results import load_reference

    df = load_reference("guan2019_horovod_resnet50").frame()
    per_gpu = df.samples_per_s / df.gpus
    return df.assign(efficiency=(per_gpu / per_gpu.iloc[0]).round(2))[
        ["nodes", "gpus", "samples_per_s", "efficiency"]
    ]
