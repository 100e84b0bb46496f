"""Autochecks for exercises: friendly, specific feedback (every chapter has a module here).

A check returns a :class:`CheckResult` instead of raising, so a wrong answer prints advice in
the cell rather than a traceback, and "Run All" on an exercise notebook reaches the end. Its text
is deterministic for a correct answer (nbval compares it in CI); feedback for wrong answers names
the likely mistake and the numbers involved.

Every check is wrapped by :func:`exercise_check`, so all of them treat an unsolved exercise the
same way: a ``...`` placeholder or a function that still raises ``NotImplementedError`` gets
"NOT YET: ..." at once. Under nbgrader (``NBGRADER_EXECUTION`` is set by ``nbgrader autograde``
and ``validate``) or with ``HPCLAB_GRADING=1``, a check that does not pass prints its feedback and
then raises :class:`CheckFailed`: nbgrader scores a test cell by whether it raises.

An answer of the wrong type (a string, ``None``, a pandas Series where a number or a function
belongs) gets a NOT YET that says what the check expected, and so does an answer the check could
not use; a NOT YET ends with the :func:`hint` call that reveals that exercise's hints one tier at
a time (texts and expected types: :mod:`hpclab.check.hints`).
"""

from __future__ import annotations

import functools
import math
import os
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


def error_line(err: BaseException) -> str:
    """One line for the student's error, ``Type: message``. A failed rank (:class:`RunError`)
    keeps its first line, which names the rank and the cause. An error re-raised with the
    original traceback in its message (a DataLoader worker's, a rank's) ends with the original
    ``Type: message``: that last line is the one to show."""
    import re

    from hpclab.config import RunError

    text = str(err).strip().splitlines()
    if isinstance(err, RunError) and text:
        return text[0]
    last = text[-1].strip() if text else ""
    if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Warning|Interrupt|Exit)\b", last):
        return last
    return f"{type(err).__name__}: {last}" if last else type(err).__name__


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return ("PASS: " if self.passed else "NOT YET: ") + self.message

    __str__ = __repr__


class CheckFailed(AssertionError):
    """Raised by a check that did not pass, in grading mode only."""


def passed(message: str) -> CheckResult:
    return CheckResult(True, message)


def failed(message: str) -> CheckResult:
    return CheckResult(False, message)


def grading() -> bool:
    """True under nbgrader's autograde/validate, or when ``HPCLAB_GRADING=1``."""
    return bool(os.environ.get("NBGRADER_EXECUTION")) or os.environ.get("HPCLAB_GRADING") == "1"


def is_stub(obj: object) -> bool:
    """A function (or a class with a method) whose code still raises ``NotImplementedError``:
    the exercise's stub."""
    if isinstance(obj, type):
        return any(is_stub(v) for v in vars(obj).values() if isinstance(v, types.FunctionType))
    code = getattr(obj, "__code__", None)
    stack = [code] if isinstance(code, types.CodeType) else []
    while stack:
        c = stack.pop()
        if "NotImplementedError" in c.co_names:
            return True
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return False


def _unsolved(args: tuple, kwargs: dict) -> CheckResult | None:
    values = list(args) + list(kwargs.values())
    if any(v is Ellipsis for v in values):
        return failed(
            "the exercise is not done yet: replace the `...` in the exercise cell with your "
            "answer and run that cell again"
        )
    for v in values:
        if callable(v) and is_stub(v):
            name = getattr(v, "__name__", "your function")
            return failed(
                f"{name} is not written yet: replace its `raise NotImplementedError(...)` with "
                "your code and run that cell again"
            )
    return None


_LAST: dict[int, tuple[object, bool]] = {}  # id(first argument) -> (it, did its last check pass)


def solved(answer: object) -> bool:
    """Whether ``answer`` (an exercise's function or value) passed its last check.

    Cells that reuse an answer (say, timing your ring all-reduce) run only once it passed, so an
    unsolved exercise never breaks the cells after it.
    """
    entry = _LAST.get(id(answer))
    return entry is not None and entry[0] is answer and entry[1]


