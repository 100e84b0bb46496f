"""Experiment ``roofline`` (chapter 01): where each kernel sits under the machine's two roofs.

The roofline model (S. Williams, A. Waterman, D. Patterson, "Roofline: an insightful visual
performance model for multicore architectures", CACM 52(4), 2009):

    attainable GFLOP/s = min(peak GFLOP/s, bandwidth GB/s x intensity FLOP/byte)

The compute roof is the theoretical peak (model tier, derivation in ``source``); the memory
roof is the measured STREAM triad bandwidth (live), measured the way the points are: same
threads, arrays as large as the add's, caches as cold, and sampled before *and* after the
kernels; the roof is the best sample (STREAM reports its best rate too), the points their median.
A point may still land above its roof for two honest reasons, and the plot then says which:
its working set fits in the cache (the DRAM roof does not bind it), or the machine was busier
while the roof was sampled than while the point ran. The points are measured kernels placed at
their intensity (:mod:`hpclab.compute.flops`): GEMMs of several sizes (intensity grows with n),
an elementwise add and a softmax (fixed, tiny intensity: memory-bound on every machine), and
AlexNet's second convolution (compute-bound). A reference GPU's roofs come from its datasheet,
and the same kernels are placed under them as a *model* (intensity is a property of the kernel,
not of the machine).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import Any

import torch

from hpclab.compute import device as dev
from hpclab.compute import flops as F
from hpclab.config import param
from hpclab.display import figure
from hpclab.progress import Progress
from hpclab.results import Result, make_result

REFERENCE_CHOICES = ("H100 SXM", "A100 SXM 80GB", "V100 SXM2", "P100 SXM2", "none")


@dataclass(frozen=True)
class RooflineConfig(dev.DevicesConfig):
    dtype: str = param("fp32", choices=("fp32", "bf16"), help="element type of every kernel")
    threads: int = param(0, min=0, max=1024, help="CPU threads (0 = usable cores)")
    gemm_sizes: tuple = param(
        (32, 128, 512, 2048), min=8, max=32768, quick=(32, 128, 512), help="n of n^3 GEMMs"
    )
    elements: int = param(
        16 * 2**20,
        min=2**10,
        max=2**32,
        help="elements of the add, the softmax and the roof's STREAM arrays (at least 16 Mi)",
    )
    conv_batch: int = param(16, min=1, max=1024, quick=2, help="batch of the AlexNet conv2 layer")
    repeat: int = param(5, min=1, max=1000, quick=3, help="timed repeats per kernel")
    reference_gpu: str = param("H100 SXM", choices=REFERENCE_CHOICES, help="datasheet roofs")


def _time(fn, device: str, repeat: int):
    from hpclab.compute.timers import timed_auto

    return timed_auto(fn, device, repeat)


def _time_add(n: int, tdt: torch.dtype, device: str, repeat: int):
    a = torch.rand(n, device=device, dtype=tdt)
    b = torch.rand(n, device=device, dtype=tdt)
    c = torch.empty(n, device=device, dtype=tdt)
    return _time(lambda: torch.add(a, b, out=c), device, repeat)


def _time_softmax(rows: int, tdt: torch.dtype, device: str, repeat: int):
    x = torch.randn(rows, 4096, device=device, dtype=tdt)
    y = torch.empty_like(x)
    # the out= variant writes into y: no allocation (and no page faults) inside the timing
    return _time(lambda: torch.ops.aten._softmax.out(x, -1, False, out=y), device, repeat)


def stream_elements(config: RooflineConfig) -> int:
    """Elements of the add, the softmax and the roof's STREAM arrays: one size for all three,
    at least 3 x 64 MiB (beyond any CPU's cache), so the three see the same memory."""
    return max(config.elements, 16 * 2**20)


def measure_points(config: RooflineConfig, device: str, progress: Progress) -> list[dict]:
    """Time every kernel of the roofline on ``device``; returns one live record per kernel."""
    from hpclab.compute.gemm import time_matmul

    tdt = dev.DTYPES[config.dtype]
    s = dev.element_size(config.dtype)
    out: list[dict[str, Any]] = []
    steps = len(config.gemm_sizes) + 3

    def record(work: F.Work, op: str, seconds: float, timing) -> None:
        out.append(
            {
                "kind": "point",
                "op": op,
                "label": work.name,
                "intensity": work.intensity,
                "working_set_bytes": work.bytes,
                "gflops": work.flops / seconds / 1e9,
                "formula": work.formula,
                **timing.summary(),
            }
        )

    for i, n in enumerate(config.gemm_sizes):
        progress.update(1 + i, steps + 1, f"GEMM {n}^3")
        t = time_matmul(n, n, n, config.dtype, device, repeat=config.repeat)
        record(F.gemm(n, n, n, s), "gemm", t.timing.median_s, t.timing)

    n = stream_elements(config)
    dev.ensure_fits(3 * n * s, device, f"three {n}-element arrays")
    progress.update(steps - 2, steps + 1, "elementwise add")
    t = _time_add(n, tdt, device, config.repeat)
    record(F.elementwise(n, 1, 2, s), "add", t.median_s, t)
    rows = max(1, n // 4096)
    progress.update(steps - 1, steps + 1, "softmax")
    t = _time_softmax(rows, tdt, device, config.repeat)
    record(F.softmax(rows, 4096, s), "softmax", t.median_s, t)

    p = F.ALEXNET_CONV2
    batch = config.conv_batch
    work = F.conv2d(
        batch, p["c_in"], p["h"], p["w"], p["c_out"], p["kernel"], 1, p["padding"], p["groups"], s
    )
    dev.ensure_fits(work.bytes * 2, device, f"AlexNet conv2 at batch {batch}")
    gen = torch.Generator().manual_seed(0)
    xin = torch.randn(batch, p["c_in"], p["h"], p["w"], generator=gen).to(device, tdt)
    w = torch.randn(p["c_out"], p["c_in"] // p["groups"], 5, 5, generator=gen).to(device, tdt)
    progress.update(steps, steps + 1, "AlexNet conv2")
    conv = torch.nn.functional.conv2d
    t = _time(lambda: conv(xin, w, padding=p["padding"], groups=p["groups"]), device, config.repeat)
    record(work, "conv", t.median_s, t)
    return out


def run_roofline(config: RooflineConfig, progress: Progress) -> Result:
    """Roofs and kernels on each device of ``config.devices()`` (the CPU and every GPU side by
    side when comparing); the datasheet reference GPU joins when no GPU was measured."""
    devices = config.devices()
    for device in devices:  # refuse before measuring anything
        why = dev.unsupported(device, config.dtype)
        if why:
            from hpclab.config import ConfigError

            raise ConfigError(f"dtype={config.dtype!r} on {device}: {why}")
    records: list[dict[str, Any]] = []
    points: list[dict[str, Any]] = []
    for device in devices:
        got = _measure_device(config, device, progress)
        records += got
        points = points or [r for r in got if r.get("kind") == "point"]
    if config.reference_gpu != "none" and not any(d.startswith("cuda") for d in devices):
        records += reference_gpu_records(config.reference_gpu, config.dtype, points)
    return make_result("roofline", config, records)


def _measure_device(config: RooflineConfig, device: str, progress: Progress) -> list[dict]:
    from hpclab.compute.bandwidth import measure_stream

    records: list[dict[str, Any]] = []
    with dev.torch_threads(config.threads if device == "cpu" else 0) as used:
        n = stream_elements(config)  # the add's and the softmax's size too
        progress.update(0, 1, "STREAM triad (before the kernels)")
        before = measure_stream("triad", n, device, repeat=config.repeat)
        points = measure_points(config, device, progress)
        progress.update(1, 1, "STREAM triad (after the kernels)")
        after = measure_stream("triad", n, device, repeat=config.repeat)
        peak, source = dev.peak_gflops(device, config.dtype, used if device == "cpu" else None)
    gbps = max(before["gbps_best"], after["gbps_best"])
    records.append(
        {
            "kind": "roof",
            "roof": "memory",
            "gbps": gbps,
            "gbps_median": min(before["gbps"], after["gbps"]),
            "elements": n,
            "source": f"STREAM triad, {n * 4 >> 20} MiB arrays, best sample before and "
            "after the kernels",
        }
    )
    records.append(
        {"tier": "model", "kind": "roof", "roof": "compute", "peak_gflops": peak, "source": source}
    )
    cache = last_level_cache_bytes() if device == "cpu" else None
    for p in points:
        if peak:
            p["attainable_gflops"] = F.attainable_gflops(p["intensity"], peak, gbps)
            p["roof_fraction"] = p["gflops"] / p["attainable_gflops"]
            p["bound"] = F.bound(p["intensity"], peak, gbps)
            p["note"] = above_roof_note(p, cache)
        records.append({"device": device, "threads": used if device == "cpu" else None, **p})
    for r in records[:2]:
        r["device"] = device
    return records


ABOVE_ROOF_TOLERANCE = 1.05  # timing spread: 5 % above the roof is still "on" it


def last_level_cache_bytes() -> int | None:
    """Size of the largest CPU cache (Linux sysfs), or None where it cannot be read."""
    import glob

    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            text = open(path).read().strip().upper()
        except OSError:
            continue
        mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        try:
            sizes.append(int(text.rstrip("KMG")) * mult)
        except ValueError:
            continue
    return max(sizes) if sizes else None


def above_roof_note(point: dict[str, Any], cache_bytes: int | None) -> str:
    """Why a measured point lies above its roof ("" when it does not)."""
    attainable = point.get("attainable_gflops")
    if not attainable or point["gflops"] <= ABOVE_ROOF_TOLERANCE * attainable:
        return ""
    over = point["gflops"] / attainable
    ws = point.get("working_set_bytes") or 0
    if cache_bytes and ws and ws <= cache_bytes:
        return (
            f"{over:.1f}x its roof: its {ws / 2**20:.2g} MiB fit in the {cache_bytes >> 20} MiB "
            "cache, so the DRAM roof does not bind it"
        )
    return (
        f"{over:.1f}x its roof: the machine was busier while the roof was measured "
        "than while this kernel ran (shared cores or memory bus); run again on a quiet machine"
    )


def reference_gpu_records(name: str, dtype: str, points: list[dict]) -> list[dict[str, Any]]:
    """A datasheet GPU's two roofs (reference) and the same kernels placed under them (model)."""
    spec = dev.gpu_reference(name)
    if spec is None or dtype not in spec:
        return []
    peak, bw = spec[dtype] * 1e3, spec["mem_bw_gbps"]
    label = f"{spec['spec']} (datasheet)"
    out: list[dict[str, Any]] = [
        {
            "tier": "reference",
            "kind": "roof",
            "roof": "memory",
            "device": label,
            "gbps": bw,
            "source": spec["source"],
        },
        {
            "tier": "reference",
            "kind": "roof",
            "roof": "compute",
            "device": label,
            "peak_gflops": peak,
            "source": spec["source"],
        },
    ]
    for p in points:
        out.append(
            {
                "tier": "model",
                "kind": "point",
                "device": label,
                "op": p["op"],
                "label": p["label"],
                "intensity": p["intensity"],
                "attainable_gflops": F.attainable_gflops(p["intensity"], peak, bw),
                "bound": F.bound(p["intensity"], peak, bw),
            }
        )
    return out


def roofs(result: Result) -> dict[str, tuple[float, float]]:
    """``{device: (peak_gflops, gbps)}`` from a roofline result."""
    out: dict[str, list[float]] = {}
    for r in result.records:
        if r.get("kind") == "roof":
            pair = out.setdefault(r["device"], [math.nan, math.nan])
            if r["roof"] == "compute":
                pair[0] = r["peak_gflops"] or math.nan
            else:
                pair[1] = r["gbps"]
    return {k: (v[0], v[1]) for k, v in out.items()}


@figure
def plot_roofline(result: Result):
    """Log-log roofline: each device's two roofs, measured points, modelled reference points."""
    import plotly.graph_objects as go

    fig = go.Figure()
    xs = [2.0**e for e in range(-5, 12)]
    for i, (device, (peak, bw)) in enumerate(roofs(result).items()):
        color = ["#1f77b4", "#888"][min(i, 1)]
        ridge = peak / bw
        fig.add_scatter(
            x=xs,
            y=[min(peak, bw * x) for x in xs],
            mode="lines",
            line={"color": color, "dash": "solid" if i == 0 else "dot"},
            name=f"{device}: {bw:.0f} GB/s, {peak:.0f} GFLOP/s, ridge {ridge:.1f} FLOP/B",
        )
    for tier, symbol in (("live", "circle"), ("model", "circle-open")):
        pts = [r for r in result.records if r.get("kind") == "point" and r.get("tier") == tier]
        pts = [r for r in pts if not r.get("note")]
        if not pts:
            continue
        fig.add_scatter(
            x=[r["intensity"] for r in pts],
            y=[r["gflops"] if tier == "live" else r["attainable_gflops"] for r in pts],
            mode="markers+text",
            text=[r["op"] for r in pts],
            textposition="top center",
            marker={"size": 10, "symbol": symbol},
            hovertext=[f"{r['label']}: {r.get('formula', '')}" for r in pts],
            name="measured" if tier == "live" else "same kernels on the reference GPU (model)",
        )
    above = [r for r in result.records if r.get("kind") == "point" and r.get("note")]
    if above:  # never a point above its roof without the reason next to it
        fig.add_scatter(
            x=[r["intensity"] for r in above],
            y=[r["gflops"] for r in above],
            mode="markers",
            marker={"size": 12, "symbol": "x", "color": "#d62728"},
            hovertext=[f"{r['label']}: {r['note']}" for r in above],
            name="measured above its roof (reason on the plot)",
        )
        for r in above:
            fig.add_annotation(
                x=math.log10(r["intensity"]),
                y=math.log10(r["gflops"]),
                text="<br>".join(textwrap.wrap(f"{r['op']}: {r['note']}", 48)),
                showarrow=True,
                arrowhead=2,
                ax=40,
                ay=-40,
                align="left",
                font={"size": 11, "color": "#d62728"},
                bgcolor="rgba(255,255,255,0.85)",
            )
    fig.update_layout(
        title="Roofline: attainable = min(peak, bandwidth x FLOP/byte)",
        xaxis={"type": "log", "title": "arithmetic intensity (FLOP / byte)"},
        yaxis={"type": "log", "title": "GFLOP/s"},
        height=480,
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def kernel_table(gpu: str = "H100 SXM", n: int = 1024, elements: int = 2**24, batch: int = 16):
    """The roofline's kernels with FLOPs, bytes, intensity and their roof on a datasheet GPU
    (fp32; a DataFrame, deterministic: no measurement)."""
    import pandas as pd

    spec = dev.gpu_reference(gpu)
    peak, bw = spec["fp32"] * 1e3, spec["mem_bw_gbps"]
    p = F.ALEXNET_CONV2
    works = [
        F.gemm(n, n, n),
        F.elementwise(elements),
        F.softmax(elements // 4096, 4096),
        F.conv2d(batch, p["c_in"], p["h"], p["w"], p["c_out"], p["kernel"], 1, p["padding"],
                 p["groups"]),
    ]  # fmt: skip
    rows = [
        {
            "kernel": w.name,
            "GFLOP": w.flops / 1e9,
            "MB moved": w.bytes / 1e6,
            "FLOP/byte": w.intensity,
            f"{spec['spec']} bound": F.bound(w.intensity, peak, bw),
            "formula": w.formula,
        }
        for w in works
    ]
    return pd.DataFrame(rows).set_index("kernel").round(3)
