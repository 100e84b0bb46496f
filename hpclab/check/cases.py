"""Checks that try an answer case by case (chapters 00, 01 and 04): the cases are named (an
allocation, a measurement table) and each has its own plausible slips, so the feedback says in
which case the answer went wrong and which slips its value fits."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

from hpclab.check import CheckResult, call_number, failed, near


def case_by_case(
    fn: Callable[..., Any],
    cases: Sequence[tuple[str, tuple]],
    call: str,
    explain: Callable[..., str | None],
) -> CheckResult | None:
    """``fn(*args)`` on each ``(where, args)`` in order (on a copy: it may change its
    arguments), then ``explain(number, *args)``: None when every case is right (``explain``
    says None), else the feedback for the first that raises, is no number or is wrong. For
    answers whose slips depend on the case (a peak on an allocation with or without SMT), where
    :func:`hpclab.check.formula_check` wants one slip that fits every case."""
    for where, args in cases:
        num = call_number(fn, copy.deepcopy(args), f"{call} for {where}")
        if isinstance(num, CheckResult):
            return num
        wrong = explain(num, *args)
        if wrong:
            return failed(f"for {where}: {wrong}")
    return None


def slips_near(ratio: float, slips: Sequence[tuple[float, str]], tol: float = 0.02) -> list[str]:
    """The advice of each ``(factor, advice)`` slip whose factor ``ratio`` (answer / right
    value) is within ``tol`` of: every slip the answer may be, for a case-by-case check."""
    return [text for factor, text in slips if near(ratio, factor, tol)]
