"""The chapter 06 collectives check accepts the recursive-doubling cost and names the slips."""

from __future__ import annotations

import math

import pytest

from hpclab.check import collectives


def doubling_solution(nbytes, ranks, alpha_s, bandwidth_bps):
    steps = math.floor(math.log2(ranks)) + (0 if ranks & (ranks - 1) == 0 else 2)
    return steps * (alpha_s + nbytes / bandwidth_bps)


def test_doubling_cost_accepts_the_formula():
    ok = collectives.doubling_cost(doubling_solution)
    assert ok.passed and "plus 2" in ok.message


@pytest.mark.parametrize(
    "wrong, advice",
    [
        (lambda m, n, a, b: 2 * (n - 1) * a + 2 * (n - 1) / n * m / b, "ring's cost"),
        (lambda m, n, a, b: 2 * math.ceil(math.log2(n)) * (a + m / b), "tree's"),
        (lambda m, n, a, b: math.floor(math.log2(n)) * (a + m / b), "fix-up adds two steps"),
        (lambda m, n, a, b: math.ceil(math.log2(n)) * (a + m / b), "rounding log2 n up"),
        (
            lambda m, n, a, b: doubling_solution(m, n, a, b) - doubling_solution(m, n, 0, b),
            "latency",
        ),
        (lambda m, n, a, b: doubling_solution(m / n, n, a, b), "recursive halving"),
        (lambda m, n, a, b: 1.5 * doubling_solution(m, n, a, b), "expected"),
    ],
)
def test_doubling_cost_rejects_wrong_formulas_with_the_right_advice(wrong, advice):
    r = collectives.doubling_cost(wrong)
    assert not r.passed and advice in r.message, r.message


def test_doubling_cost_wants_a_function():
    r = collectives.doubling_cost(0.01)
    assert not r.passed and "function" in r.message

    def broken(nbytes, ranks, alpha_s, bandwidth_bps):
        raise TypeError("bad operand")

    r = collectives.doubling_cost(broken)
    assert not r.passed and "TypeError" in r.message


def test_hang_culprit_accepts_the_planted_rank_and_rejects_the_reporter(no_orphans):
    # ~1 s: two 4-rank runs that fail at once
    from hpclab import experiments

    res = experiments.run("hang", fault="shape", ranks=4, bad_rank=-1)
    culprit = res.records[0]["culprit"]
    assert 0 <= culprit < 4 and all(r["culprit"] == culprit for r in res.records)
    assert collectives.hang_culprit(culprit, res).passed
    for wrong in {0, 1, 2, 3} - {culprit}:
        r = collectives.hang_culprit(wrong, res)
        assert not r.passed and "TensorShape" in r.message
    r = collectives.hang_culprit(7, res)
    assert not r.passed and "0..3" in r.message
    assert not collectives.hang_culprit("2", res).passed
