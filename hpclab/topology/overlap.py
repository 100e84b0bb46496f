"""Experiment ``overlap`` (chapter 02): hide the batch copy behind the previous step's compute.

A training loop copies batch ``i`` to the GPU, then computes on it. Done in that order, each
step costs ``copy + compute``. With the batch in pinned memory, a second CUDA stream can copy
batch ``i + 1`` while the GPU computes on batch ``i``: after the first copy, a step costs
``max(copy, compute)``. For ``steps`` steps (the pipeline model; :func:`pipelined_total`):

    serial     = steps x (copy + compute)
    overlapped = copy + (steps - 1) x max(copy, compute) + compute

On a GPU both loops run and CUDA events record when each copy and each compute started and
ended (the timeline). Without a GPU (pinned memory and streams need one) the compute is
measured on this CPU, the copy is ``batch / link_gbps`` and the timeline is the model's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hpclab.compute import device as dev
from hpclab.config import Config, param
from hpclab.display import figure
from hpclab.dist.placement import DEVICES
from hpclab.measure.timing import time_fn
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.topology import copies


@dataclass(frozen=True)
class OverlapConfig(Config):
    device: str = param("auto", choices=DEVICES, help="auto (GPU 0 if any, else cpu), cpu or cuda")
    steps: int = param(8, min=2, max=1000, quick=4, help="training steps")
    batch_mib: int = param(64, min=1, max=8192, help="MiB copied per step")
    compute_n: int = param(2048, min=64, max=16384, quick=256, help="n of the n x n matmul")
    matmuls: int = param(4, min=1, max=100, help="matmuls per step (the compute)")
    link_gbps: float = param(
        12.0,
        min=0.1,
        max=1000.0,
        help="without a GPU: the host-to-device GB/s the model assumes (PCIe 3.0 x16 ~ 12)",
    )


def serial_total(copy_s: float, compute_s: float, steps: int) -> float:
    return steps * (copy_s + compute_s)


def pipelined_total(copy_s: float, compute_s: float, steps: int) -> float:
    """The first copy cannot hide; each later copy overlaps the previous step's compute."""
    return copy_s + (steps - 1) * max(copy_s, compute_s) + compute_s


def schedule(copy_s: float, compute_s: float, steps: int, overlapped: bool) -> list[dict]:
    """Model timeline: one event per copy and compute with ``start_s``/``end_s``."""
    events, copy_end, compute_end = [], 0.0, 0.0
    for i in range(steps):
        start = copy_end if overlapped else compute_end
        if overlapped and i > 1:  # two buffers: copy i+1 waits until step i-1 freed its buffer
            start = max(start, events[-3]["end_s"])
        copy_end = start + copy_s
        events.append({"step": i, "op": "copy", "start_s": start, "end_s": copy_end})
        begin = max(copy_end, compute_end)
        compute_end = begin + compute_s
        events.append({"step": i, "op": "compute", "start_s": begin, "end_s": compute_end})
    return events


def _gpu_loop(config: OverlapConfig, device: str, overlapped: bool) -> list[dict[str, Any]]:
    """Run the loop on a GPU; returns the CUDA-event timeline (seconds from the start)."""
    n_bytes = config.batch_mib * 2**20
    host = [copies._fill(torch.empty(n_bytes, dtype=torch.uint8)) for _ in range(2)]
    if overlapped:
        host = [h.pin_memory() for h in host]
    buf = [torch.empty(n_bytes, dtype=torch.uint8, device=device) for _ in range(2)]
    a = torch.randn(config.compute_n, config.compute_n, device=device)
    main = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device) if overlapped else main
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    t0 = ev()
    marks = []
    copied = [ev(), ev()]
    torch.cuda.synchronize(device)
    t0.record(main)

    def issue_copy(i: int) -> None:
        side.wait_stream(main) if i >= 2 else None  # the buffer of step i-2 is free again
        s, e = ev(), ev()
        s.record(side)
        with torch.cuda.stream(side):
            buf[i % 2].copy_(host[i % 2], non_blocking=overlapped)
        e.record(side)
        copied[i % 2] = e
        marks.append((i, "copy", s, e))

    issue_copy(0)
    for i in range(config.steps):
        if overlapped and i + 1 < config.steps:
            issue_copy(i + 1)
        main.wait_event(copied[i % 2])
        s, e = ev(), ev()
        s.record(main)
        x = a
        for _ in range(config.matmuls):
            x = torch.mm(x, a) / config.compute_n
        buf[i % 2].float().mean()  # use the batch
        e.record(main)
        marks.append((i, "compute", s, e))
        if not overlapped and i + 1 < config.steps:
            issue_copy(i + 1)
    torch.cuda.synchronize(device)
    return [
        {
            "step": i,
            "op": op,
            "start_s": t0.elapsed_time(s) / 1e3,
            "end_s": t0.elapsed_time(e) / 1e3,
        }
        for i, op, s, e in marks
    ]


def run_overlap(config: OverlapConfig, progress: Progress) -> Result:
    from hpclab.topology.host_copy import resolve

    device = resolve(config.device)
    n_bytes = config.batch_mib * 2**20
    dev.ensure_fits(3 * n_bytes, "cpu", f"{config.batch_mib} MiB batches")
    if device != "cpu":
        records, copy_s, compute_s = _on_the_gpu(config, device, progress)
        note = ""
    else:
        records, copy_s, compute_s, note = _cpu_stand_in(config, n_bytes, progress)
    for mode, fn in (("serial", serial_total), ("overlapped", pipelined_total)):
        records.append(
            {
                "tier": "model",
                "mode": mode,
                "record": "total",
                "seconds": fn(copy_s, compute_s, config.steps),
                "copy_s": copy_s,
                "compute_s": compute_s,
                "note": note,
            }
        )
    progress.update(3, 3, "done")
    return make_result("overlap", config, records)


