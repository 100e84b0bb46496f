"""Checks for chapter 06's cost-model exercises: bus bandwidth of an all-reduce and the predicted
scaling efficiency, each a function tried on several cases (plausible mistakes are named)."""

from __future__ import annotations

from typing import Any

from hpclab.check import CheckResult, exercise_check, failed, formula_check


def _busbw(nbytes: float, seconds: float, ranks: int) -> float:
    return nbytes / seconds / 1e9 * 2 * (ranks - 1) / ranks


_BUSBW_MISTAKES = (
    (
        lambda b, s, n: b / s / 1e9,
        "that is algbw (bytes / time) on every rank count: multiply by 2(n-1)/n, the share of "
        "the message each link carries in a ring all-reduce",
    ),
    (lambda b, s, n: 2 * b / s / 1e9, "you used the factor 2; it is 2(n-1)/n"),
    (lambda b, s, n: 2 * (n - 1) * b / s / 1e9, "the factor is 2(n-1)/n: you left out the /n"),
    (lambda b, s, n: (n - 1) / n * b / s / 1e9, "the factor is 2(n-1)/n: you left out the 2"),
    (
        lambda b, s, n: b / s / 1e9 * n / (2 * (n - 1)),
        "you divided by 2(n-1)/n; multiply by it",
    ),
    (
        lambda b, s, n: _busbw(b, s, n) * 1e9 / 2**30,
        "GB here means 1e9 bytes (as nccl-tests prints), not GiB (2**30)",
    ),
    (lambda b, s, n: 8 * _busbw(b, s, n), "that looks like Gbit/s: bytes, not bits"),
    (lambda b, s, n: 1e3 * _busbw(b, s, n), "that looks like MB/s; the answer is in GB/s"),
)


@exercise_check
def busbw(fn: Any, nbytes: float, seconds: float, ranks: int) -> CheckResult:
    """``fn(nbytes, seconds, ranks)``: bus bandwidth in GB/s of an all-reduce, tried on the
    measurement and on other sizes and rank counts (at 2 ranks busbw equals algbw)."""
    if not callable(fn):
        return failed(
            "pass your function my_busbw_gbps itself (not a number): it is tried on several "
            "rank counts, since at 2 ranks busbw equals algbw"
        )
    cases = [(nbytes, seconds, ranks), (1e6, 1e-3, 3), (64 * 2**20, 0.05, 8), (2**30, 1.5, 4)]

    def differs(case: tuple, got: float, want: float) -> str:
        b, s, n = case
        return (
            f"for {b:.0f} bytes in {s:.4g} s on {n} ranks you return {got:.4g} GB/s; expected "
            f"{b:.0f} / {s:.4g} / 1e9 x 2({n}-1)/{n} = {want:.4g}"
        )

    return formula_check(
        fn, cases, "my_busbw_gbps", _busbw, _BUSBW_MISTAKES,
        "busbw = algbw x 2(n-1)/n, in GB/s (1e9 bytes/s), as nccl-tests reports it "
        "(checked on 2, 3, 4 and 8 ranks).",
        differs,
    )  # fmt: skip


def _efficiency(compute_s: float, nbytes: float, n: int, alpha_s: float, bw: float) -> float:
    from hpclab.ddp.cost_model import ring_allreduce_s

    return compute_s / (compute_s + ring_allreduce_s(nbytes, n, alpha_s, bw))


_EFFICIENCY_MISTAKES = (
    (
        lambda c, m, n, a, b: c / (c + a + m / b),
        "you sent the message once (alpha + m/B); a ring all-reduce takes 2(n-1) steps of m/n "
        "bytes each",
    ),
    (
        lambda c, m, n, a, b: 1 - _efficiency(c, m, n, a, b),
        "that is the communication share; efficiency is the compute share",
    ),
    (
        lambda c, m, n, a, b: n * _efficiency(c, m, n, a, b),
        "that is the speedup (n x efficiency); divide by n",
    ),
    (
        lambda c, m, n, a, b: _efficiency(c, 8 * m, n, a, b),
        "bytes, not bits: the bandwidth is in bytes/s",
    ),
    (
        lambda c, m, n, a, b: c / (c + 2 * (n - 1) / n * m / b),
        "the latency term is missing: each of the 2(n-1) steps pays alpha",
    ),
    (
        lambda c, m, n, a, b: c / (c + a + 2 * (n - 1) / n * m / b),
        "the latency is paid in each of the 2(n-1) steps, not once",
    ),
    (
        lambda c, m, n, a, b: c / (c + 2 * (n - 1) * a + 2 * (n - 1) * m / b),
        "each of the 2(n-1) steps sends m/n bytes, not the whole message",
    ),
)


@exercise_check
def efficiency_prediction(
    fn: Any, compute_s: float, nbytes: float, ranks: int, alpha_s: float, bandwidth_bps: float
) -> CheckResult:
    """``fn(compute_s, nbytes, ranks, alpha_s, bandwidth_bps)``: predicted weak-scaling
    efficiency, compute / (compute + ring all-reduce), no overlap; tried on the run's numbers and
    on other rank counts and latencies (at 2 ranks and small alpha one message looks like a ring)."""
    if not callable(fn):
        return failed(
            "pass your function my_efficiency itself (not a number): it is tried on several "
            "rank counts and latencies"
        )
    cases = [
        (compute_s, nbytes, ranks, alpha_s, bandwidth_bps),
        (0.01, 4e6, 2, 1e-3, 1e9),
        (0.02, 4e7, 3, 5e-5, 2e9),
        (0.005, 1e8, 8, 2e-4, 1e10),
    ]

    def differs(case: tuple, got: float, want: float) -> str:
        c, m, n, a, b = case
        extra = " (an efficiency lies between 0 and 1)" if not 0 < got <= 1 else ""
        return (
            f"with compute {c:.4g} s, {m:.0f} bytes, {n} ranks, alpha {a:.3g} s, B {b:.3g} B/s "
            f"you return {got:.4f}{extra}; expected {c:.4g} / ({c:.4g} + 2({n}-1) x {a:.3g} + "
            f"2({n}-1)/{n} x {m:.0f} / {b:.3g}) = {want:.4f}"
        )

    return formula_check(
        fn, cases, "my_efficiency", _efficiency, _EFFICIENCY_MISTAKES,
        "compute / (compute + 2(n-1) alpha + 2(n-1)/n m/B) matches the model on 2, 3 and 8 ranks.",
        differs,
    )  # fmt: skip
