"""Figures of chapter 06: scaling (live, model, Guan 2019's tables) and all-reduce curves.

Efficiency is the one axis where a CPU rank on a laptop, a V100 in 2019 and a model can sit
side by side: throughput on n devices / (n x throughput on one), dimensionless.
"""

from __future__ import annotations

from typing import Any

from hpclab.axes import DOUBLING
from hpclab.display import figure, plural, run_label
from hpclab.results import Result, load_reference

# Guan 2019's tables, each as one curve: (reference name, filter, short label, label)
GUAN2019_CURVES: tuple[tuple[str, dict[str, Any], str, str], ...] = (
    (
        "guan2019_mnist_multigpu",
        {"api": "keras", "gpu": "v100", "batch_size": 256},
        "MNIST b=256",
        "Guan 2019 MNIST Keras V100, batch 256",
    ),
    (
        "guan2019_mnist_multigpu",
        {"api": "keras", "gpu": "v100", "batch_size": 8192},
        "MNIST b=8192",
        "Guan 2019 MNIST Keras V100, batch 8192",
    ),
    ("guan2019_resnet50_v100", {}, "ResNet-50", "Guan 2019 ResNet-50 V100, batch 128"),
    ("guan2019_horovod_resnet50", {}, "Horovod R-50", "Guan 2019 Horovod ResNet-50, 32/GPU"),
)


def reference_scaling(name: str, where: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """A bundled table as records with ``gpus``, ``samples_per_s`` and ``efficiency``.

    Times for a fixed number of iterations at a fixed global batch become samples/s; the
    efficiency is relative to the table's smallest GPU count (Horovod's starts at 2 GPUs).
    """
    ref = load_reference(name)
    rows = [r for r in ref.records if all(r.get(k) == v for k, v in (where or {}).items())]
    out = []
    for r in rows:
        rate = r.get("samples_per_s")
        if rate is None:
            rate = r["batch_size"] * r["iterations"] / r["seconds"]
        out.append({**r, "samples_per_s": rate})
    if not out:
        return out
    first = min(out, key=lambda r: r["gpus"])
    per_gpu = first["samples_per_s"] / first["gpus"]
    for r in out:
        r["efficiency"] = r["samples_per_s"] / (r["gpus"] * per_gpu)
    return sorted(out, key=lambda r: r["gpus"])


def guan2019_table() -> Any:
    """Guan 2019's scaling tables side by side: efficiency per GPU count (2 decimals)."""
    import pandas as pd

    rows = [
        {"table": short, "gpus": r["gpus"], "efficiency": round(r["efficiency"], 2)}
        for name, where, short, _label in GUAN2019_CURVES
        for r in reference_scaling(name, where)
    ]
    table = pd.DataFrame(rows).pivot(index="gpus", columns="table", values="efficiency")
    return table[[c[2] for c in GUAN2019_CURVES]].rename_axis(columns=None)


def add_guan2019(fig: Any, row: int | None = None, col: int | None = None) -> None:
    """Overlay Guan 2019's scaling tables as dashed efficiency curves."""
    for name, where, _short, label in GUAN2019_CURVES:
        rows = reference_scaling(name, where)
        kw = {"row": row, "col": col} if row else {}
        fig.add_scatter(
            x=[r["gpus"] for r in rows],
            y=[r["efficiency"] for r in rows],
            mode="lines+markers",
            line={"dash": "dash"},
            name=f"reference: {label}",
            hovertext=[r["source"] for r in rows],
            **kw,
        )


def add_both_panels(
    fig: Any, x: list, left: list, right: list, name: str, legendgroup: str = "", **style: Any
) -> None:
    """One series drawn in both panels of a 1x2 figure, with a single legend entry."""
    group = legendgroup or name
    fig.add_scatter(x=x, y=left, name=name, legendgroup=group, row=1, col=1, **style)
    fig.add_scatter(
        x=x, y=right, name=name, legendgroup=group, showlegend=False, row=1, col=2, **style
    )


@figure
def plot_ddp(result: Result):
    """Samples/s and efficiency against ranks, live and model, with Guan 2019's tables; runs to
    a target accuracy (``target_acc``) plot time to the target beside samples/s instead."""
    from plotly.subplots import make_subplots

    if any("time_to_target_s" in r for r in result.records):
        from hpclab.ddp.large_batch_plot import time_to_target_figure

        return time_to_target_figure(result)

    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("throughput (samples/s)", "scaling efficiency")
    )
    groups: dict[tuple, list[dict]] = {}
    for r in result.records:
        if r.get("tier") in ("live", "model"):
            # the one GPU rank beside CPU ranks (ddp_experiment.one_gpu_beside) is its own series
            key = (r["tier"], r["model"], r["scaling"], r["device"] if r.get("role") else "")
            # runs a panel accumulated with other settings (a batch size) are their own series
            run = run_label(r, shown=("ranks", "model", "scaling"))
            groups.setdefault((*key, run), []).append(r)
    for (tier, model, scaling, gpu, run), rows in sorted(groups.items()):
        rows = sorted(rows, key=lambda r: r["ranks"])
        name = f"{model}, {scaling}{', ' + run if run else ''}"
        name += f" ({tier}{', one GPU rank on ' + gpu if gpu else ''})"
        marker = {"size": 10, "symbol": "circle" if tier == "live" else "circle-open"}
        x = [r["ranks"] for r in rows]
        add_both_panels(
            fig,
            x,
            [r["samples_per_s"] for r in rows],
            [r["efficiency"] for r in rows],
            name,
            mode="markers",
            marker=marker,
        )
    add_guan2019(fig, row=1, col=2)
    fig.add_hline(y=1.0, line={"color": "gray", "width": 1}, row=1, col=2)
    fig.update_xaxes(type="log", dtick=DOUBLING, title="ranks / GPUs")
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_yaxes(range=[0, 1.3], row=1, col=2)
    fig.update_layout(
        title="Data-parallel scaling: measured here, modelled, and Guan 2019", height=460
    )
    return fig


@figure
def plot_allreduce(result: Result):
    """Bus bandwidth and time against message size (log-log), measured and fitted."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("bus bandwidth (GB/s)", "time (s)"))
    groups: dict[tuple, list[dict]] = {}
    for r in result.records:
        if "bytes" in r:
            groups.setdefault((r["tier"], r.get("impl", "dist.all_reduce"), r["ranks"]), []).append(
                r
            )
    for (tier, impl, ranks), rows in sorted(groups.items()):
        rows = sorted(rows, key=lambda r: r["bytes"])
        name = f"{impl}, {plural(ranks, 'rank')} ({tier})"
        mode = "markers" if tier == "live" else "lines"
        x = [r["bytes"] for r in rows]
        add_both_panels(
            fig, x, [r["busbw_gbps"] for r in rows], [r["time_s"] for r in rows], name, mode=mode
        )
    fig.update_xaxes(type="log", title="message bytes")
    fig.update_yaxes(type="log")
    fig.update_layout(title="All-reduce: busbw = algbw x 2(n-1)/n (nccl-tests)", height=420)
    return fig
