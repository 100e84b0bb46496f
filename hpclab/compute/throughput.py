"""Experiment ``train-throughput`` (chapter 01): training samples/s vs batch size and threads.

The model, data and step are chapter-shared (:mod:`hpclab.train`): an MLP or a small CNN on
scikit-learn's digits or generated MNIST-like images, one SGD step = forward, loss, backward,
update, and a host sync to read the loss (as every training loop that logs its loss does).

Guan 2019 timed a ~3M-parameter MNIST network in TensorFlow for 20000 steps on 1..32 CPU cores
and on one P100/V100; its tables are bundled (``reference`` tier) and plotted beside ours as
speed-up over one thread, since the absolute rates belong to another model and another decade.
Small batches leave threads (and GPUs) idle: per step there is too little work to share.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch

from hpclab.compute import device as dev
from hpclab.compute.mfu import gemm_ceiling, mfu_fields
from hpclab.config import ConfigError, param
from hpclab.display import figure, plural, split_runs
from hpclab.progress import Progress
from hpclab.results import Result, load_reference, make_result
from hpclab.train import MODELS


@dataclass(frozen=True)
class ThroughputConfig(dev.DevicesConfig):
    model: str = param("large", choices=tuple(MODELS), help="hpclab.train model")
    data: str = param(
        "synthetic", choices=("digits", "synthetic"), help="8x8 digits or 28x28 MNIST-like"
    )
    batch_size: tuple = param(
        (16, 64, 256, 1024), min=1, max=65536, quick=(32, 256), help="samples per step"
    )
    threads: tuple = param(
        (1, 0), min=0, max=1024, help="CPU thread counts to try (0 = all usable cores)"
    )
    steps: int = param(20, min=1, max=100000, quick=5, help="timed steps per point")
    lr: float = param(0.05, min=1e-6, max=10.0, help="SGD learning rate")
    references: bool = param(True, help="add Guan 2019's CPU-thread and GPU tables")

    def check(self) -> None:
        if not self.batch_size:
            raise ConfigError("batch_size=() is empty; give at least one, e.g. 64")
        if not self.threads:
            raise ConfigError("threads=() is empty; give at least one, e.g. 1")


def make_data(name: str, n: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat features ``[N, F]`` and labels ``[N]`` (digits: F=64; synthetic: F=784)."""
    from hpclab.train import digits, synthetic_images

    if name == "digits":
        return digits(flat=True)
    x, y = synthetic_images(n, (1, 28, 28))
    return x.reshape(n, -1), y


def measure_step(
    model_name: str,
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
    device: str,
    steps: int,
    lr: float = 0.05,
) -> dict[str, Any]:
    """Time ``steps`` SGD steps at ``batch_size`` (after 3 warm-up steps); one record."""
    from hpclab.measure.timing import time_fn
    from hpclab.train import flops_per_sample, make_model, parameter_count, train_step

    n, features = x.shape
    model = make_model(model_name, in_features=features).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(0)
    # 8 fixed batches drawn with replacement (a batch may exceed the dataset), cycled.
    idx = [torch.randint(0, n, (batch_size,), generator=gen) for _ in range(8)]
    batches = itertools.cycle([(x[i].to(device), y[i].to(device)) for i in idx])
    losses: list[float] = []

    def step() -> float:
        xb, yb = next(batches)
        losses.append(train_step(model, optimizer, xb, yb))
        return losses[-1]

    timing = time_fn(step, device=device, warmup=3, repeat=steps)
    return {
        "model": model_name,
        "parameters": parameter_count(model),
        "flops_per_sample": flops_per_sample(model, features),
        "batch_size": batch_size,
        "samples_per_s": batch_size / timing.median_s,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        **timing.summary(),
    }


