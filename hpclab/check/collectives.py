"""Check for chapter 06's collectives exercise: the alpha-beta cost of recursive doubling, tried
on power-of-two and other rank counts (plausible mistakes are named)."""

from __future__ import annotations

import math
from typing import Any

from hpclab.check import CheckResult, exercise_check, failed, formula_check, passed
from hpclab.ddp.collective_model import model_s


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
