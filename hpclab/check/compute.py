"""Checks for chapter 01's exercises (GPU vs CPU): FLOP counts, fraction of peak, arithmetic
intensity and its roof (the timer and the crossover size: :mod:`hpclab.check.timing`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpclab.check import CheckResult, as_number, exercise_check, failed, formula_check, near, passed
from hpclab.check.cases import case_by_case, slips_near
from hpclab.check.timing import crossover, timer  # noqa: F401 - the notebook's check.timer
from hpclab.compute import flops as F


@exercise_check
def gemm_flops(answer: Any, m: int, n: int, k: int) -> CheckResult:
    """(a) FLOPs of ``C[m,n] = A[m,k] @ B[k,n]``."""
    value = as_number(answer, "gemm_flops")
    if isinstance(value, CheckResult):
        return value
    want = F.gemm_flops(m, n, k)
    if value == want:
        return passed(f"2 x {m} x {n} x {k} = {want:.0f} FLOPs.")
    ratio = value / want
    hints = slips_near(
        ratio,
        [
            (0.5, "you counted multiply-adds; each is 2 FLOPs (a multiply and an add)"),
            (2.0, "you counted 4 FLOPs per multiply-add"),
        ],
    )
    if value in (2.0 * n**3, 2.0 * m**3, 2.0 * k**3) and len({m, n, k}) > 1:
        hints.append(
            "the matrices are not square: every output (m x n of them) is a dot product of length k"
        )
    if value == 2.0 * m * n or value == 2.0 * m * k or value == 2.0 * k * n:
        hints.append("that is one product per matrix element; each output needs k of them")
    return failed("; ".join(hints or [f"it is {ratio:.3g}x the expected count"]) + ".")


_CONV_CASES = (  # (batch, c_in, h, w, c_out, kernel, stride, padding, groups)
    (8, 96, 27, 27, 256, 5, 1, 2, 2),  # AlexNet's second convolution
    (2, 3, 32, 32, 16, 3, 1, 1, 1),
    (4, 64, 56, 56, 128, 3, 2, 1, 4),
    (1, 32, 14, 14, 32, 3, 1, 0, 32),  # depthwise
    (2, 8, 20, 12, 6, 3, 1, 1, 2),  # not square
)


_CONV_MISTAKES = (
    (lambda *c: F.conv2d_flops(*c) / 2, "you counted multiply-adds; each is 2 FLOPs"),
    (
        lambda b, ci, h, w, co, k, s, p, g: F.conv2d_flops(b, ci, h, w, co, k, s, p, 1),
        "each filter sees only c_in / groups input channels: divide by groups",
    ),
    (
        lambda b, ci, h, w, co, k, s, p, g: F.conv2d_flops(b, ci, h, w, co, k, s, p, 1) / 2,
        "two slips: each filter sees c_in / groups input channels, and a multiply-add is 2 FLOPs",
    ),
    (lambda *c: F.conv2d_flops(*c) / c[0], "that is one image; multiply by the batch"),
    (
        lambda b, ci, h, w, co, k, s, p, g: F.conv2d_flops(b, ci, h, w, co, k, s, 0, g),
        "padding widens the input before the kernel slides: (h + 2 padding - kernel) // stride + 1",
    ),
    (
        lambda b, ci, h, w, co, k, s, p, g: F.conv2d_flops(b, ci, h, w, co, k, 1, p, g),
        "the stride skips positions: (h + 2 padding - kernel) // stride + 1 outputs per side",
    ),
    (
        lambda b, ci, h, w, co, k, s, p, g: 2.0 * b * co * h * w * (ci // g) * k * k,
        "count the output pixels (h_out x w_out), not the input's",
    ),
)


@exercise_check
def conv_flops(fn: Any) -> CheckResult:
    """(a) ``fn(batch, c_in, h, w, c_out, kernel, stride, padding, groups)``: FLOPs of a conv2d
    forward pass (multiply-add = 2 FLOPs; no bias), tried on several shapes and group counts."""
    if not callable(fn):
        return failed(
            "pass your function my_conv_flops itself (not a number): it is tried on several "
            "shapes, strides and group counts"
        )
    b, ci, h, _, co, k, s, p, g = _CONV_CASES[0]
    ho = F.conv2d_out(h, k, s, p)
    first = F.conv2d_flops(*_CONV_CASES[0])

    def differs(case: tuple, got: float, want: float) -> str:
        return (
            f"my_conv_flops{case} (batch, c_in, h, w, c_out, kernel, stride, padding, groups) "
            f"returns {got:.6g}; expected {want:.6g} ({got / want:.3g}x)."
        )

    return formula_check(
        fn, _CONV_CASES, "my_conv_flops", F.conv2d_flops, _CONV_MISTAKES,
        f"AlexNet's conv2: 2 x {b} x {co} x {ho}x{ho} x {ci // g} x {k}x{k} = {first:.4g} "
        f"FLOPs, and the other {len(_CONV_CASES) - 1} shapes match too.",
        differs, tol=1e-6,
    )  # fmt: skip


@exercise_check
def peak_fraction(
    fn: Callable[[float, dict[str, Any]], float],
    gflops: float,
    peak_gflops: float,
    info: dict[str, Any] | None = None,
) -> CheckResult:
    """(b) ``fn(gflops, info)`` -> the fraction of the fp32 peak (0.85, not 85) that ``gflops``
    is on the allocation ``info`` describes; tried on this GEMM and on allocations whose usable
    cores and measured clock differ from the node's and the label's."""
    from hpclab.check.welcome import allocations
    from hpclab.measure.sysinfo import system_info

    if not callable(fn):
        return failed("pass your function itself, e.g. check.peak_fraction(fraction_of_peak, ...)")
    *mine, o1, o2, o3 = allocations(info or system_info())
    cases = [(gflops, m, gflops / peak_gflops) for m in mine]
    for a, f in zip((o1, o2, o3), (0.35, 0.8, 0.55), strict=True):
        cases.append((f * a["cores_usable"] * a["clock_ghz"] * a["flops_per_cycle"]["fp32"], a, f))
    name = getattr(fn, "__name__", "your function")
    wrong = case_by_case(
        lambda g, case, want: fn(g, case),
        [(f"{g:.1f} GFLOP/s on {c['cores_usable']} usable of {c['cores_node']} cores", (g, c, w))
         for g, c, w in cases],
        f"{name}(gflops, info)",
        _fraction_slip,
    )  # fmt: skip
    if wrong is not None:
        return wrong
    return passed(
        f"{gflops:.1f} / {peak_gflops:.1f} GFLOP/s = {gflops / peak_gflops:.1%} of peak, and "
        "right on allocations where usable and node cores, measured and labelled clocks differ."
    )


def _fraction_slip(value: float, gflops: float, info: dict[str, Any], want: float) -> str | None:
    """None when ``value`` is ``want`` within 0.5%; else the slips it shows on ``info``."""
    if near(value / want, 1.0, 0.005):
        return None
    nominal, usable, node = info.get("clock_ghz_nominal"), info["cores_usable"], info["cores_node"]
    slips = [
        (100.0, "give a fraction (0.85), not a percentage (85)"),
        (1.0 / want**2, "you divided the peak by the measurement; it is measured / peak"),
        (1e9, "mixed units (FLOP/s): use GFLOP/s for both"),
        (1e-9, "mixed units (FLOP/s vs GFLOP/s): use GFLOP/s for both"),
        (1e3, "mixed units (MFLOP/s): use GFLOP/s for both"),
    ]
    if node != usable:
        slips.append(
            (
                usable / node,
                f"you counted all {node} cores of the node; the peak counts the {usable} your "
                "allocation can use",
            )
        )
    if nominal and not near(nominal / info["clock_ghz"], 1.0, 0.03):
        slips.append(
            (
                info["clock_ghz"] / nominal,
                f"you used the label's clock ({nominal:.2f} GHz); the peak uses the measured "
                f"{info['clock_ghz']:.2f} GHz",
            )
        )
    hints = slips_near(value / want, slips)
    if value > 1.0 and not hints:
        hints.append("a measurement cannot exceed the peak: check the units (GFLOP/s both?)")
    hint = "; ".join(hints or [f"expected {want:.3f}, got {value:.3g}"])
    return f"{hint} (peak: usable cores x measured clock x fp32 FLOP/cycle)."


@exercise_check
def add_intensity(answer: Any, itemsize: int = 4) -> CheckResult:
    """(c) FLOP/byte of ``c = a + b`` with elements of ``itemsize`` bytes."""
    value = as_number(answer, "intensity")
    if isinstance(value, CheckResult):
        return value
    want = 1.0 / (3 * itemsize)
    if near(value / want, 1.0, 0.01):
        return passed(f"1 FLOP per element / ({3} x {itemsize} bytes) = {want:.4f} FLOP/byte.")
    hints = slips_near(
        value / want,
        [
            (1.5, "count the write of c too: 2 reads + 1 write per element"),
            (
                itemsize,
                f"intensity is per byte, not per element: multiply elements by {itemsize} bytes",
            ),
            (1.0 / want**2, "it is FLOPs / bytes, not bytes / FLOPs"),
        ],
    )
    return failed("; ".join(hints or [f"expected {want:.4f} FLOP/byte"]) + ".")


@exercise_check
def roof(answer: Any, intensity: float, peak_gflops: float, bandwidth_gbps: float) -> CheckResult:
    """(c) which roof bounds a kernel: ``"memory"`` or ``"compute"``."""
    text = str(answer).strip().lower()
    if text not in ("memory", "compute"):
        return failed(f"answer 'memory' or 'compute', got {answer!r}")
    ridge = F.ridge_point(peak_gflops, bandwidth_gbps)
    want = F.bound(intensity, peak_gflops, bandwidth_gbps)
    why = (
        f"the ridge point is {peak_gflops:.0f} / {bandwidth_gbps:.0f} = {ridge:.1f} FLOP/byte "
        f"and the kernel has {intensity:.3g}"
    )
    if text == want:
        return passed(f"{want}-bound: {why}.")
    return failed(
        f"{why}: left of the ridge the memory roof is lower, right of it the compute roof is."
    )
