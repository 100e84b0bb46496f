"""Naive and honest timers side by side (chapter 01, "time without synchronize lies").

:func:`naive_time` is what ``t0 = time.time(); f(); print(time.time() - t0)`` does: no warm-up,
no synchronisation. On a CPU it is merely noisy (the first call pays for allocation and lazy
setup). On a GPU it is wrong: kernels are queued asynchronously, so the clock stops when the
work is *launched*, not when it is done. :func:`honest_time` has the same signature and goes
through :func:`hpclab.measure.timing.time_fn` (warm-up, synchronise, CUDA events, median).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def naive_time(fn: Callable[[], Any], repeat: int = 10, device: str = "cpu") -> float:
    """Median seconds per call measured with perf_counter only (``device`` is ignored)."""
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def honest_time(fn: Callable[[], Any], repeat: int = 10, device: str = "cpu") -> float:
    """Median seconds per call: warm-up, synchronise around each sample, CUDA events on a GPU."""
    from hpclab.measure.timing import time_fn

    return time_fn(fn, device=device, repeat=repeat, warmup=2).median_s


def timed_auto(
    fn: Callable[[], Any], device: str = "cpu", repeat: int = 5, target_s: float = 0.002
):
    """:func:`~hpclab.measure.timing.time_fn` with ``inner`` chosen from one untimed call.

    The untimed call pays for setup (allocation, plan creation, cuDNN's algorithm search). Calls
    shorter than ``target_s`` are grouped ``inner`` at a time so each sample lasts ~``target_s``;
    long calls are timed one by one and get no extra warm-up (chapter 01's kernels).
    """
    from hpclab.measure.timing import synchronize, time_fn

    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    dt = time.perf_counter() - t0
    inner = 1 if dt >= target_s else max(1, min(100_000, int(target_s / max(dt, 1e-7))))
    return time_fn(fn, device=device, repeat=repeat, inner=inner, warmup=1 if dt > 0.1 else 2)