def run_throughput(config: ThroughputConfig, progress: Progress) -> Result:
    from hpclab.measure.sysinfo import system_info

    usable = system_info()["cores_usable"]
    x, y = make_data(config.data)
    devices = config.devices()
    threads = list(dict.fromkeys(t or usable for t in config.threads))
    plan = [
        (d, t, b)
        for d in devices
        for t in (threads if d == "cpu" else [0])
        for b in config.batch_size
    ]
    row_bytes = 4 * x.shape[1] * 8  # 8 staged batches per point
    for d, _, b in plan:
        dev.ensure_fits(row_bytes * b, d, f"8 batches of {b} samples")
    records: list[dict[str, Any]] = []
    ceilings: dict[tuple[str, int], dict[str, Any]] = {}  # one GEMM probe per device and threads
    for i, (device, t, batch) in enumerate(plan):
        progress.update(i, len(plan), f"batch {batch} on {device}, {t or '-'} threads")
        with dev.torch_threads(t if device == "cpu" else 0) as used:
            rec = measure_step(config.model, x, y, batch, device, config.steps, config.lr)
        threads = used if device == "cpu" else None
        if (device, t) not in ceilings:
            ceilings[device, t] = gemm_ceiling(device, threads)
        records.append(
            {
                "device": device,
                "threads": threads,
                "data": config.data,
                **rec,
                **mfu_fields(
                    rec["flops_per_sample"], rec["samples_per_s"], device, threads=threads
                ),
                **ceilings[device, t],
            }
        )
    if config.references:
        records += reference_records()
    progress.update(len(plan), len(plan), "done")
    return make_result("train-throughput", config, records)


def reference_records() -> list[dict[str, Any]]:
    """Guan 2019's tables with ``seconds`` per step and ``samples_per_s`` derived from them."""
    out = []
    for name in ("guan2019_cpu_threads", "guan2019_gpu_single"):
        for r in load_reference(name).records:
            per_step = r["total_seconds"] / r["iterations"]
            out.append({**r, "seconds": per_step, "samples_per_s": r["batch_size"] / per_step})
    return out


def speedups(records: list[dict[str, Any]], tier: str) -> list[dict[str, Any]]:
    """CPU rows of one tier with ``speedup`` = samples/s over the 1-thread row of its batch."""
    rows = [r for r in records if r.get("tier") == tier and r["device"] == "cpu"]
    base = {r["batch_size"]: r["samples_per_s"] for r in rows if r["threads"] == 1}
    return [
        {**r, "speedup": r["samples_per_s"] / base[r["batch_size"]]}
        for r in rows
        if r["batch_size"] in base
    ]


@figure
def plot_throughput(result: Result):
    """Left: samples/s vs batch size. Right: speed-up over 1 thread, ours and Guan 2019's."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("training throughput (live)", "speed-up over 1 thread: ours vs Guan 2019"),
    )
    series: dict[str, list[dict]] = {}
    for r in result.records:
        if r.get("tier") == "live":
            name = r["device"] + (", " + plural(r["threads"], "thread") if r["threads"] else "")
            series.setdefault(name, []).append(r)
    # runs a panel accumulated with another model or step count: a line each, named by it
    for name, rows in split_runs(series, shown=("device", "threads", "batch_size")).items():
        rows = sorted(rows, key=lambda r: r["batch_size"])
        fig.add_scatter(
            x=[r["batch_size"] for r in rows],
            y=[r["samples_per_s"] for r in rows],
            mode="lines+markers",
            name=name,
            row=1,
            col=1,
        )
    for tier, dash, label in (("live", "solid", "ours"), ("reference", "dot", "Guan 2019")):
        rows = speedups(result.records, tier)
        for batch in sorted({r["batch_size"] for r in rows}):
            pts = sorted((r for r in rows if r["batch_size"] == batch), key=lambda r: r["threads"])
            fig.add_scatter(
                x=[r["threads"] for r in pts],
                y=[r["speedup"] for r in pts],
                mode="lines+markers",
                line={"dash": dash},
                name=f"{label}, batch {batch}",
                row=1,
                col=2,
            )
    fig.update_xaxes(type="log", title_text="batch size", row=1, col=1)
    fig.update_yaxes(type="log", title_text="samples / s", row=1, col=1)
    fig.update_xaxes(type="log", title_text="CPU threads", row=1, col=2)
    fig.update_yaxes(title_text="x one thread", row=1, col=2)
    fig.update_layout(
        title="Training throughput", height=440, legend={"orientation": "h", "y": -0.25}
    )
    return fig