def _on_the_gpu(
    config: OverlapConfig, device: str, progress: Progress
) -> tuple[list[dict[str, Any]], float, float]:
    """Both loops timed on the GPU, each after a warm-up run (allocations, kernels): their
    events and totals, and the serial loop's mean copy and compute."""
    records: list[dict[str, Any]] = []
    for k, mode in enumerate(("serial", "overlapped")):
        progress.update(k, 3, f"{mode} loop on {device}")
        _gpu_loop(config, device, mode == "overlapped")  # warm-up: allocations, kernels
        events = _gpu_loop(config, device, mode == "overlapped")
        records += [{"tier": "live", "mode": mode, "record": "event", **e} for e in events]
        total = max(e["end_s"] for e in events)
        records.append(
            {"tier": "live", "mode": mode, "record": "total", "seconds": total, "device": device}
        )
    return records, _mean(records, "copy", "serial"), _mean(records, "compute", "serial")


def _cpu_stand_in(
    config: OverlapConfig, n_bytes: int, progress: Progress
) -> tuple[list[dict[str, Any]], float, float, str]:
    """No PCIe link to time here: the copy is the model's (bytes / link_gbps), the compute is
    measured on this CPU, and both loops are scheduled from the two. Also why pinned memory is
    or is not available here."""
    _, note = copies.pinned_available()
    copy_s = n_bytes / (config.link_gbps * 1e9)
    progress.update(1, 3, "timing one compute")
    with dev.torch_threads(1):  # one thread: steady on a shared node
        # compute_n is a GPU's matmul: on one CPU thread it takes ~1000x longer and the
        # copies would be slivers beside it. Size the CPU's matmul so one step computes
        # about as long as the modelled copy: both show, and overlap hides the most.
        n, compute_s = 32, _compute_s(32, config.matmuls)
        while compute_s < copy_s * 0.7 and n < 4096:
            n = (int(n * 1.26) + 15) // 16 * 16  # each step about doubles the time
            compute_s = _compute_s(n, config.matmuls)
    records: list[dict[str, Any]] = [
        {"tier": "model", "record": "part", "op": "copy", "seconds": copy_s},
        {"tier": "live", "record": "part", "op": "compute", "seconds": compute_s, "n": n},
    ]
    for mode in ("serial", "overlapped"):
        events = schedule(copy_s, compute_s, config.steps, mode == "overlapped")
        records += [{"tier": "model", "mode": mode, "record": "event", **e} for e in events]
    return records, copy_s, compute_s, note


def _compute_s(n: int, matmuls: int) -> float:
    """Median seconds of ``matmuls`` chained n x n matmuls on this CPU."""
    a = torch.randn(n, n)

    def compute() -> torch.Tensor:
        x = a
        for _ in range(matmuls):
            x = torch.mm(x, a) / n
        return x

    return time_fn(compute, warmup=1, repeat=3).median_s


def _mean(records: list[dict[str, Any]], op: str, mode: str) -> float:
    xs = [r["end_s"] - r["start_s"] for r in records if r.get("op") == op and r.get("mode") == mode]
    return sum(xs) / len(xs)


@figure
def plot_overlap(result: Result):
    """Timeline: a bar per copy (blue) and compute (orange), one row per loop."""
    import plotly.graph_objects as go

    from hpclab.timeline import add_spans

    fig = go.Figure()
    events = [r for r in result.records if r.get("record") == "event"]
    for op, color in (("copy", "#1f77b4"), ("compute", "#ff7f0e")):
        rows = [e for e in events if e["op"] == op]
        add_spans(
            fig,
            [f"{e['mode']} ({e['tier']}) {op}" for e in rows],
            [e["start_s"] * 1e3 for e in rows],
            [(e["end_s"] - e["start_s"]) * 1e3 for e in rows],
            name=op,
            color=color,
            hovertext=[f"step {e['step']}" for e in rows],
        )
    # Top to bottom: serial copy, serial compute, overlapped copy, overlapped compute.
    modes = dict.fromkeys((e["mode"], e["tier"]) for e in events)
    order = [f"{m} ({t}) {op}" for m, t in modes for op in ("copy", "compute")]
    fig.update_yaxes(categoryorder="array", categoryarray=order[::-1])
    part = next((r for r in result.records if r.get("op") == "compute" and "n" in r), None)
    title = "Copy/compute timeline: serial vs overlapped (ms)"
    if part is not None:  # no GPU: say what was modelled and how the compute was sized
        cfg = result.config
        title += (
            f"<br><sup>no GPU: each copy modelled ({cfg['batch_mib']} MiB at "
            f"{cfg['link_gbps']:g} GB/s); each compute measured, {cfg['matmuls']} matmuls of "
            f"{part['n']}x{part['n']} on one core, sized to last as long</sup>"
        )
    fig.update_layout(
        title=title,
        xaxis={"title": "ms since the loop started"},
        barmode="overlay",
        height=360,
    )
    return fig
