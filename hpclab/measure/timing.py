"""One timing API for the whole course (chapter 00; used from chapter 01 on).

``time_fn`` does what a plain ``time.time()`` around a call does not:

1. checks correctness once before timing, when a ``check`` is given (a fast wrong answer is
   not a result);
2. warms up (first calls pay for allocation, lazy imports, kernel selection, cache misses);
3. synchronises the device around every sample: CUDA work is asynchronous, so without a
   synchronise the clock stops when the kernel is *queued*, not when it is done. On CUDA the
   samples come from CUDA events recorded on the stream; on CPU from ``perf_counter``;
4. repeats and keeps every sample, so the spread is reported next to the median.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    """Samples of one measured operation, in seconds per call."""

    samples_s: tuple[float, ...]
    warmup: int
    clock: str  # "perf_counter" or "cuda_event"
    inner: int = 1  # calls per sample (for very short operations)

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def min_s(self) -> float:
        return min(self.samples_s)

    @property
    def max_s(self) -> float:
        return max(self.samples_s)

    @property
    def mean_s(self) -> float:
        return statistics.fmean(self.samples_s)

    @property
    def stdev_s(self) -> float:
        return statistics.stdev(self.samples_s) if len(self.samples_s) > 1 else 0.0

    @property
    def quartiles_s(self) -> tuple[float, float]:
        """(first, third) quartile: the middle half of the samples lies between them (the
        extremes with fewer than 4 samples). Error bars from the median to these are honest on
        a skewed spread, where median +- IQR can reach below zero."""
        if len(self.samples_s) < 4:
            return self.min_s, self.max_s
        q = statistics.quantiles(self.samples_s, n=4)
        return q[0], q[2]

    @property
    def iqr_s(self) -> float:
        """Inter-quartile range: the middle half of the samples lies within it."""
        q1, q3 = self.quartiles_s
        return q3 - q1

    @property
    def spread(self) -> float:
        """Relative spread: IQR / median (0.02 means the middle half lies within 2 %)."""
        return self.iqr_s / self.median_s if self.median_s > 0 else math.inf

    def rate(self, work: float) -> float:
        """Work per second at the median time (e.g. FLOPs -> FLOP/s)."""
        return work / self.median_s

    def best_rate(self, work: float) -> float:
        """Work per second at the fastest sample."""
        return work / self.min_s

    def summary(self) -> dict[str, float]:
        """Flat fields for a result record."""
        return {
            "seconds": self.median_s,
            "seconds_min": self.min_s,
            "seconds_max": self.max_s,
            "seconds_iqr": self.iqr_s,
            "repeats": len(self.samples_s),
        }


def _device_type(device: Any) -> str:
    return str(device).split(":")[0] if device is not None else "cpu"


def synchronize(device: Any = "cpu") -> None:
    """Wait for all queued work on ``device`` (a no-op on CPU)."""
    kind = _device_type(device)
    if kind == "cuda":
        import torch

        torch.cuda.synchronize(device)
    elif kind == "mps":
        import torch

        torch.mps.synchronize()


def time_fn(
    fn: Callable[[], Any],
    *,
    device: Any = "cpu",
    warmup: int = 2,
    repeat: int = 10,
    inner: int = 1,
    min_time_s: float = 0.0,
    max_time_s: float = 60.0,
    check: Callable[[Any], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Timing:
    """Time ``fn()`` honestly; returns every sample (seconds per call).

    - ``check(result)`` runs once on the first call's result and must raise if it is wrong.
    - ``warmup`` untimed calls, then ``repeat`` timed samples of ``inner`` calls each.
    - ``min_time_s``: keep taking samples until this much time was measured (for tiny ops);
      ``max_time_s`` stops early for huge ones (at least 3 samples are always taken).
    """
    if repeat < 1 or warmup < 0 or inner < 1:
        raise ValueError("repeat and inner must be >= 1 and warmup >= 0")
    _warm_up(fn, device, warmup, check)
    sample, clock = _sampler(fn, device, inner)
    samples: list[float] = []
    spent = 0.0
    wall_start = time.perf_counter()
    while True:
        dt = sample()
        samples.append(dt / inner)
        spent += dt
        if progress is not None:
            progress(len(samples), repeat)
        enough = len(samples) >= repeat and spent >= min_time_s
        too_long = len(samples) >= 3 and time.perf_counter() - wall_start > max_time_s
        if enough or too_long:
            break
    return Timing(samples_s=tuple(samples), warmup=warmup, clock=clock, inner=inner)


def _warm_up(
    fn: Callable[[], Any], device: Any, warmup: int, check: Callable[[Any], None] | None
) -> None:
    """The untimed calls: the first one's result checked, ``warmup`` in all (at least one)."""
    first = fn()
    synchronize(device)
    if check is not None:
        check(first)
    for _ in range(max(0, warmup - 1)):
        fn()
    synchronize(device)


def _sampler(fn: Callable[[], Any], device: Any, inner: int) -> tuple[Callable[[], float], str]:
    """A function that times ``inner`` calls of ``fn`` once (seconds in all), and the clock it
    reads: CUDA events on a CUDA device (they time the GPU's work, not the launch), else
    ``perf_counter`` between two synchronizations."""
    if _device_type(device) == "cuda":
        import torch

        start_ev = torch.cuda.Event(enable_timing=True)
        end_ev = torch.cuda.Event(enable_timing=True)

        def on_events() -> float:
            start_ev.record()
            for _ in range(inner):
                fn()
            end_ev.record()
            end_ev.synchronize()
            return start_ev.elapsed_time(end_ev) / 1e3

        return on_events, "cuda_event"

    def on_the_clock() -> float:
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        synchronize(device)
        return time.perf_counter() - t0

    return on_the_clock, "perf_counter"


def calls_for(fn: Callable[[], Any], target_s: float = 0.01, device: Any = "cpu") -> int:
    """How many calls of ``fn`` fill ``target_s`` (for choosing ``inner`` on tiny operations)."""
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    dt = max(time.perf_counter() - t0, 1e-7)
    return max(1, min(1_000_000, int(target_s / dt)))
