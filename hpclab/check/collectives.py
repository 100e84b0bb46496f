"""Checks for chapter 06's collectives exercises: the alpha-beta cost of recursive doubling, tried
on power-of-two and other rank counts, and what NVLS's printed busbw means on the wire (plausible
mistakes are named)."""

from __future__ import annotations

import math
from typing import Any

from hpclab.check import CheckResult, exercise_check, failed, formula_check, passed
from hpclab.ddp.collective_model import model_s
from hpclab.ddp.fabric import wire_from_busbw


def _doubling(m: float, n: int, a: float, b: float) -> float:
    return model_s("doubling", m, n, a, b)


def _cost(steps: float, factor: float, m: float, a: float, b: float) -> float:
    return steps * a + factor * m / b


_MISTAKES = (
    (
        lambda m, n, a, b: model_s("ring", m, n, a, b),
        "that is the ring's cost (2(n-1) steps of m/n bytes); recursive doubling takes log2 n "
        "steps, each sending the whole message",
    ),
    (
        lambda m, n, a, b: model_s("tree", m, n, a, b),
        "that is a tree's reduce + broadcast (2 log2 n steps); recursive doubling needs log2 n",
    ),
    (
        lambda m, n, a, b: _cost(n.bit_length() - 1, n.bit_length() - 1, m, a, b),
        "right for 2, 4, 8 ranks; when n is not a power of two the fix-up adds two steps "
        "(in: the extra ranks hand over their vectors; out: they get the result back)",
    ),
    (
        lambda m, n, a, b: _cost(math.ceil(math.log2(n)), math.ceil(math.log2(n)), m, a, b),
        "rounding log2 n up is not how the fix-up works: floor(log2 n) doubling steps among "
        "2**floor(log2 n) ranks, plus 2 steps when n is not a power of two",
    ),
    (
        lambda m, n, a, b: _doubling(m, n, a, b) - _doubling(m, n, 0.0, b),
        "only the latency terms: each step also sends the whole message (m / B)",
    ),
    (
        lambda m, n, a, b: _doubling(m, n, a, b) - _doubling(m, n, a, math.inf),
        "only the bandwidth terms: each step also pays alpha",
    ),
    (
        lambda m, n, a, b: _doubling(m / n, n, a, b),
        "each step sends the whole message, not m/n (that would be recursive halving)",
    ),
)


@exercise_check
def doubling_cost(fn: Any) -> CheckResult:
    """``fn(nbytes, ranks, alpha_s, bandwidth_bps)``: seconds of a recursive-doubling all-reduce
    by the alpha-beta model (Thakur, Rabenseifner & Gropp 2005), tried on 2 to 12 ranks."""
    if not callable(fn):
        return failed("pass your function my_doubling_s itself (not a number)")
    cases = [
        (2**20, 2, 1e-4, 1e9),
        (4096, 4, 2e-5, 5e9),
        (64 * 2**20, 8, 5e-6, 2e10),
        (2**20, 3, 1e-4, 1e9),
        (16 * 2**20, 6, 1e-5, 1e10),
        (1024, 12, 3e-5, 2e9),
    ]

    def differs(case: tuple, got: float, want: float) -> str:
        m, n, a, b = case
        return (
            f"for {m} bytes on {n} ranks (alpha {a:g} s, B {b:g} bytes/s) you return {got:.4g} s; "
            f"expected {want:.4g} s"
        )

    return formula_check(
        fn, cases, "my_doubling_s", _doubling, _MISTAKES,
        "floor(log2 n) steps of the whole message, plus 2 when n is not a power of two: few "
        "steps (small messages win) but log2 n x m bytes (big messages lose to the ring).",
        differs,
    )  # fmt: skip


@exercise_check
def hang_culprit(answer: Any, result: Any) -> CheckResult:
    """``answer``: the rank with the planted fault in ``result`` (an ``hpclab run hang`` result),
    found by reading its messages."""
    if isinstance(answer, bool) or not isinstance(answer, int):
        return failed(f"my_culprit should be a rank number (an int), not {answer!r}")
    recs = result.records
    culprit = recs[0]["culprit"]
    ranks = recs[0]["ranks"]
    if answer == culprit:
        return passed(
            "that is the rank whose tensor shape differs from the others' "
            "(TORCH_DISTRIBUTED_DEBUG=DETAIL lists each rank's TensorShape)."
        )
    if not 0 <= answer < ranks:
        return failed(f"rank {answer} is not in this run: its ranks are 0..{ranks - 1}")
    plain = next((r for r in recs if r["tool"] == "timeout only"), None)
    if plain is not None and answer == plain["named_rank"]:
        return failed(
            f"rank {answer} is the rank whose failure the plain run reported first: the one "
            "that noticed the mismatch, not necessarily the one that caused it. Read the "
            "DETAIL message: which rank's TensorShape is not the others'?"
        )
    return failed(
        f"rank {answer} called the collective like most ranks; look for the TensorShape that "
        "differs in the DETAIL message"
    )


def _nvls_wire(busbw: float, n: int) -> float:
    return wire_from_busbw(busbw, n, "nvls")


_WIRE_MISTAKES = (
    (
        lambda busbw, n: busbw,
        "that is the printed busbw itself: nccl-tests multiplies algbw by the ring's 2(n-1)/n "
        "whatever the algorithm, and under NVLS a link does not carry that",
    ),
    (
        lambda busbw, n: busbw * n / (2 * (n - 1)),
        "that is algbw (busbw / 2(n-1)/n): under NVLS each GPU's link carries (n+1)/n of it, the "
        "whole buffer up to be added and its 1/n of the sum up again to be copied to all",
    ),
    (
        lambda busbw, n: busbw * (n - 1) / (n + 1),
        "(n-1)/(n+1), nccl-tests' doc factor, does not turn the printed busbw into a link's "
        "bandwidth: undo 2(n-1)/n first (that gives algbw), then count the bytes per link",
    ),
    (
        lambda busbw, n: busbw * (n + 1) / n,
        "(n+1)/n multiplies algbw, not the printed busbw: undo 2(n-1)/n first",
    ),
)


@exercise_check
def nvls_wire(fn: Any) -> CheckResult:
    """``fn(busbw_gbps, ranks)``: what each GPU's NVLink carries per direction under NVLS on one
    NVSwitch node, from the busbw nccl-tests prints (chapter 06, "Real fabrics in the model")."""
    if not callable(fn):
        return failed("pass your function my_wire_gbps itself (not a number)")
    cases = [(480.0, 8), (370.0, 4), (150.0, 2), (600.0, 72), (250.0, 3)]

    def differs(case: tuple, got: float, want: float) -> str:
        busbw, n = case
        return f"for busbw {busbw:g} GB/s on {n} GPUs you return {got:.4g}; expected {want:.4g}"

    return formula_check(
        fn, cases, "my_wire_gbps", _nvls_wire, _WIRE_MISTAKES,
        "busbw / (2(n-1)/n) is algbw, and NVLS moves (n+1)/n bytes per byte on each link: 480 "
        "GB/s printed on 8xH100 is 309 GB/s on the wire, 0.69 of NVLink 4's 450.",
        differs,
    )  # fmt: skip
