"""FLOPs and bytes of the kernels chapter 01 measures, and their arithmetic intensity.

Arithmetic intensity ``I = FLOPs / bytes moved to and from main memory``. A kernel with
``I < peak / bandwidth`` (the roofline's *ridge point*) cannot reach the peak however good the
code: it waits for memory. Conventions (the same ones the roofline model of Williams, Waterman
and Patterson, CACM 2009, uses): a multiply-add is 2 FLOPs; bytes are the *compulsory* traffic,
each input read once and each output written once (caches are assumed perfect), so the
intensity is an upper bound on what the hardware sees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Work:
    """FLOPs and compulsory bytes of one kernel call."""

    name: str
    flops: float
    bytes: float
    formula: str

    @property
    def intensity(self) -> float:
        """FLOP per byte."""
        return self.flops / self.bytes if self.bytes else math.inf


def gemm_flops(m: int, n: int, k: int) -> float:
    """``C[m,n] = A[m,k] @ B[k,n]``: m*n outputs, each a k-term dot product = k multiply-adds."""
    return 2.0 * m * n * k


def gemm(m: int, n: int, k: int, itemsize: int = 4) -> Work:
    return Work(
        f"gemm {m}x{n}x{k}",
        gemm_flops(m, n, k),
        float(itemsize * (m * k + k * n + m * n)),
        "FLOPs = 2mnk; bytes = s(mk + kn + mn)",
    )


def conv2d_out(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def conv2d_flops(
    batch: int,
    c_in: int,
    h: int,
    w: int,
    c_out: int,
    kernel: int,
    stride: int = 1,
    padding: int = 0,
    groups: int = 1,
) -> float:
    """Every output element is a dot product of length ``c_in/groups * kernel^2``."""
    h_out, w_out = conv2d_out(h, kernel, stride, padding), conv2d_out(w, kernel, stride, padding)
    return 2.0 * batch * c_out * h_out * w_out * (c_in // groups) * kernel * kernel


def conv2d(
    batch: int,
    c_in: int,
    h: int,
    w: int,
    c_out: int,
    kernel: int,
    stride: int = 1,
    padding: int = 0,
    groups: int = 1,
    itemsize: int = 4,
) -> Work:
    h_out, w_out = conv2d_out(h, kernel, stride, padding), conv2d_out(w, kernel, stride, padding)
    elems = (
        batch * c_in * h * w + c_out * (c_in // groups) * kernel**2 + batch * c_out * h_out * w_out
    )
    return Work(
        f"conv2d {c_in}->{c_out} k{kernel} on {h}x{w}, batch {batch}",
        conv2d_flops(batch, c_in, h, w, c_out, kernel, stride, padding, groups),
        float(itemsize * elems),
        "FLOPs = 2 N Cout Hout Wout (Cin/groups) K^2; bytes = s(input + weight + output)",
    )


# AlexNet's second convolution (Krizhevsky et al. 2012; Caffe's bvlc_alexnet): 96 -> 256
# channels, 5x5 kernel, padding 2, two groups, on 27x27 maps. Mao 2015's "AlexNet layer 2".
ALEXNET_CONV2 = {"c_in": 96, "h": 27, "w": 27, "c_out": 256, "kernel": 5, "padding": 2, "groups": 2}


def elementwise(n: int, flops_per_element: int = 1, inputs: int = 2, itemsize: int = 4) -> Work:
    """``c = a + b`` on n elements: 1 FLOP per element, (inputs + 1 output) x s bytes."""
    return Work(
        f"elementwise add, {n} elements",
        float(flops_per_element * n),
        float(itemsize * n * (inputs + 1)),
        f"FLOPs = {flops_per_element} n; bytes = {inputs + 1} s n",
    )


# softmax over a row: max (1 compare), subtract (1), exp (counted as 1), sum (1), divide (1).
SOFTMAX_FLOPS_PER_ELEMENT = 5


def softmax(rows: int, cols: int, itemsize: int = 4) -> Work:
    n = rows * cols
    return Work(
        f"softmax {rows}x{cols}",
        float(SOFTMAX_FLOPS_PER_ELEMENT * n),
        float(2 * itemsize * n),
        "FLOPs ~ 5 n (max, subtract, exp, sum, divide); bytes = 2 s n (read once, write once)",
    )


def fft_flops(length: int, batch: int = 1) -> float:
    """The conventional count for a complex FFT, 5 N log2 N (FFTW's benchFFT 'mflops')."""
    return 5.0 * batch * length * math.log2(length)


def ridge_point(peak_gflops: float, bandwidth_gbps: float) -> float:
    """Intensity (FLOP/byte) where the memory roof meets the compute roof."""
    return peak_gflops / bandwidth_gbps


def attainable_gflops(intensity: float, peak_gflops: float, bandwidth_gbps: float) -> float:
    """The roofline: ``min(peak, bandwidth x intensity)``."""
    return min(peak_gflops, bandwidth_gbps * intensity)


def bound(intensity: float, peak_gflops: float, bandwidth_gbps: float) -> str:
    """``"memory"`` left of the ridge point, ``"compute"`` right of it."""
    return "memory" if intensity < ridge_point(peak_gflops, bandwidth_gbps) else "compute"
