"""Model FLOPs utilisation, MFU (chapter 01; in the records of every training experiment).

``MFU = FLOPs per sample x samples/s / theoretical peak of the cores or GPUs used``:

- FLOPs per sample: :func:`hpclab.train.flops_per_sample` (PyTorch's ``FlopCounterMode`` over
  the forward and backward pass of one sample). They are the *model's* FLOPs: recomputation
  under activation checkpointing does not count. Counting it gives the hardware FLOPs
  utilisation (HFU) instead (Chowdhery et al. 2022, PaLM, appendix B, define both).
- the peak: :func:`hpclab.compute.device.peak_gflops`. On a CPU it is the physical cores used x
  the *measured* clock x FLOP/cycle/core (chapter 00's formula). On a GPU it is the datasheet's
  dense figure, times the number of GPUs.

A measured GEMM rate on the same cores (:func:`gemm_ceiling`) is shown beside the MFU as what
the matrix library reaches there. It is never used as the peak: measured against it, a run would
look better than it is, and the gap between the library and the hardware would vanish.
"""

from __future__ import annotations

from typing import Any

from hpclab.compute import device as dev


def mfu(flops_per_sample: float, samples_per_s: float, peak_gflops: float | None) -> float | None:
    """The fraction of the peak a training run's model FLOPs reach (None without a peak)."""
    if flops_per_sample < 0 or samples_per_s < 0:
        raise ValueError(
            f"flops_per_sample={flops_per_sample} and samples_per_s={samples_per_s} must be >= 0"
        )
    if not peak_gflops:
        return None
    return flops_per_sample * samples_per_s / (peak_gflops * 1e9)


def mfu_fields(
    flops_per_sample: float,
    samples_per_s: float,
    device: str,
    *,
    threads: int | None = None,
    devices: int = 1,
    dtype: str = "fp32",
) -> dict[str, Any]:
    """The MFU fields of a training record (chapter 01, 06).

    ``device`` is where each rank ran (``cpu`` or ``cuda:N``), ``devices`` the number of GPUs
    (or CPU ranks), ``threads`` the threads of each CPU rank: a CPU run's peak counts
    ``devices x threads`` cores, capped at the allocation's physical cores.
    """
    if device == "cpu":
        peak, basis = dev.peak_gflops("cpu", dtype, devices * threads if threads else None)
    else:
        one, basis = dev.peak_gflops(device, dtype)
        peak = one * devices if one else None
        if devices > 1 and one:
            basis = f"{devices} GPUs x {basis}"
    return {
        "flops_per_sample": flops_per_sample,
        "model_gflops": flops_per_sample * samples_per_s / 1e9,
        "peak_gflops": peak,
        "mfu": mfu(flops_per_sample, samples_per_s, peak),
        "mfu_peak": basis,
    }


def gemm_ceiling(device: str, threads: int | None = None, size: int = 512) -> dict[str, Any]:
    """A measured fp32 GEMM rate on the same device and threads, and its fraction of the peak:
    what the matrix library reaches there, shown beside the MFU (never used as its peak)."""
    from hpclab.compute.gemm import time_gemm

    with dev.torch_threads(threads if device == "cpu" else 0) as used:
        g = time_gemm(size, "fp32", device, repeat=5)
    peak, _ = dev.peak_gflops(device, "fp32", used if device == "cpu" else None)
    return {
        "gemm_size": size,
        "gemm_gflops": g.gflops,
        "gemm_fraction": g.gflops / peak if peak else None,
    }
