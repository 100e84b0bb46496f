"""Chapter 00, "Welcome: your machine": the course map, the node's hardware and its peaks.

Experiment ``hardware``: theoretical peak per dtype for a number of cores at the measured clock
(model tier), the GPUs' datasheet peaks (reference tier), and a live fp32 GEMM probe that shows
how close a real kernel gets (live tier).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, ConfigError, param
from hpclab.display import figure, plural
from hpclab.experiments import Experiment
from hpclab.progress import Progress
from hpclab.results import Result, make_result

# The course map (DESIGN.md's fixed chapter list).
CHAPTERS: tuple[tuple[str, str, str], ...] = (
    (
        "00",
        "Welcome: your machine",
        "hpclab doctor, hardware inventory, peaks and their derivation",
    ),
    ("01", "GPU vs CPU", "GEMM/RNG/FFT/conv throughput vs peak, roofline, threads, crossover"),
    ("02", "PCIe topology & data movement", "topology, pinned vs pageable copies, P2P, overlap"),
    ("03", "Profiling", "cProfile, line_profiler, memory_profiler, torch.profiler"),
    ("04", "Storage & data loading", "small files vs LMDB vs HDF5 vs shards, DataLoader workers"),
    ("05", "Hogwild & parameter-server SGD", "lock-free SGD, sync/async servers, staleness"),
    ("06", "Multi-GPU data parallel", "DDP, all-reduce bandwidth, ring all-reduce, scaling model"),
    (
        "06",
        "Model parallel (06, part 2)",
        "pipeline bubble, tensor parallel, memory per GPU, layouts",
    ),
    ("07", "On the cluster", "Slurm jobs, multi-node torchrun, checkpoint/restart"),
    ("08", "Search and autotuning", "grid/random/TPE, job arrays, Celery workers, autotuning"),
    (
        "09",
        "Memory and precision (09, part 1)",
        "a step's bytes measured vs modelled, bf16/fp16 + loss scaling, checkpointing",
    ),
    (
        "09",
        "Sharded data parallel (09, part 2)",
        "ZeRO-1/2/3 and FSDP2 beside DDP, sharded checkpoints, the memory planner",
    ),
)


def course_map():
    """The chapters as a DataFrame (chapter, title, what you do there)."""
    import pandas as pd

    return pd.DataFrame(CHAPTERS, columns=["chapter", "title", "what you do"]).set_index("chapter")


@dataclass(frozen=True)
class HardwareConfig(Config):
    cores: int = param(
        0, min=0, max=256, help="cores to count in the peak (0 = your allocation's physical cores)"
    )
    probe_size: int = param(
        1024, min=0, max=8192, quick=256, help="n of a live n x n x n fp32 GEMM probe (0 = none)"
    )

    def check(self) -> None:
        if 0 < self.probe_size < 16:
            raise ConfigError(f"probe_size={self.probe_size} is too small; allowed: 0 or 16..8192")


def run_hardware(config: HardwareConfig, progress: Progress) -> Result:
    from hpclab.measure.peaks import cpu_peaks
    from hpclab.measure.sysinfo import clock_label, cpuinfo, system_info

    info = system_info()
    cores = config.cores or info.get("cores_physical") or info["cores_usable"]
    cpu = cpuinfo()
    peaks = cpu_peaks(
        cores,
        info["clock_ghz"],
        cpu["flags"],
        cpu["vendor"] or "",
        cpu["model"] or "",
        family=cpu["family"],
        clock_label=clock_label(info["clock_method"]),
    )
    records = cpu_peak_records(cores, info, peaks) + gpu_peak_records(info)
    if config.probe_size:
        records.append(probe_record(config.probe_size, cores, info, peaks, progress))
    return make_result("hardware", config, records)


def cpu_peak_records(cores: int, info: dict, peaks: dict[str, dict]) -> list[dict[str, Any]]:
    """The model tier: the CPU's peak per dtype on ``cores`` cores, each with its derivation."""
    return [
        {
            "tier": "model",
            "device": "cpu",
            "dtype": dtype,
            "cores": cores,
            "clock_ghz": info["clock_ghz"],
            "flops_per_cycle": p["flops_per_cycle"],
            "peak_gflops": p["gflops"],
            "derivation": p["derivation"],
        }
        for dtype, p in peaks.items()
    ]


def gpu_peak_records(info: dict) -> list[dict[str, Any]]:
    """The reference tier: each visible GPU's datasheet peak per dtype, with its source."""
    return [
        {
            "tier": "reference",
            "device": f"cuda:{gpu['index']} {gpu['name']}",
            "dtype": dtype,
            "peak_gflops": tflops * 1e3,
            "source": gpu.get("peak_source"),
        }
        for gpu in info["gpus"]
        for dtype, tflops in (gpu.get("peak_tflops") or {}).items()
        if dtype in ("fp64", "fp32", "bf16", "fp16", "tf32")
    ]


