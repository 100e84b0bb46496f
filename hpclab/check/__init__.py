"""Autochecks for exercises: friendly, specific feedback (every chapter has a module here).

A check returns a :class:`CheckResult` instead of raising, so a wrong answer prints advice in
the cell rather than a traceback. Its text is deterministic for a correct answer (nbval compares
it in CI); feedback for wrong answers names the likely mistake and the numbers involved.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return ("PASS: " if self.passed else "NOT YET: ") + self.message

    __str__ = __repr__


def passed(message: str) -> CheckResult:
    return CheckResult(True, message)


def failed(message: str) -> CheckResult:
    return CheckResult(False, message)


def as_number(value: object, name: str) -> float | CheckResult:
    """``value`` as a finite float, or a failed check saying what was expected."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        try:
            value = float(value)  # numpy / torch scalars
        except (TypeError, ValueError):
            return failed(f"{name} should be a number, got {type(value).__name__}: {value!r}")
        if not math.isfinite(value):
            return failed(f"{name} should be a finite number, got {value!r}")
    return float(value)


def near(ratio: float, target: float, tol: float = 0.02) -> bool:
    """``ratio`` within ``tol`` (relative) of ``target``."""
    return abs(ratio / target - 1.0) <= tol
