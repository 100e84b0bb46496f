"""Experiment ``gemm`` (chapter 01): GEMM throughput against the theoretical peak.

Sizes x dtypes x devices (the CPU at several thread counts, every GPU). Each record carries
``gflops`` (at the median sample), ``peak_gflops`` and ``peak_fraction`` with the peak's
derivation in ``peak_source``. ``shapes=True`` adds the best over every ``(m, n, k)`` drawn
from the sizes: the "maximum achievable matmul FLOPS" idea of S. Bekman's ml-engineering
(MAMF finder), because a GPU's best shape is rarely a square. GPU rows that cannot be measured
here come from the bundled MAMF table (``reference`` tier, source named).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from hpclab.compute import device as dev
from hpclab.config import ConfigError, param
from hpclab.display import figure, plural, run_label, series_color, split_runs
from hpclab.progress import Progress
from hpclab.results import Result, load_reference, make_result


@dataclass(frozen=True)
class GemmConfig(dev.DevicesConfig):
    dtype: tuple = param(
        ("fp64", "fp32", "bf16"),
        choices=dev.DTYPE_CHOICES,
        quick=("fp32",),
        help="element types (tf32 = fp32 storage with tensor-core math, GPU only)",
    )
    size: tuple = param(
        (256, 512, 1024, 2048),
        min=16,
        max=65536,
        quick=(128, 256, 512),
        help="n of square n x n x n GEMMs",
    )
    threads: tuple = param((0,), min=0, max=1024, help="CPU threads to try (0 = usable cores)")
    repeat: int = param(10, min=1, max=1000, quick=3, help="timed repeats per point")
    shapes: bool = param(False, help="also search every (m, n, k) from the sizes for the best")
    references: bool = param(True, help="add published GPU results (MAMF table) as reference")

    def check(self) -> None:
        if not self.size:
            raise ConfigError("size=() is empty; give at least one size, e.g. 1024")
        if not self.dtype:
            raise ConfigError("dtype=() is empty; allowed: " + ", ".join(dev.DTYPES))


def gemm_bytes(m: int, n: int, k: int, dtype: str) -> tuple[int, int]:
    """(device bytes, host bytes) one timed matmul allocates, including the fp64 check copy."""
    s = dev.element_size(dtype)
    on_device = s * (m * k + k * n + m * n) + 8 * (k * n + 8 * (n + k))
    host = 4 * (m * k + k * n)  # the fp32 normals are drawn on the host, then converted/moved
    return on_device, host


def _guard(m: int, n: int, k: int, dtype: str, device: str) -> None:
    on_device, host = gemm_bytes(m, n, k, dtype)
    what = f"a {m}x{k} @ {k}x{n} {dtype} GEMM"
    if device == "cpu":
        dev.ensure_fits(on_device + host, "cpu", what)
    else:
        dev.ensure_fits(host, "cpu", what + " (host staging)")
        dev.ensure_fits(on_device, device, what)


def _plan(config: GemmConfig) -> list[tuple[str, str, int]]:
    """(device, dtype, threads) series; unsupported combinations are refused up front."""
    plan = []
    refused: dict[str, str] = {}  # dtype -> the first device's reason
    for device in config.devices():
        for dtype in dict.fromkeys(dev.canonical_dtype(d) for d in config.dtype):
            why = dev.unsupported(device, dtype)
            if why and not config.compare_devices:
                raise ConfigError(f"dtype={dtype!r} on {device}: {why}")
            if why:  # comparing: skip what a device cannot do (recorded below), unless all is
                refused.setdefault(dtype, f"dtype={dtype!r} on {device}: {why}")
                continue
            for threads in config.threads if device == "cpu" else (0,):
                plan.append((device, dtype, threads))
    if not plan and refused:
        raise ConfigError(next(iter(refused.values())))
    return plan


# A GPU also runs these sizes: an H200 reached 0.13 of its bf16 peak at 1024^3 and 0.79 at
# 8192^3 (this course's run, hpclab/references/h200_gemm.json); the curve in between is
# the lesson "a GEMM must be large to fill a GPU".
GPU_EXTRA_SIZES = (4096, 8192)


def _shapes(config: GemmConfig, device: str) -> list[tuple[int, int, int]]:
    sizes = set(config.size)
    if device.startswith("cuda"):
        sizes |= {s for s in GPU_EXTRA_SIZES if s > max(sizes)}
    sizes = sorted(sizes)
    shapes = [(s, s, s) for s in sizes]
    if config.shapes:
        shapes += [t for t in itertools.product(sizes, repeat=3) if len(set(t)) > 1]
    return shapes


def run_gemm(config: GemmConfig, progress: Progress) -> Result:
    from hpclab.compute.gemm import time_matmul

    plan = _plan(config)
    for device, dtype, _ in plan:  # refuse before anything is allocated
        for m, n, k in _shapes(config, device):
            _guard(m, n, k, dtype, device)
    records: list[dict[str, Any]] = []
    total, done = sum(len(_shapes(config, d)) for d, _, _ in plan), 0
    for device, dtype, threads in plan:
        name = dev.device_name(device)
        shapes = _shapes(config, device)
        with dev.torch_threads(threads if device == "cpu" else 0) as used:
            peak, source = dev.peak_gflops(device, dtype, used if device == "cpu" else None)
            for m, n, k in shapes:
                progress.update(
                    done, total, f"{dtype} {m}x{n}x{k} on {device}, {plural(used, 'thread')}"
                )
                t = time_matmul(m, n, k, dtype, device, repeat=config.repeat)
                records.append(
                    {
                        "kind": "square" if m == n == k else "shape",
                        "device": device,
                        "device_name": name,
                        "dtype": dtype,
                        "threads": used if device == "cpu" else None,
                        "size": m if m == n == k else None,
                        "m": m,
                        "n": n,
                        "k": k,
                        "gflops": t.gflops,
                        "gflops_best": t.gflops_best,
                        "peak_gflops": peak,
                        "peak_fraction": t.gflops / peak if peak else None,
                        "peak_source": source,
                        **t.timing.summary(),
                    }
                )
                done += 1
    if config.shapes:
        records += max_achievable(records)
    if config.references:
        records += reference_records()
    progress.update(total, total, "done")
    return make_result("gemm", config, records)


def max_achievable(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``kind="max_achievable"`` row per (device, dtype, threads): the best shape's figure."""
    best: dict[tuple, dict[str, Any]] = {}
    for r in records:
        if r.get("tier", "live") != "live" or r["kind"] not in ("square", "shape"):
            continue
        key = (r["device"], r["dtype"], r["threads"])
        if key not in best or r["gflops"] > best[key]["gflops"]:
            best[key] = r
    return [{**r, "kind": "max_achievable", "size": None} for r in best.values()]


