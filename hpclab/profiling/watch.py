"""Experiment ``hardware-watch``: the hardware while the patient trains, a burn-in check and
an inventory (chapter 03). See :mod:`hpclab.profiling.hardware`."""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from hpclab.config import Config, param
from hpclab.display import figure
from hpclab.profiling.hardware import Sampler, burn, inventory
from hpclab.profiling.patient import parse_faults, train
from hpclab.progress import Progress
from hpclab.results import Result, make_result


@dataclass(frozen=True)
class WatchConfig(Config):
    fault: str = param("threads", help="the patient's faults while it is watched")
    steps: int = param(400, min=10, max=100000, quick=80, help="training steps watched")
    interval: float = param(0.1, min=0.02, max=5.0, help="seconds between samples")
    burn_seconds: float = param(3.0, min=0.0, max=600.0, quick=0.5, help="burn-in per device")
    burn_n: int = param(1024, min=64, max=16384, quick=256, help="matrix size of the burn-in")

    def check(self) -> None:
        parse_faults(self.fault)


def run_watch(config: WatchConfig, progress: Progress) -> Result:
    import torch

    train(config.fault, steps=5)  # warm-up
    records = []
    with Sampler(config.interval) as sampler:
        train(config.fault, steps=config.steps, on_step=lambda i: progress.update(i, config.steps))
    # The sampler's own kind (cpu, rss, gpu) becomes ``metric``: every reading is a "sample".
    records += [{**r, "kind": "sample", "metric": r["kind"]} for r in sampler.records]
    if sampler.note:
        records.append({"kind": "note", "note": sampler.note})
    if config.burn_seconds > 0:
        devices = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        for d in devices:
            progress.update(0, 1, f"burn-in {d}")
            records.append({"kind": "burn", **burn(d, config.burn_seconds, config.burn_n)})
    records += [{"kind": "inventory", **r} for r in inventory()]
    return make_result("hardware-watch", config, records)


@figure
def plot_watch(result: Result) -> go.Figure:
    samples = [r for r in result.records if r["kind"] == "sample"]
    gpu = [r for r in samples if r["metric"] == "gpu"]
    fig = make_subplots(
        rows=3 if gpu else 2,
        cols=1,
        shared_xaxes=True,
        subplot_titles=("CPU % per core", "RSS of the process tree (MiB)", "GPU utilisation %")[
            : 3 if gpu else 2
        ],
    )
    cores = sorted({r["core"] for r in samples if "core" in r})
    for c in cores:
        rows = [r for r in samples if r.get("core") == c]
        fig.add_trace(
            go.Scatter(
                x=[r["seconds"] for r in rows], y=[r["cpu_pct"] for r in rows], name=f"core {c}"
            ),
            row=1,
            col=1,
        )
    rss = [r for r in samples if "rss_mib" in r]
    fig.add_trace(
        go.Scatter(x=[r["seconds"] for r in rss], y=[r["rss_mib"] for r in rss], name="RSS"),
        row=2,
        col=1,
    )
    for g in sorted({r["gpu"] for r in gpu}):
        rows = [r for r in gpu if r["gpu"] == g]
        fig.add_trace(
            go.Scatter(
                x=[r["seconds"] for r in rows], y=[r["gpu_util_pct"] for r in rows], name=f"GPU {g}"
            ),
            row=3,
            col=1,
        )
    note = next((r["note"] for r in result.records if r["kind"] == "note"), "")
    fig.update_layout(
        height=520 if gpu else 420,
        title=f"While the patient trains (fault={result.config['fault']})"
        + (f"<br><sup>{note}</sup>" if note else ""),
    )
    fig.update_xaxes(title_text="seconds", row=3 if gpu else 2, col=1)
    # Percent of a core from 0 to 100 (busy cores do not hide behind each other on a 99-101
    # axis); memory from 0, so a flat line reads as flat.
    fig.update_yaxes(range=[0, 105], row=1, col=1)
    fig.update_yaxes(rangemode="tozero", row=2, col=1)
    return fig
