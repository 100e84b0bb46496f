"""Checks for chapter 01's timing exercises (GPU vs CPU): an honest timer, and the CPU/GPU
crossover size of a matmul."""

from __future__ import annotations

import time
from collections.abc import Callable

from hpclab.check import CheckResult, as_number, exercise_check, failed, near, passed
from hpclab.check.cases import case_by_case, slips_near


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
    # Bands a factor of 1.8 wide around 1, 10 and 1000: a loaded machine stretches a short sleep
    # (and either timing) by tens of per cent, never by the factor that tells the mistakes apart.
    if _within(ratio, 1.0):
        return passed(
            f"your timer says {value * 1e3:.2f} ms per call; time_fn says {ref * 1e3:.2f} ms."
        )
    if _within(ratio, 10.0):
        return failed("that is the total of 10 calls: divide by repeat")
    if _within(ratio, 1000.0):
        return failed("that looks like milliseconds: return seconds")
    return failed(
        f"your timer says {value * 1e3:.2f} ms per call, time_fn {ref * 1e3:.2f} ms "
        f"({ratio:.2g}x): time each call on its own and return the median in seconds"
    )


def _within(ratio: float, target: float, factor: float = 1.8) -> bool:
    return target / factor <= ratio <= target * factor


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
    cases = [
        (
            f"CPU {c_lat * 1e6:g} µs + {c_rate / 1e9:g} GFLOP/s, "
            f"GPU {g_lat * 1e6:g} µs + {g_rate / 1e9:g} GFLOP/s",
            (c_lat, c_rate, g_lat, g_rate),
        )
        for c_lat, c_rate, g_lat, g_rate in (
            (cpu_latency_s, cpu_rate, gpu_latency_s, gpu_rate),
            *CROSSOVER_CASES,
        )
    ]
    wrong = case_by_case(fn, cases, name, _crossover_slip)
    if wrong is not None:
        return wrong
    work = crossover_work(cpu_latency_s, cpu_rate, gpu_latency_s, gpu_rate)
    return passed(
        "n* = ((t_gpu - t_cpu) / (2 (1/r_cpu - 1/r_gpu)))^(1/3) = "
        f"{size_of('matmul', work):.0f} here, and right for GPUs 3x to 300x the CPU's rate."
    )


def _crossover_slip(
    value: float, c_lat: float, c_rate: float, g_lat: float, g_rate: float
) -> str | None:
    """None when ``value`` is the crossover n within 3%; else the slips it shows."""
    from hpclab.compute.crossover import crossover_work, size_of

    work = crossover_work(c_lat, c_rate, g_lat, g_rate)
    want = size_of("matmul", work)
    if near(value / want, 1.0, 0.03):
        return None
    slips = [
        (2 ** (1 / 3), "a matmul is 2 n^3 FLOPs, not n^3"),
        ((work / 2) ** 0.5 / want, "n^3, not n^2: solve 2 n^3 = w*"),
        (want**2, "take the cube root of n^3"),
    ]
    hints = slips_near(value / want, slips, 0.03)
    simple = ((g_lat - c_lat) * c_rate / 2) ** (1 / 3)
    if near(value / simple, 1.0, 0.03) and not near(simple / want, 1.0, 0.03):
        hints.append("the GPU's own compute time matters too: use 1/r_cpu - 1/r_gpu")
    return "; ".join(hints or [f"expected about {want:.0f}, got {value:.0f}"]) + "."