def exercise_check(fn: Callable[..., CheckResult]) -> Callable[..., CheckResult]:
    """Wrap a check: unsolved answers say "not yet"; grading mode raises on a failure."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> CheckResult:
        from hpclab.check import hints

        result = _unsolved(args, kwargs)
        wrong = hints.wrong_type(fn, args, kwargs) if result is None else None
        if wrong:
            result = failed(wrong)
        if result is None:
            try:
                result = fn(*args, **kwargs)
            except NotImplementedError:
                result = failed(
                    "part of your code still raises NotImplementedError: replace the stub with "
                    "your code and run that cell again"
                )
            except Exception as err:  # noqa: BLE001 - an answer the check could not use
                result = failed(
                    f"{fn.__name__} could not use your answer ({error_line(err)}); it expects "
                    f"{hints.expected(fn)}"
                )
        if not result.passed:
            result = failed(hints.with_pointer(result.message, fn.__name__))
        if args:
            _LAST[id(args[0])] = (args[0], result.passed)
        if not result.passed and grading():
            print(result, file=sys.stdout, flush=True)
            raise CheckFailed(result.message)
        return result

    return wrapper


def hint(exercise: str, n: int = 1) -> Any:
    """Hint ``n`` (1-3) of an exercise, one tier at a time; the id is its check's name."""
    from hpclab.check.hints import show

    return show(exercise, n)


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


def mistake(
    got: list[float],
    cases: list[tuple],
    models: tuple[tuple[Callable[..., float], str], ...],
    tol: float = 0.01,
) -> str | None:
    """The advice of the first wrong formula in ``models`` that reproduces ``got`` on every case
    (so a hint is only given when the answer really behaves like that mistake)."""
    for model, advice in models:
        try:
            if all(g > 0 and near(g, model(*c), tol) for g, c in zip(got, cases, strict=True)):
                return advice
        except ZeroDivisionError:
            continue
    return None


# A formula as an answer (chapter 06's cost models): the student's function is called on several
# cases and compared with the reference; a wrong result is met with the advice of the plausible
# mistake it reproduces on every case, else with the first case that differs, written out.
def call_all(
    fn: Callable[..., Any], cases: Sequence[tuple], name: str
) -> list[float] | CheckResult:
    """``fn(*case)`` for every case as numbers, or the feedback for the first that is not one."""
    got = []
    for case in cases:
        num = call_number(fn, case, f"{name}{tuple(case)}")
        if isinstance(num, CheckResult):
            return num
        got.append(num)
    return got


def call_number(fn: Callable[..., Any], args: tuple, call: str) -> float | CheckResult:
    """``fn(*args)`` as a number, or the feedback when it raises or is not one (``call`` names
    the call in it)."""
    try:
        value = fn(*args)
    except Exception as err:  # noqa: BLE001 - a student's bug becomes feedback
        return failed(f"{call} raised {error_line(err)}")
    return as_number(value, call)


def formula_check(
    fn: Callable[..., Any],
    cases: Sequence[tuple],
    name: str,
    reference: Callable[..., float],
    mistakes: tuple[tuple[Callable[..., float], str], ...],
    passed_text: str,
    differs: Callable[[tuple, float, float], str],
    tol: float = 0.01,
) -> CheckResult:
    """PASS when ``fn`` matches ``reference`` within ``tol`` (1%) on every case; else the advice
    of a mistake it reproduces, else ``differs(case, got, want)`` for the first case it misses."""
    got = call_all(fn, cases, name)
    if isinstance(got, CheckResult):
        return got
    want = [reference(*c) for c in cases]
    misses = [
        i for i, (g, w) in enumerate(zip(got, want, strict=True)) if not near(g / w, 1.0, tol)
    ]
    if not misses:
        return passed(passed_text)
    advice = mistake(got, list(cases), mistakes, tol)
    if advice:
        return failed(advice + ".")
    k = misses[0]
    return failed(differs(cases[k], got[k], want[k]))
