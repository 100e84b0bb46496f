"""Experiment ``crossover`` (chapter 01): small work is slow on a GPU.

Every GPU operation pays a fixed cost before any arithmetic: Python and the framework
dispatching it, the kernel launch, and a host synchronisation whenever the CPU needs the
answer. A simple model of one call of ``w`` units of work (FLOPs for a matmul, bytes for an
elementwise add) is

    t(w) = latency + w / rate

The CPU has a small latency and a small rate, a GPU a larger latency and a much larger rate,
so the two lines cross: below the crossover the CPU wins. Solving ``t_cpu(w) = t_gpu(w)``
gives ``w* = (latency_gpu - latency_cpu) / (1/rate_cpu - 1/rate_gpu)``.

Measured on every device here; without a GPU, the GPU line is a *model* from a datasheet and an
assumed per-call latency (``launch_us``), labelled as such. Each point also carries
``seconds_nosync``: the time a naive timer reports (no synchronize), which on a GPU is the
launch, not the work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from hpclab.compute import device as dev
from hpclab.compute.crossover_fit import (  # noqa: F401 - re-exported for chapter 01
    _measured_crossover,
    crossover_tables,
    crossover_work,
    fit_latency_rate,
    fits_and_crossovers,
    size_of,
)
from hpclab.compute.timers import naive_time
from hpclab.config import ConfigError, param
from hpclab.display import figure, series_color
from hpclab.progress import Progress
from hpclab.results import Result, make_result

OPS = ("matmul", "add")
GPU_MODELS = ("H100 SXM", "A100 SXM 80GB", "V100 SXM2", "P100 SXM2")


@dataclass(frozen=True)
class CrossoverConfig(dev.DevicesConfig):
    ops: tuple = param(OPS, choices=OPS, help="matmul (n x n x n fp32) and/or add (fp32)")
    matmul_sizes: tuple = param(
        (8, 16, 32, 64, 128, 256, 512, 1024),
        min=1,
        max=4096,
        quick=(8, 32, 128, 512),
        help="n of the n x n matmuls",
    )
    add_sizes: tuple = param(
        (2**8, 2**11, 2**14, 2**17, 2**20, 2**23),
        min=1,
        max=2**30,
        quick=(2**8, 2**12, 2**16, 2**20),
        help="elements of the adds",
    )
    threads: int = param(0, min=0, max=1024, help="CPU threads (0 = usable cores)")
    repeat: int = param(5, min=1, max=1000, quick=3, help="timed repeats per point")
    gpu_model: str = param("H100 SXM", choices=GPU_MODELS, help="datasheet for the GPU model")
    launch_us: float = param(
        10.0,
        min=0.5,
        max=1000.0,
        help="assumed per-call GPU overhead (µs) for the model line when no GPU is visible",
    )

    def check(self) -> None:
        if not self.ops:
            raise ConfigError("ops=() is empty; allowed: " + ", ".join(OPS))


def work_of(op: str, size: int) -> float:
    """FLOPs of an n x n x n matmul (2 n^3); bytes of an fp32 add of n elements (12 n)."""
    return 2.0 * size**3 if op == "matmul" else 12.0 * size


def _fn(op: str, size: int, device: str):
    if op == "matmul":
        dev.ensure_fits(3 * 4 * size * size, device, f"a {size}^3 fp32 matmul")
        a = torch.randn(size, size, device=device)
        b = torch.randn(size, size, device=device)
        c = torch.empty(size, size, device=device)
        return lambda: torch.mm(a, b, out=c)
    dev.ensure_fits(12 * size, device, f"an add of {size} fp32 elements")
    a = torch.randn(size, device=device)
    b = torch.randn(size, device=device)
    c = torch.empty(size, device=device)
    return lambda: torch.add(a, b, out=c)


# A GPU also runs these larger sizes: up to n=512 an H200 spent ~20 us per matmul whatever n
# (launch latency only), so without them its fit finds no rate (this course's H200 run).
GPU_EXTRA = {"matmul": (2048, 4096), "add": (2**25, 2**27)}


def _sizes(config: CrossoverConfig, op: str, device: str) -> list[int]:
    sizes = set(config.matmul_sizes if op == "matmul" else config.add_sizes)
    if device.startswith("cuda"):
        sizes |= {s for s in GPU_EXTRA[op] if s > max(sizes)}
    return sorted(sizes)


def run_crossover(config: CrossoverConfig, progress: Progress) -> Result:
    from hpclab.compute.timers import timed_auto
    from hpclab.measure.timing import synchronize

    devices = config.devices()
    plan = [(d, op, s) for d in devices for op in config.ops for s in _sizes(config, op, d)]
    records: list[dict[str, Any]] = []
    for i, (device, op, size) in enumerate(plan):
        progress.update(i, len(plan), f"{op} {size} on {device}")
        with dev.torch_threads(config.threads if device == "cpu" else 0):
            fn = _fn(op, size, device)
            t = timed_auto(fn, device, config.repeat)
            nosync = naive_time(fn, repeat=config.repeat)
            synchronize(device)  # the naive timer left work queued on a GPU
        records.append(
            {
                "kind": "point",
                "op": op,
                "device": device,
                "size": size,
                "work": work_of(op, size),
                "seconds": t.median_s,
                "seconds_nosync": nosync,
                "spread": t.spread,
            }
        )
    if not any(d.startswith("cuda") for d in devices):
        records += gpu_model_points(config)
    records += fits_and_crossovers(records)
    progress.update(len(plan), len(plan), "done")
    return make_result("crossover", config, records)


def gpu_model_points(config: CrossoverConfig) -> list[dict[str, Any]]:
    """The model GPU line: latency = launch_us, rate = datasheet fp32 peak or bandwidth."""
    spec = dev.gpu_reference(config.gpu_model)
    out = []
    for op in config.ops:
        rate = spec["fp32"] * 1e12 if op == "matmul" else spec["mem_bw_gbps"] * 1e9
        what = "fp32 peak" if op == "matmul" else "memory bandwidth"
        sizes = config.matmul_sizes if op == "matmul" else config.add_sizes
        for size in sorted(set(sizes)):
            out.append(
                {
                    "tier": "model",
                    "kind": "point",
                    "op": op,
                    "device": spec["spec"] + " (model)",
                    "size": size,
                    "work": work_of(op, size),
                    "seconds": config.launch_us * 1e-6 + work_of(op, size) / rate,
                    "source": f"{config.launch_us:g} µs assumed per call + work / {what} "
                    f"({spec['source']})",
                }
            )
    return out


@figure
def plot_crossover(result: Result):
    """Time per call vs size, one panel per op; dotted lines are the fitted model."""
    from plotly.subplots import make_subplots

    ops = list(dict.fromkeys(r["op"] for r in result.records))
    fig = make_subplots(
        rows=1, cols=len(ops), subplot_titles=[f"{op}: time per call" for op in ops]
    )
    for col, op in enumerate(ops, start=1):
        pts = [r for r in result.records if r["op"] == op and r["kind"] == "point"]
        for device in dict.fromkeys(p["device"] for p in pts):
            color = series_color(device)
            rows = sorted((p for p in pts if p["device"] == device), key=lambda p: p["size"])
            fig.add_scatter(
                x=[p["size"] for p in rows],
                y=[p["seconds"] for p in rows],
                mode="lines+markers",
                name=f"{device}",
                line={"color": color},
                legendgroup=device,
                showlegend=col == 1,
                row=1,
                col=col,
            )
            if device != "cpu" and rows[0].get("tier") == "live":
                fig.add_scatter(
                    x=[p["size"] for p in rows],
                    y=[p["seconds_nosync"] for p in rows],
                    mode="markers",
                    marker={"symbol": "x", "color": color},
                    name=f"{device} without synchronize (wrong)",
                    showlegend=col == 1,
                    row=1,
                    col=col,
                )
        sizes = [p["size"] for p in pts]
        lo, hi = min(sizes), max(sizes)
        for c in result.records:
            if c["kind"] != "crossover" or c["op"] != op:
                continue
            at = c["predicted_size"]
            if at is None:  # the fit found no rate: nothing to draw, the table says why
                continue
            if math.isfinite(at) and lo <= at <= hi:
                fig.add_vline(
                    x=max(at, 1),
                    line_dash="dot",
                    row=1,
                    col=col,
                    annotation_text=f"crossover ~{at:.0f}",
                )
            else:  # the model's crossover lies outside the data: say so, keep the axis on the data
                if not math.isfinite(at):
                    text = f"{c['device']}: never faster than the CPU here (no crossover)"
                else:
                    side = "below" if at < lo else "beyond"
                    text = f"{c['device']}: crossover ~{at:.3g}, {side} the sizes measured"
                fig.add_annotation(
                    text=text,
                    xref="x domain" if col == 1 else f"x{col} domain",
                    yref="y domain" if col == 1 else f"y{col} domain",
                    x=0.02,
                    y=0.98,
                    showarrow=False,
                    xanchor="left",
                    font={"size": 11},
                )
        # the axis spans the measured sizes (never a model line drawn to absurd n)
        fig.update_xaxes(range=[math.log10(lo) - 0.1, math.log10(hi) + 0.1], row=1, col=col)
        unit = "n (n x n x n)" if op == "matmul" else "elements"
        fig.update_xaxes(type="log", title_text=unit, row=1, col=col)
        fig.update_yaxes(type="log", title_text="seconds", row=1, col=col)
    fig.update_layout(height=440, legend={"orientation": "h", "y": -0.25})
    return fig