def reference_records() -> list[dict[str, Any]]:
    """Published maximum-achievable bf16 matmul figures for GPUs, and this course's own H200
    run at 8192^3 in bf16, TF32 and fp32 (reference tier, each with its source)."""
    ref = load_reference("mamf_bf16")
    out = []
    for r in ref.records:
        out.append(
            {
                **r,
                "kind": "max_achievable",
                "dtype": "bf16",
                "device": r["accelerator"],
                "gflops": r["mamf_tflops"] * 1e3,
                "peak_gflops": r["theory_tflops"] * 1e3,
                "peak_fraction": r["mamf_tflops"] / r["theory_tflops"],
            }
        )
    for r in load_reference("h200_gemm").records:
        if r["size"] == 8192:
            out.append(
                {
                    "tier": "reference",
                    "source": r["source"],
                    "kind": "max_achievable",
                    "dtype": r["dtype"],
                    "device": "NVIDIA H200 (this course's run)",
                    "size": r["size"],
                    # the run recorded fractions; the rate is fraction x the datasheet peak
                    "gflops": r["peak_fraction"] * r["peak_tflops"] * 1e3,
                    "peak_gflops": r["peak_tflops"] * 1e3,
                    "peak_fraction": r["peak_fraction"],
                }
            )
    return out


