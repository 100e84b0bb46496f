"""Checks for chapter 01's exercises (GPU vs CPU): FLOP counts, fraction of peak, arithmetic
intensity and its roof, an honest timer, and the CPU/GPU crossover size."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hpclab.check import CheckResult, as_number, exercise_check, failed, mistake, near, passed
from hpclab.compute import flops as F


def _hints(ratio: float, table: list[tuple[float, str]], tol: float = 0.02) -> list[str]:
    return [text for factor, text in table if near(ratio, factor, tol)]


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
    hints = _hints(
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


def _out(size: int, k: int, s: int, p: int) -> int:
    return F.conv2d_out(size, k, s, p)


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
    got = []
    for case in _CONV_CASES:
        try:
            value = fn(*case)
        except Exception as err:  # noqa: BLE001 - report, don't raise, in a check
            return failed(f"my_conv_flops{case} raised {type(err).__name__}: {err}")
        num = as_number(value, f"my_conv_flops{case}")
        if isinstance(num, CheckResult):
            return num
        got.append(num)
    want = [F.conv2d_flops(*c) for c in _CONV_CASES]
    if all(near(g / w, 1.0, 1e-6) for g, w in zip(got, want, strict=True)):
        b, ci, h, _, co, k, s, p, g = _CONV_CASES[0]
        ho = _out(h, k, s, p)
        return passed(
            f"AlexNet's conv2: 2 x {b} x {co} x {ho}x{ho} x {ci // g} x {k}x{k} = {want[0]:.4g} "
            f"FLOPs, and the other {len(_CONV_CASES) - 1} shapes match too."
        )
    advice = mistake(got, list(_CONV_CASES), _CONV_MISTAKES, tol=1e-6)
    if advice:
        return failed(advice + ".")
    k = next(
        i for i, (g, w) in enumerate(zip(got, want, strict=True)) if not near(g / w, 1.0, 1e-6)
    )
    return failed(
        f"my_conv_flops{_CONV_CASES[k]} (batch, c_in, h, w, c_out, kernel, stride, padding, "
        f"groups) returns {got[k]:.6g}; expected {want[k]:.6g} ({got[k] / want[k]:.3g}x)."
    )


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
    import copy

    from hpclab.check.welcome import allocations
    from hpclab.measure.sysinfo import system_info

    if not callable(fn):
        return failed("pass your function itself, e.g. check.peak_fraction(fraction_of_peak, ...)")
    *mine, o1, o2, o3 = allocations(info or system_info())
    cases = [(gflops, m, gflops / peak_gflops) for m in mine]
    for a, f in zip((o1, o2, o3), (0.35, 0.8, 0.55), strict=True):
        cases.append((f * a["cores_usable"] * a["clock_ghz"] * a["flops_per_cycle"]["fp32"], a, f))
    name = getattr(fn, "__name__", "your function")
    for g, case, want in cases:
        where = f"{g:.1f} GFLOP/s on {case['cores_usable']} usable of {case['cores_node']} cores"
        try:
            value = as_number(fn(g, copy.deepcopy(case)), f"{name}(gflops, info)")
        except Exception as exc:  # a student's function may raise anything
            return failed(f"{name}(gflops, info) raised {exc!r} for {where}")
        if isinstance(value, CheckResult):
            return value
        if near(value / want, 1.0, 0.005):
            continue
        ratio = value / want
        nominal = case.get("clock_ghz_nominal")
        slips = [
            (100.0, "give a fraction (0.85), not a percentage (85)"),
            (1.0 / want**2, "you divided the peak by the measurement; it is measured / peak"),
            (1e9, "mixed units (FLOP/s): use GFLOP/s for both"),
            (1e-9, "mixed units (FLOP/s vs GFLOP/s): use GFLOP/s for both"),
            (1e3, "mixed units (MFLOP/s): use GFLOP/s for both"),
        ]
        if case["cores_node"] != case["cores_usable"]:
            slips.append(
                (
                    case["cores_usable"] / case["cores_node"],
                    f"you counted all {case['cores_node']} cores of the node; the peak counts "
                    f"the {case['cores_usable']} your allocation can use",
                )
            )
        if nominal and not near(nominal / case["clock_ghz"], 1.0, 0.03):
            slips.append(
                (
                    case["clock_ghz"] / nominal,
                    f"you used the label's clock ({nominal:.2f} GHz); the peak uses the "
                    f"measured {case['clock_ghz']:.2f} GHz",
                )
            )
        hints = _hints(ratio, slips)
        if value > 1.0 and not hints:
            hints.append("a measurement cannot exceed the peak: check the units (GFLOP/s both?)")
        hint = "; ".join(hints or [f"expected {want:.3f}, got {value:.3g}"])
        return failed(f"{where} (peak: usable cores x measured clock x fp32 FLOP/cycle): {hint}.")
    return passed(
        f"{gflops:.1f} / {peak_gflops:.1f} GFLOP/s = {gflops / peak_gflops:.1%} of peak, and "
        "right on allocations where usable and node cores, measured and labelled clocks differ."
    )


@exercise_check
def add_intensity(answer: Any, itemsize: int = 4) -> CheckResult:
    """(c) FLOP/byte of ``c = a + b`` with elements of ``itemsize`` bytes."""
    value = as_number(answer, "intensity")
    if isinstance(value, CheckResult):
        return value
    want = 1.0 / (3 * itemsize)
    if near(value / want, 1.0, 0.01):
        return passed(f"1 FLOP per element / ({3} x {itemsize} bytes) = {want:.4f} FLOP/byte.")
    hints = _hints(
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


class _Workload:
    """A callable whose first call is slow (lazy setup) and whose later calls take ``dt``."""

    def __init__(self, dt: float, device: str, first: float = 0.06) -> None:
        self.dt, self.first, self.device, self.calls = dt, first, device, 0
        if device.startswith("cuda"):
            import torch

            # calibrate torch.cuda._sleep (a spin kernel): cycles per second on this GPU
            torch.cuda._sleep(1000)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            torch.cuda._sleep(10_000_000)
            torch.cuda.synchronize()
            self.cycles_per_s = 10_000_000 / (time.perf_counter() - t0)

    def __call__(self) -> None:
        self.calls += 1
        if self.calls == 1:
            time.sleep(self.first)  # like a first CUDA call, a cuDNN search or a lazy import
        if self.device.startswith("cuda"):
            import torch

            torch.cuda._sleep(int(self.dt * self.cycles_per_s))  # returns at once: async
        else:
            time.sleep(self.dt)


@exercise_check
def timer(
    my_timer: Callable[..., float], device: str | None = None, dt: float = 0.004
) -> CheckResult:
    """(d) ``my_timer(fn, device=..., warmup=2, repeat=10) -> seconds per call`` must agree with
    :func:`hpclab.measure.timing.time_fn` on a workload whose first call is slow and which, on a
    GPU, runs asynchronously. By default it is tried on the CPU and, where there is one, on the
    GPU too: on a CPU alone a timer that never synchronizes measures the same as one that does."""
    if device is not None:
        return _timer_on(my_timer, device, dt)
    import torch

    result = _timer_on(my_timer, "cpu", dt)
    if result.passed and torch.cuda.is_available():
        on_gpu = _timer_on(my_timer, "cuda", dt)
        if not on_gpu.passed:
            return failed(f"on the CPU it is right, but on this GPU: {on_gpu.message}")
    return result


def _timer_on(my_timer: Callable[..., float], device: str, dt: float) -> CheckResult:
    from hpclab.measure.timing import time_fn

    work = _Workload(dt, device)
    try:
        got = my_timer(work, device=device, warmup=2, repeat=10)
    except Exception as exc:  # noqa: BLE001 - report, don't raise, in a check
        return failed(f"your timer raised {type(exc).__name__}: {exc}")
    value = as_number(got, "my_timer(...)")
    if isinstance(value, CheckResult):
        return value
    calls = work.calls
    ref = time_fn(_Workload(dt, device, first=0.0), device=device, warmup=1, repeat=5).median_s
    ratio = value / ref
    if calls < 12:
        if calls >= 10:
            return failed(
                f"fn was called {calls} times for warmup=2, repeat=10: call it `warmup` times "
                f"before timing, so the slow first call ({work.first * 1e3:.0f} ms here) is "
                "not measured"
            )
        return failed(
            f"fn was called {calls} times for warmup=2, repeat=10: call it `warmup` times, "
            "then take `repeat` timed samples"
        )
    if ratio < 0.2:
        if device.startswith("cuda"):
            return failed(
                f"{value * 1e6:.0f} µs is far too short ({ref * 1e3:.2f} ms expected): the "
                "clock stopped when the work was queued; synchronize the device before "
                "reading the clock (hpclab.measure.timing.synchronize)"
            )
        return failed(
            f"{value * 1e6:.0f} µs is far too short ({ref * 1e3:.2f} ms expected): is fn() "
            "called between the two clock readings of each sample?"
        )
    if near(ratio, 1.0, 0.25):
        return passed(
            f"your timer says {value * 1e3:.2f} ms per call; time_fn says {ref * 1e3:.2f} ms."
        )
    if near(ratio, 10.0, 0.25):
        return failed("that is the total of 10 calls: divide by repeat")
    if near(ratio, 1000.0, 0.25):
        return failed("that looks like milliseconds: return seconds")
    return failed(
        f"your timer says {value * 1e3:.2f} ms per call, time_fn {ref * 1e3:.2f} ms "
        f"({ratio:.2g}x): time each call on its own and return the median in seconds"
    )


# (cpu latency s, cpu FLOP/s, gpu latency s, gpu FLOP/s): a GPU 300x, 3x and 10x the CPU's rate.
CROSSOVER_CASES = ((2e-6, 1e11, 2e-5, 3e13), (1e-6, 1e11, 2e-5, 3e11), (5e-6, 2e11, 3e-5, 2e12))


@exercise_check
def crossover(
    fn: Callable[[float, float, float, float], float],
    cpu_latency_s: float,
    cpu_rate: float,
    gpu_latency_s: float,
    gpu_rate: float,
) -> CheckResult:
    """(e) ``fn(cpu_latency_s, cpu_rate, gpu_latency_s, gpu_rate)`` -> the n where an n x n x n
    fp32 matmul becomes faster on the GPU, tried on the notebook's fits and on GPUs 300x, 3x
    and 10x faster than the CPU. Rates are FLOP/s; the model is ``t = latency + 2 n^3 / rate``.
    """
    from hpclab.compute.crossover import crossover_work, size_of

    if not callable(fn):
        return failed("pass your function itself, e.g. check.crossover(crossover_n, ...)")
    name = getattr(fn, "__name__", "your function")
    for case in ((cpu_latency_s, cpu_rate, gpu_latency_s, gpu_rate), *CROSSOVER_CASES):
        try:
            value = as_number(fn(*case), f"{name}{case}")
        except Exception as exc:  # a student's function may raise anything
            return failed(f"{name}{case} raised {exc!r}")
        if isinstance(value, CheckResult):
            return value
        (c_lat, c_rate, g_lat, g_rate), work = case, crossover_work(*case)
        want = size_of("matmul", work)
        if near(value / want, 1.0, 0.03):
            continue
        ratio = value / want
        hints = _hints(
            ratio,
            [
                (2 ** (1 / 3), "a matmul is 2 n^3 FLOPs, not n^3"),
                ((work / 2) ** 0.5 / want, "n^3, not n^2: solve 2 n^3 = w*"),
                (want**2, "take the cube root of n^3"),
            ],
            0.03,
        )
        simple = ((g_lat - c_lat) * c_rate / 2) ** (1 / 3)
        if near(value / simple, 1.0, 0.03) and not near(simple / want, 1.0, 0.03):
            hints.append("the GPU's own compute time matters too: use 1/r_cpu - 1/r_gpu")
        where = f"CPU {c_lat * 1e6:g} µs + {c_rate / 1e9:g} GFLOP/s, GPU {g_lat * 1e6:g} µs + {g_rate / 1e9:g} GFLOP/s"
        return failed(
            f"{where}: " + "; ".join(hints or [f"expected about {want:.0f}, got {value:.0f}"]) + "."
        )
    work = crossover_work(cpu_latency_s, cpu_rate, gpu_latency_s, gpu_rate)
    return passed(
        "n* = ((t_gpu - t_cpu) / (2 (1/r_cpu - 1/r_gpu)))^(1/3) = "
        f"{size_of('matmul', work):.0f} here, and right for GPUs 3x to 300x the CPU's rate."
    )
