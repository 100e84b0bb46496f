"""Timed GEMM, the course's yardstick (chapter 00's probe, chapter 01's sweep, benchmarks).

FLOPs of ``C[m,n] = A[m,k] @ B[k,n]``: ``2*m*n*k`` (one multiply and one add per term).
Every timing checks the result against an fp64 product first (a fast wrong answer is not a
result), and goes through :func:`hpclab.measure.timing.time_fn` (warm-up, synchronise, CUDA
events on a GPU, repeats with spread).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from hpclab.compute.flops import gemm_flops
from hpclab.measure.timing import Timing, calls_for, time_fn

__all__ = ["DTYPES", "GemmTiming", "MatmulTiming", "gemm_flops", "time_gemm", "time_matmul"]

DTYPES: dict[str, torch.dtype] = {
    "fp64": torch.float64,
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
_TORCH_DTYPE = {**DTYPES, "tf32": torch.float32}
# Relative error allowed against an fp64 reference: about sqrt(k) * unit roundoff, generously.
# TF32 keeps 10 mantissa bits (like fp16) but accumulates in fp32.
_RTOL = {"fp64": 1e-10, "fp32": 1e-4, "tf32": 1e-2, "bf16": 3e-2, "fp16": 1e-2}


@dataclass(frozen=True)
class GemmTiming:
    size: int
    dtype: str
    device: str
    timing: Timing

    @property
    def gflops(self) -> float:
        """At the median sample."""
        return self.timing.rate(gemm_flops(self.size, self.size, self.size)) / 1e9

    @property
    def gflops_best(self) -> float:
        return self.timing.best_rate(gemm_flops(self.size, self.size, self.size)) / 1e9


@dataclass(frozen=True)
class MatmulTiming:
    """A timed ``m x k`` by ``k x n`` product (chapter 01's shape sweep)."""

    m: int
    n: int
    k: int
    dtype: str
    device: str
    timing: Timing

    @property
    def flops(self) -> float:
        return gemm_flops(self.m, self.n, self.k)

    @property
    def gflops(self) -> float:
        return self.timing.rate(self.flops) / 1e9

    @property
    def gflops_best(self) -> float:
        return self.timing.best_rate(self.flops) / 1e9


def _check_against_fp64(a: torch.Tensor, b: torch.Tensor, dtype: str):
    rows = min(8, a.shape[0])
    ref = a[:rows].double() @ b.double()
    scale = ref.abs().max().item() + 1e-30

    def check(c: torch.Tensor) -> None:
        err = (c[:rows].double() - ref).abs().max().item() / scale
        if err > _RTOL[dtype]:
            raise AssertionError(f"GEMM result wrong: relative error {err:.2e} > {_RTOL[dtype]:g}")

    return check


def _math_mode(dtype: str, device: str):
    """On a GPU, ``fp32`` means true fp32 and ``tf32`` TensorFloat-32: set it, restore after."""
    if not str(device).startswith("cuda"):
        return contextlib.nullcontext()
    from hpclab.compute.device import tf32_mode

    return tf32_mode(dtype == "tf32")


def time_matmul(
    m: int,
    n: int,
    k: int,
    dtype: str = "fp32",
    device: str = "cpu",
    repeat: int = 10,
    warmup: int = 2,
    max_time_s: float = 60.0,
    inner: int | None = None,
) -> MatmulTiming:
    """Time ``torch.mm`` of an ``m x k`` and a ``k x n`` matrix, result checked against fp64.

    ``dtype`` is ``fp64 fp32 tf32 bf16 fp16``; inputs are standard normal (seeded), made on the
    CPU and moved, so every device multiplies the same numbers. ``inner`` calls per timed
    sample (default: enough to fill ~2 ms, so microsecond-sized GEMMs are not clock noise).
    """
    if dtype not in _TORCH_DTYPE:
        raise ValueError(f"dtype={dtype!r} is not allowed; allowed: {', '.join(_TORCH_DTYPE)}")
    gen = torch.Generator(device="cpu").manual_seed(0)
    tdt = _TORCH_DTYPE[dtype]
    a = torch.randn(m, k, generator=gen).to(device=device, dtype=tdt)
    b = torch.randn(k, n, generator=gen).to(device=device, dtype=tdt)
    out = torch.empty(m, n, device=device, dtype=tdt)
    with _math_mode(dtype, device):
        if inner is None and str(device) == "cpu" and gemm_flops(m, n, k) > 2e8:
            inner = 1  # >= ~1 ms on any CPU: one call per sample is long enough
        elif inner is None:
            torch.mm(a, b, out=out)  # the first call pays for setup: do not count it
            inner = calls_for(lambda: torch.mm(a, b, out=out), 0.002, device)
        timing = time_fn(
            lambda: torch.mm(a, b, out=out),
            inner=inner,
            device=device,
            warmup=warmup,
            repeat=repeat,
            max_time_s=max_time_s,
            check=_check_against_fp64(a, b, dtype),
        )
    return MatmulTiming(m, n, k, dtype, str(device), timing)


def time_gemm(
    size: int, dtype: str = "fp32", device: str = "cpu", repeat: int = 10, warmup: int = 2
) -> GemmTiming:
    """Time a square ``size``-cubed GEMM with :func:`time_fn` (result checked against fp64)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not allowed; allowed: {', '.join(DTYPES)}")
    t = time_matmul(size, size, size, dtype, device, repeat=repeat, warmup=warmup, inner=1)
    return GemmTiming(size, dtype, str(device), t.timing)