def _live_squares(result: Result) -> list[dict[str, Any]]:
    """The n x n x n GEMMs measured here (not the shape sweep, not the references)."""
    return [r for r in result.records if r.get("tier") == "live" and r["kind"] == "square"]


def peak_table(result: Result) -> Any:
    """Chapter 01's table: % of peak of every live GEMM, one row per series (``cpu fp32, 2
    threads``, ``cuda bf16``: a GPU series has no thread count), one column per size n."""
    import pandas as pd

    from hpclab.display import readable

    rows = [
        {"series": _series_name(r), "size": r["size"], "% of peak": 100 * r["peak_fraction"]}
        for r in _live_squares(result)
    ]
    table = pd.DataFrame(rows).pivot_table(
        index="series", columns="size", values="% of peak", sort=False
    )
    return readable(table)


def _series_name(r: dict[str, Any]) -> str:
    if r["device"] == "cpu":
        return f"cpu {r['dtype']}, {plural(r['threads'], 'thread')}"
    return f"{r['device']} {r['dtype']}"


@figure
def plot_gemm(result: Result):
    """Top: GFLOP/s vs size with each series' peak dashed. Below: best fraction of peak, live
    beside the reference GPUs."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        # one above the other: side by side, the bars' long names ran into the left plot at
        # a notebook's (or a stored image's) width
        rows=2,
        cols=1,
        vertical_spacing=0.2,
        subplot_titles=("GEMM throughput (log scale)", "best fraction of peak"),
    )
    live = _live_squares(result)
    series: dict[str, list[dict[str, Any]]] = {}
    for r in live:
        series.setdefault(_series_name(r), []).append(r)
    series = split_runs(series, shown=("dtype", "threads", "device"))
    for _i, (name, rows) in enumerate(series.items()):
        rows = sorted(rows, key=lambda r: r["size"])
        color = series_color(name)
        fig.add_scatter(
            x=[r["size"] for r in rows],
            y=[r["gflops"] for r in rows],
            mode="lines+markers",
            name=name,
            legendgroup=name,
            line={"color": color},
            row=1,
            col=1,
        )
        if rows[0]["peak_gflops"]:
            fig.add_scatter(
                x=[rows[0]["size"], rows[-1]["size"]],
                y=[rows[0]["peak_gflops"]] * 2,
                mode="lines",
                line={"color": color, "dash": "dash"},
                name=f"{name} peak",
                legendgroup=name,
                hovertext=rows[0]["peak_source"],
                showlegend=False,
                row=1,
                col=1,
            )
    bars: dict[str, dict[str, Any]] = {}
    for r in result.records:
        if r.get("peak_fraction") is None or r["kind"] not in ("square", "max_achievable"):
            continue
        label = _series_name(r) if r.get("tier") == "live" else f"{r['device']} {r['dtype']} (ref)"
        run = run_label(r, shown=("dtype", "threads", "device")) if r.get("tier") == "live" else ""
        label = f"{label} ({run})" if run else label
        if label not in bars or r["peak_fraction"] > bars[label]["peak_fraction"]:
            bars[label] = r
    fig.add_bar(  # horizontal: long series names stay readable
        y=list(bars),
        x=[100 * r["peak_fraction"] for r in bars.values()],
        orientation="h",
        marker={"color": ["#1f77b4" if r.get("tier") == "live" else "#aaa" for r in bars.values()]},
        hovertext=[r.get("peak_source") or r.get("source") for r in bars.values()],
        name="% of peak (grey: reference)",
        row=2,
        col=1,
    )
    fig.update_xaxes(title_text="n (n x n x n GEMM)", type="log", row=1, col=1)
    fig.update_yaxes(title_text="GFLOP/s", type="log", row=1, col=1)
    fig.update_xaxes(title_text="% of theoretical peak", range=[0, 105], row=2, col=1)
    fig.update_yaxes(automargin=True, tickfont={"size": 10}, row=2, col=1)
    fig.update_layout(title="GEMM throughput", height=760, legend={"orientation": "h", "y": -0.12})
    return fig
