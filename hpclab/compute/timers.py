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
