"""Experiment ``bandwidth`` (chapter 01): main-memory bandwidth, the roofline's slanted roof.

The four STREAM kernels (J. McCalpin, https://www.cs.virginia.edu/stream/) written as torch
operations on arrays far larger than the last-level cache:

=======  =====================  ===============  ===================
kernel   operation              bytes / element  FLOPs / element
=======  =====================  ===============  ===================
copy     ``b = a``              2 s              0
scale    ``b = q a``            2 s              1
add      ``c = a + b``          3 s              1
triad    ``a = b + q c``        3 s              2
=======  =====================  ===============  ===================

``s`` is the element size. Like STREAM we count the bytes the kernel names; a CPU that
allocates a cache line before writing it moves one more array than that, so the true traffic
is higher and these figures are a lower bound on the hardware's bandwidth.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

import torch

from hpclab.compute import device as dev
from hpclab.config import ConfigError, param
from hpclab.display import figure, plural
from hpclab.progress import Progress
from hpclab.results import Result, load_reference, make_result

KERNELS: dict[str, tuple[int, int]] = {
    "copy": (2, 0),
    "scale": (2, 1),
    "add": (3, 1),
    "triad": (3, 2),
}
Q = 3.0  # STREAM's scalar
# GPUs drawn as reference ceilings when none is present (datasheet bandwidth, hpclab.measure.peaks).
REFERENCE_GPUS = ("H100 SXM", "A100 SXM 80GB", "V100 SXM2", "P100 SXM2")


@dataclass(frozen=True)
class BandwidthConfig(dev.DevicesConfig):
    kernels: tuple = param(tuple(KERNELS), choices=tuple(KERNELS), help="STREAM kernels to run")
    array_mb: int = param(
        256, min=1, max=65536, quick=64, help="MiB per array (keep it >= 4x the last-level cache)"
    )
    threads: tuple = param((0,), min=0, max=1024, help="CPU threads to try (0 = usable cores)")
    repeat: int = param(10, min=1, max=1000, quick=5, help="timed repeats per kernel")
    references: bool = param(True, help="add datasheet GPU memory bandwidths as reference rows")

    def check(self) -> None:
        if not self.kernels:
            raise ConfigError("kernels=() is empty; allowed: " + ", ".join(KERNELS))


def stream_fn(kernel: str, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor):
    """The torch call for one STREAM kernel (writes into an existing array: no allocation)."""
    if kernel == "copy":
        return lambda: b.copy_(a)
    if kernel == "scale":
        return lambda: torch.mul(a, Q, out=b)
    if kernel == "add":
        return lambda: torch.add(a, b, out=c)
    if kernel == "triad":
        return lambda: torch.add(b, c, alpha=Q, out=a)
    raise ConfigError(f"kernel={kernel!r} is not allowed; allowed: {', '.join(KERNELS)}")


def _expected(kernel: str, a0: float, b0: float, c0: float) -> float:
    return {"copy": a0, "scale": Q * a0, "add": a0 + b0, "triad": b0 + Q * c0}[kernel]


def measure_stream(
    kernel: str, n: int, device: str = "cpu", repeat: int = 10, dtype: torch.dtype = torch.float32
) -> dict[str, Any]:
    """Time one STREAM kernel on arrays of ``n`` elements; returns a record (GB/s = 1e9 B/s)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    dev.ensure_fits(3 * n * itemsize, device, f"three {n}-element arrays")
    a = torch.full((n,), 1.0, dtype=dtype, device=device)
    b = torch.full((n,), 2.0, dtype=dtype, device=device)
    c = torch.full((n,), 0.5, dtype=dtype, device=device)
    want = _expected(kernel, 1.0, 2.0, 0.5)

    def check(out: torch.Tensor) -> None:
        got = out[:: max(1, n // 7)].float().cpu()  # a few elements spread over the array
        if not torch.all(got == want):
            raise AssertionError(f"{kernel} wrong: expected {want}, got {got.tolist()[:3]}")

    from hpclab.measure.timing import time_fn

    # The first call (checked) is the only one on fresh values; repeats only rewrite the same
    # arrays, which is what STREAM does too.
    timing = time_fn(stream_fn(kernel, a, b, c), device=device, repeat=repeat, check=check)
    words, flops = KERNELS[kernel]
    nbytes = words * n * itemsize
    return {
        "kernel": kernel,
        "elements": n,
        "bytes_per_call": nbytes,
        "flops_per_call": flops * n,
        "gbps": timing.rate(nbytes) / 1e9,
        "gbps_best": timing.best_rate(nbytes) / 1e9,
        **timing.summary(),
    }


def run_bandwidth(config: BandwidthConfig, progress: Progress) -> Result:
    devices = config.devices()
    n = config.array_mb * 2**20 // 4  # fp32 elements per array
    for device in devices:  # refuse before allocating anything
        dev.ensure_fits(3 * n * 4, device, f"three {config.array_mb} MiB arrays")
    plan = [(d, t) for d in devices for t in (config.threads if d == "cpu" else (0,))]
    total = len(plan) * len(config.kernels)
    records: list[dict[str, Any]] = []
    for i, (device, threads) in enumerate(plan):
        peak = None
        if device != "cpu":
            spec = dev.gpu_reference(dev.device_name(device))
            peak = spec["mem_bw_gbps"] if spec else None
        with dev.torch_threads(threads if device == "cpu" else 0) as used:
            for j, kernel in enumerate(config.kernels):
                progress.update(i * len(config.kernels) + j, total, f"{kernel} on {device}")
                rec = measure_stream(kernel, n, device, config.repeat)
                records.append(
                    {
                        "device": device,
                        "threads": used if device == "cpu" else None,
                        "array_mb": config.array_mb,
                        **rec,
                        "peak_gbps": peak,
                        "peak_fraction": rec["gbps"] / peak if peak else None,
                    }
                )
    if config.references:
        records += reference_records()
    progress.update(total, total, "done")
    return make_result("bandwidth", config, records)


def reference_records(names: tuple[str, ...] = REFERENCE_GPUS) -> list[dict[str, Any]]:
    """Datasheet memory bandwidth of a few GPUs (reference tier, source named)."""
    out = []
    for name in names:
        spec = dev.gpu_reference(name)
        if spec:
            out.append(
                {
                    "tier": "reference",
                    "device": spec["spec"],
                    "kernel": "datasheet",
                    "peak_gbps": spec["mem_bw_gbps"],
                    "source": spec["source"],
                }
            )
    for r in load_reference("h200_stream").records:  # what STREAM reaches on HBM
        out.append(
            {
                "tier": "reference",
                "device": "NVIDIA H200 STREAM triad (measured)",
                "kernel": "triad",
                "peak_gbps": r["gbps_high"],
                "gbps_low": r["gbps_low"],
                "source": f"{r['source']}: {r['gbps_low']:g}-{r['gbps_high']:g} GB/s "
                f"= {r['peak_fraction_low']:.2f}-{r['peak_fraction_high']:.2f} of "
                f"{r['peak_gbps']:g} GB/s",
            }
        )
    return out


@figure
def plot_bandwidth(result: Result):
    """Bars of GB/s per kernel and device (log scale), datasheet GPU bandwidths beside them."""
    import plotly.graph_objects as go

    fig = go.Figure()
    live = [r for r in result.records if r.get("tier") == "live"]
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in live:
        label = r["device"] + (", " + plural(r["threads"], "thread") if r["threads"] else "")
        groups.setdefault(label, []).append(r)
    for label, rows in groups.items():
        fig.add_bar(
            x=[r["kernel"] for r in rows],
            y=[r["gbps"] for r in rows],
            name=f"{label} (live)",
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [r["gbps_best"] - r["gbps"] for r in rows],
                "arrayminus": [0] * len(rows),
            },
        )
    ref = [r for r in result.records if r.get("tier") == "reference"]
    if ref:
        fig.add_bar(
            # wrapped: a long name turned at an angle ran under the legend
            x=["<br>".join(textwrap.wrap(r["device"], 10)) for r in ref],
            y=[r["peak_gbps"] for r in ref],
            name="GPU reference (datasheet, or measured where named)",
            marker={"color": "#aaa"},
            hovertext=[f"reference: {r['source']}" for r in ref],
        )
    fig.update_layout(
        title="Memory bandwidth: STREAM kernels (median; whisker = best) vs GPU datasheets",
        yaxis={"type": "log", "title": "GB/s"},
        xaxis={"tickangle": 0, "tickfont": {"size": 11}},  # level, wrapped names: none clipped
        barmode="group",
        height=440,
        legend={"orientation": "h", "y": -0.3},
    )
    return fig
