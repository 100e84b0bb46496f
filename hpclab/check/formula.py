"""One way to check an answer that is a formula (chapter 06's cost models): the student's
function is called on several cases, compared with the reference, and a wrong result is met
with the advice of the plausible mistake it reproduces on every case, else with the first case
that differs, written out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hpclab.check import CheckResult, as_number, error_line, failed, mistake, near, passed


def call_all(
    fn: Callable[..., Any], cases: Sequence[tuple], name: str
) -> list[float] | CheckResult:
    """``fn(*case)`` for every case as numbers, or the feedback for the first that is not one."""
    got = []
    for case in cases:
        try:
            value = fn(*case)
        except Exception as err:  # noqa: BLE001 - a student's bug becomes feedback
            return failed(f"{name}{tuple(case)} raised {error_line(err)}")
        num = as_number(value, f"{name}{tuple(case)}")
        if isinstance(num, CheckResult):
            return num
        got.append(num)
    return got


def formula_check(
    fn: Callable[..., Any],
    cases: Sequence[tuple],
    name: str,
    reference: Callable[..., float],
    mistakes: tuple[tuple[Callable[..., float], str], ...],
    passed_text: str,
    differs: Callable[[tuple, float, float], str],
) -> CheckResult:
    """PASS when ``fn`` matches ``reference`` within 1% on every case; else the advice of a
    mistake it reproduces, else ``differs(case, got, want)`` for the first case it misses."""
    got = call_all(fn, cases, name)
    if isinstance(got, CheckResult):
        return got
    want = [reference(*c) for c in cases]
    misses = [
        i for i, (g, w) in enumerate(zip(got, want, strict=True)) if not near(g / w, 1.0, 0.01)
    ]
    if not misses:
        return passed(passed_text)
    advice = mistake(got, list(cases), mistakes)
    if advice:
        return failed(advice + ".")
    k = misses[0]
    return failed(differs(cases[k], got[k], want[k]))