def probe_record(
    size: int, cores: int, info: dict, peaks: dict[str, dict], progress: Progress
) -> dict[str, Any]:
    """The live tier: one fp32 ``size``^3 GEMM timed on the CPU, against the fp32 peak."""
    from hpclab.compute.gemm import time_gemm
    from hpclab.dist.placement import torch_threads

    # The probe runs on the cores the peak counts (one thread per core; no more than this
    # allocation has), so the measured point and its bar describe the same cores.
    threads = min(cores, info.get("cores_physical") or info["cores_usable"])
    progress.update(0, 1, f"fp32 GEMM probe, n={size}, {plural(threads, 'thread')}")
    with torch_threads(threads):
        g = time_gemm(size, "fp32", "cpu", repeat=5)
    peak = peaks["fp32"]["gflops"]
    record = {
        "tier": "live",
        "device": "cpu",
        "dtype": "fp32",
        "cores": cores,
        "threads": threads,
        "size": size,
        "gflops": g.gflops,
        "peak_fraction": g.gflops / (peak * threads / cores) if peak else None,
        **g.timing.summary(),
    }
    progress.update(1, 1, "")
    return record


@figure
def plot_hardware(result: Result):
    """Peaks per dtype (bars, log scale; hover shows the derivation) and the live probe."""
    import plotly.graph_objects as go

    fig = go.Figure()
    rows = result.records
    cpu = [r for r in rows if r["tier"] == "model"]
    if cpu:
        fig.add_bar(
            x=[r["dtype"] for r in cpu],
            y=[r["peak_gflops"] for r in cpu],
            name=f"CPU peak, {plural(cpu[0]['cores'], 'core')} (model)",
            hovertext=[r["derivation"] for r in cpu],
        )
    for device in sorted({r["device"] for r in rows if r["tier"] == "reference"}):
        gpu = [r for r in rows if r["device"] == device]
        fig.add_bar(
            x=[r["dtype"] for r in gpu],
            y=[r["peak_gflops"] for r in gpu],
            name=f"{device} datasheet (reference)",
            hovertext=[r["source"] for r in gpu],
        )
    live = [r for r in rows if r["tier"] == "live"]
    fig.add_scatter(
        x=[r["dtype"] for r in live],
        y=[r["gflops"] for r in live],
        mode="markers",
        marker={"size": 14, "symbol": "diamond"},
        name="measured fp32 GEMM"
        + (f" on {plural(live[0]['threads'], 'thread')}" if live and "threads" in live[0] else "")
        + " (live)",
    )
    fig.update_layout(
        title="Theoretical peak per dtype (GFLOP/s) and one measured GEMM",
        yaxis={"type": "log", "title": "GFLOP/s"},
        xaxis={"title": "dtype"},
        barmode="group",
        height=420,
    )
    return fig


def node_figure(info: dict[str, Any] | None = None):
    """This node at a glance: cores (node vs allocation), memory, /dev/shm and GPUs."""
    from plotly.subplots import make_subplots

    from hpclab.measure.sysinfo import system_info

    info = info or system_info()
    fig = make_subplots(
        rows=1, cols=3, subplot_titles=("CPU cores", "memory (GB)", "GPU memory (GB)")
    )
    cores = [info["cores_node"], info["cores_usable"]]
    fig.add_bar(x=["node", "yours"], y=cores, row=1, col=1, showlegend=False)
    # Whole cores: no 0.5 tick on the axis.
    fig.update_yaxes(dtick=1 if max(cores) <= 8 else None, rangemode="tozero", row=1, col=1)
    fig.add_bar(
        x=["total", "free", "/dev/shm"],
        y=[info["mem_total_gb"], info["mem_available_gb"], info["shm_gb"]],
        row=1,
        col=2,
        showlegend=False,
    )
    gpus = info["gpus"]
    fig.add_bar(
        x=[f"{g['index']}: {g['name']}" for g in gpus] or ["no GPU visible"],
        y=[g["memory_gb"] for g in gpus] or [0],
        row=1,
        col=3,
        showlegend=False,
    )
    fig.update_yaxes(rangemode="tozero", row=1, col=3)
    fig.update_layout(title=f"{info['host']}: {info['cpu_model']}", height=320)
    return fig


EXPERIMENTS = [
    Experiment(
        name="hardware",
        chapter="00",
        help="theoretical peaks per dtype from measured clock x cores x FLOP/cycle, + a GEMM probe",
        config=HardwareConfig,
        run=run_hardware,
        plot=plot_hardware,
    )
]
