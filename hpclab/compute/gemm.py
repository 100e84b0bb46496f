"""Timed GEMM, the course's yardstick (chapter 00's probe, chapter 01's sweep, benchmarks).

FLOPs of ``C[m,n] = A[m,k] @ B[k,n]``: ``2*m*n*k`` (one multiply and one add per term).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hpclab.measure.timing import Timing, time_fn

DTYPES: dict[str, torch.dtype] = {
    "fp64": torch.float64,
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
# Relative error allowed against an fp64 reference: about sqrt(k) * unit roundoff, generously.
_RTOL = {"fp64": 1e-10, "fp32": 1e-4, "bf16": 3e-2, "fp16": 1e-2}


def gemm_flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


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


def _check_against_fp64(a: torch.Tensor, b: torch.Tensor, dtype: str):
    rows = min(8, a.shape[0])
    ref = a[:rows].double() @ b.double()
    scale = ref.abs().max().item() + 1e-30

    def check(c: torch.Tensor) -> None:
        err = (c[:rows].double() - ref).abs().max().item() / scale
        if err > _RTOL[dtype]:
            raise AssertionError(f"GEMM result wrong: relative error {err:.2e} > {_RTOL[dtype]:g}")

    return check


def time_gemm(
    size: int, dtype: str = "fp32", device: str = "cpu", repeat: int = 10, warmup: int = 2
) -> GemmTiming:
    """Time a square ``size``-cubed GEMM with :func:`time_fn` (result checked against fp64)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not allowed; allowed: {', '.join(DTYPES)}")
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(size, size, generator=gen).to(device=device, dtype=DTYPES[dtype])
    b = torch.randn(size, size, generator=gen).to(device=device, dtype=DTYPES[dtype])
    out = torch.empty(size, size, device=device, dtype=DTYPES[dtype])
    timing = time_fn(
        lambda: torch.mm(a, b, out=out),
        device=device,
        warmup=warmup,
        repeat=repeat,
        check=_check_against_fp64(a, b, dtype),
    )
    return GemmTiming(size, dtype, str(device), timing)
