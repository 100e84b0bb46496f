"""The single-device speed checks (chapters 03 and 04) accept the solutions and reject plausible
wrong answers with advice. Cost: well under a second (formulas only)."""

from __future__ import annotations

import pytest

from hpclab.check import speed


def _break_even(c, e, k):
    return c / (e - k) if e > k else float("inf")


def test_break_even_accepts_the_solution():
    r = speed.break_even(_break_even, 8.0, 0.30, 0.20)
    assert r.passed, r.message
    # a live run where compiling did not help is still a valid place to check from
    assert speed.break_even(_break_even, 8.0, 0.20, 0.30).passed


@pytest.mark.parametrize(
    "wrong, advice",
    [
        (lambda c, e, k: c / k if e > k else float("inf"), "not a whole step"),
        (lambda c, e, k: c / e if e > k else float("inf"), "not a whole step"),
        (lambda c, e, k: c * e / k if e > k else float("inf"), "speed-up is a ratio"),
        (lambda c, e, k: c / (e - k), "never pays"),  # no inf for a slower compiled step
        (lambda c, e, k: 100.0 if e > k else float("inf"), "expected"),
    ],
)
def test_break_even_rejects_each_slip_with_its_advice(wrong, advice):
    r = speed.break_even(wrong, 8.0, 0.30, 0.20)
    assert not r.passed and advice in r.message


def _prefetch(w, p, b, s):
    return w * p * b * s / 2**20


def test_prefetch_memory_accepts_the_solution():
    assert speed.prefetch_memory(_prefetch).passed


@pytest.mark.parametrize(
    "wrong, advice",
    [
        (lambda w, p, b, s: p * b * s / 2**20, "x workers"),
        (lambda w, p, b, s: w * b * s / 2**20, "prefetch_factor batches"),
        (lambda w, p, b, s: w * p * b * s / 1e6, "2**20"),
        (lambda w, p, b, s: w * p * b * s, "that is bytes"),
        (lambda w, p, b, s: w * (p + 1) * b * s / 2**20, "already counts"),
        (lambda w, p, b, s: 1.0, "expected"),
    ],
)
def test_prefetch_memory_rejects_each_slip_with_its_advice(wrong, advice):
    r = speed.prefetch_memory(wrong)
    assert not r.passed and advice in r.message


def test_the_checks_want_functions():
    assert "pass your function" in speed.prefetch_memory(3.0).message
    assert "pass your function" in speed.break_even(3.0, 8.0, 0.3, 0.2).message
