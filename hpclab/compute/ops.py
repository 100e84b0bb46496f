"""Experiment ``ops`` (chapter 01): random numbers, FFT, convolution and pooling, CPU vs GPU.

Mao 2015 lists the kernels deep learning of its day leaned on (RNG for RBMs, GEMM, FFT and
cuDNN convolutions for CNNs) and NVIDIA's speed-ups over MKL for each. This experiment times
the same kinds of kernels with torch on every device here:

- ``rng``: ``torch.randn`` and ``torch.rand`` into an existing fp32 buffer (samples/s);
- ``fft``: a batch of complex64 1-D FFTs of length 4096 (GFLOP/s by the 5 N log2 N convention);
- ``conv``: AlexNet's second convolution, forward (GFLOP/s), on a GPU with
  ``torch.backends.cudnn.benchmark`` off and on (Nakayama 2017's speed tips: let cuDNN try its
  algorithms once, then reuse the fastest);
- ``pool``: the 3x3, stride-2 max-pooling that follows it (GB/s: it only moves data).

With both a CPU and a GPU, each GPU record carries ``speedup_vs_cpu``. Mao 2015's
speed-ups come along as reference rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hpclab.compute import device as dev
from hpclab.compute import flops as F
from hpclab.config import ConfigError, param
from hpclab.display import figure
from hpclab.progress import Progress
from hpclab.results import Result, load_reference, make_result

OPS = ("rng", "fft", "conv", "pool")
FFT_LENGTH = 4096


@dataclass(frozen=True)
class OpsConfig(dev.DevicesConfig):
    ops: tuple = param(OPS, choices=OPS, help="kernels to time")
    elements: int = param(
        2**24, min=FFT_LENGTH, max=2**31, quick=2**21, help="numbers per RNG call / FFT batch"
    )
    batch: int = param(32, min=1, max=4096, quick=2, help="images in the AlexNet conv2 batch")
    threads: int = param(0, min=0, max=1024, help="CPU threads (0 = usable cores)")
    repeat: int = param(5, min=1, max=1000, quick=3, help="timed repeats per kernel")
    references: bool = param(True, help="add Mao 2015's GPU-vs-MKL speed-ups as reference rows")

    def check(self) -> None:
        if not self.ops:
            raise ConfigError("ops=() is empty; allowed: " + ", ".join(OPS))


def _timed(fn, device: str, repeat: int) -> Any:
    from hpclab.compute.timers import timed_auto

    return timed_auto(fn, device, repeat)


def _rng(config: OpsConfig, device: str) -> list[dict[str, Any]]:
    n = config.elements
    dev.ensure_fits(4 * n, device, f"{n} fp32 random numbers")
    buf = torch.empty(n, device=device)
    out = []
    for name, fill in (("randn", torch.randn), ("rand", torch.rand)):
        t = _timed(lambda fill=fill: fill(n, out=buf), device, config.repeat)
        out.append(
            {
                "op": "rng",
                "variant": name,
                "work": n,
                "gsamples_per_s": t.rate(n) / 1e9,
                **t.summary(),
            }
        )
    return out


def _fft(config: OpsConfig, device: str) -> list[dict[str, Any]]:
    batch = config.elements // FFT_LENGTH
    dev.ensure_fits(2 * 8 * batch * FFT_LENGTH, device, f"{batch} complex64 FFTs")
    x = torch.randn(batch, FFT_LENGTH, dtype=torch.complex64, device=device)
    y = torch.empty_like(x)
    t = _timed(lambda: torch.fft.fft(x, out=y), device, config.repeat)
    work = F.fft_flops(FFT_LENGTH, batch)
    return [
        {
            "op": "fft",
            "variant": f"c2c length {FFT_LENGTH}",
            "work": work,
            "gflops": t.rate(work) / 1e9,
            **t.summary(),
        }
    ]


def _conv_pool(config: OpsConfig, device: str, ops: tuple) -> list[dict[str, Any]]:
    p = F.ALEXNET_CONV2
    work = F.conv2d(
        config.batch,
        p["c_in"],
        p["h"],
        p["w"],
        p["c_out"],
        p["kernel"],
        1,
        p["padding"],
        p["groups"],
    )
    dev.ensure_fits(2 * work.bytes, device, f"AlexNet conv2 at batch {config.batch}")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(config.batch, p["c_in"], p["h"], p["w"], generator=gen).to(device)
    w = torch.randn(p["c_out"], p["c_in"] // p["groups"], 5, 5, generator=gen).to(device)
    conv = torch.nn.functional.conv2d
    out = []
    if "conv" in ops:
        modes = (False, True) if device != "cpu" else (None,)
        for mode in modes:
            old = torch.backends.cudnn.benchmark
            if mode is not None:
                torch.backends.cudnn.benchmark = mode
            try:
                t = _timed(lambda: conv(x, w, padding=2, groups=2), device, config.repeat)
            finally:
                torch.backends.cudnn.benchmark = old
            variant = "forward" if mode is None else f"forward, cudnn.benchmark={mode}"
            out.append(
                {
                    "op": "conv",
                    "variant": variant,
                    "cudnn_benchmark": mode,
                    "work": work.flops,
                    "gflops": t.rate(work.flops) / 1e9,
                    **t.summary(),
                }
            )
    if "pool" in ops:
        y = conv(x, w, padding=2, groups=2)  # [N, 256, 27, 27] -> pooled [N, 256, 13, 13]
        pool = torch.nn.functional.max_pool2d
        t = _timed(lambda: pool(y, 3, 2), device, config.repeat)
        moved = (y.numel() + y.numel() * 13 * 13 / (27 * 27)) * y.element_size()
        out.append(
            {
                "op": "pool",
                "variant": "max 3x3 stride 2",
                "work": moved,
                "gbps": t.rate(moved) / 1e9,
                **t.summary(),
            }
        )
    return out


def run_ops(config: OpsConfig, progress: Progress) -> Result:
    devices = config.devices()
    records: list[dict[str, Any]] = []
    steps = [
        (d, op)
        for d in devices
        for op in ("rng", "fft", "conv")
        if op in config.ops or (op == "conv" and "pool" in config.ops)
    ]
    for i, (device, op) in enumerate(steps):
        progress.update(i, len(steps), f"{op} on {device}")
        with dev.torch_threads(config.threads if device == "cpu" else 0) as used:
            if op == "rng":
                rows = _rng(config, device)
            elif op == "fft":
                rows = _fft(config, device)
            else:
                rows = _conv_pool(config, device, config.ops)
        for r in rows:
            records.append({"device": device, "threads": used if device == "cpu" else None, **r})
    _speedups(records)
    if config.references:
        records += reference_records()
    progress.update(len(steps), len(steps), "done")
    return make_result("ops", config, records)


def _speedups(records: list[dict[str, Any]]) -> None:
    """GPU rows get ``speedup_vs_cpu`` = CPU seconds / GPU seconds for the same op."""
    cpu = {
        (r["op"], r["variant"].split(",")[0]): r["seconds"] for r in records if r["device"] == "cpu"
    }
    for r in records:
        key = (r["op"], r["variant"].split(",")[0])
        if r["device"] != "cpu" and key in cpu:
            r["speedup_vs_cpu"] = cpu[key] / r["seconds"]


def reference_records() -> list[dict[str, Any]]:
    rows = load_reference("mao2015_gpu_vs_mkl").records
    return [{**r, "device": r["gpu"], "speedup_vs_cpu": r["speedup"]} for r in rows]


@figure
def plot_ops(result: Result):
    """Left: seconds per call per kernel and device (log). Right: GPU/CPU speed-ups, live
    ones beside Mao 2015's."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("time per call", "GPU speed-up over CPU"))
    live = [r for r in result.records if r.get("tier") == "live"]
    for device in dict.fromkeys(r["device"] for r in live):
        rows = [r for r in live if r["device"] == device]
        fig.add_bar(
            x=[f"{r['op']}: {r['variant']}" for r in rows],
            y=[r["seconds"] for r in rows],
            name=device,
            row=1,
            col=1,
        )
    fast = [r for r in result.records if r.get("speedup_vs_cpu")]
    fig.add_bar(
        x=[f"{r['op']} ({'live' if r.get('tier') == 'live' else 'Mao 2015'})" for r in fast],
        y=[r["speedup_vs_cpu"] for r in fast],
        marker={"color": ["#1f77b4" if r.get("tier") == "live" else "#aaa" for r in fast]},
        hovertext=[r.get("what") or r["variant"] for r in fast],
        name="speed-up (grey: reference, Mao 2015)",
        row=1,
        col=2,
    )
    fig.update_yaxes(type="log", title_text="seconds", row=1, col=1)
    fig.update_yaxes(type="log", title_text="x faster than the CPU", row=1, col=2)
    fig.update_layout(height=440, barmode="group", legend={"orientation": "h", "y": -0.35})
    return fig
