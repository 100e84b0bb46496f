"""Tiered hints and the expected type of every exercise's answer (chapter 00).

One mechanism for the whole course: ``hint("pcie_bandwidth")`` shows the first hint of the
exercise whose check is ``pcie_bandwidth``, ``hint("pcie_bandwidth", 2)`` the second. The
exercise id is the name of its check, which the check's NOT YET message repeats. Tier 1 names the
concept, tier 2 the mechanism, tier 3 the shape of the code; none is the code itself.

The texts live beside the checks: ``hpclab/check/hints/<topic>.py`` holds the hints of the
checks in ``hpclab/check/<topic>.py``. Each :class:`Exercise` also says what type each answer
argument must have, so a check given a string, ``None`` or a pandas Series says what it
expected instead of raising (:func:`wrong_type`).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TOPICS = (  # one module here per check module of hpclab/check/
    "welcome",
    "compute",
    "timing",
    "topology",
    "profiling",
    "patient",
    "storage",
    "lazy_dataset",
    "sgd",
    "ssp",
    "ddp",
    "cost_model",
    "collectives",
    "parallel",
    "tta",
    "cluster",
    "search",
    "speed",
    "memory",
    "sharding",
)
# What an answer argument may be: a predicate per kind, and the words used when it is not.
KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "function": (lambda v: callable(v) and not isinstance(v, type), "a function"),
    "class": (lambda v: isinstance(v, type), "a class"),
    "number": (
        lambda v: (
            not isinstance(v, (bool, str, bytes)) and getattr(v, "ndim", 0) == 0 and _is_number(v)
        ),
        "a number",
    ),
    "text": (lambda v: isinstance(v, str), "a string"),
    "collection": (
        lambda v: not isinstance(v, (str, bytes)) and hasattr(v, "__iter__"),
        "a collection",
    ),
    "any": (lambda v: True, "anything"),
}


def _is_number(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError, OverflowError):
        return False


@dataclass(frozen=True)
class Exercise:
    """One exercise: its check's name (the id), its answers' kinds, and 1-3 hint tiers."""

    check: str
    answers: tuple[tuple[str, str], ...]  # (kind, what it is) per answer argument, in order
    hints: tuple[str, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.hints) <= 3:
            raise ValueError(f"{self.check}: 1 to 3 hint tiers, got {len(self.hints)}")
        for kind, _ in self.answers:
            if kind not in KINDS:
                raise ValueError(f"{self.check}: answer kind {kind!r} is not one of {list(KINDS)}")


@dataclass(frozen=True)
class Hint:
    """What :func:`hint` shows: one tier, or a one-line message when there is none."""

    text: str

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__


_REGISTRY: dict[str, Exercise] = {}


def exercises() -> dict[str, Exercise]:
    """Every exercise with hints, by id (loaded on first use)."""
    if not _REGISTRY:
        for topic in TOPICS:
            module = importlib.import_module(f"hpclab.check.hints.{topic}")
            for ex in module.EXERCISES:
                if ex.check in _REGISTRY:
                    raise ValueError(f"exercise id {ex.check!r} is defined twice")
                _REGISTRY[ex.check] = ex
    return _REGISTRY


def _call(exercise: str, n: int) -> str:
    return f'hint("{exercise}")' if n == 1 else f'hint("{exercise}", {n})'


def show(exercise: Any, n: Any = 1) -> Hint:
    """Hint tier ``n`` (1 = the concept, 2 = the mechanism, 3 = the shape of the code)."""
    known = exercises()
    if not isinstance(exercise, str) or exercise not in known:
        close = difflib.get_close_matches(str(exercise), list(known), n=1)
        also = f'; did you mean "{close[0]}"?' if close else ""
        return Hint(
            f"no exercise {exercise!r}: the id is the name of the exercise's check, as its NOT "
            f'YET message shows (e.g. hint("{next(iter(known))}")){also}'
        )
    tiers = exercises()[exercise].hints
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(tiers):
        return Hint(
            f"{exercise} has {len(tiers)} hint{'s' if len(tiers) > 1 else ''} "
            f"(1 to {len(tiers)}); you asked for {n!r}"
        )
    more = f" More: {_call(exercise, n + 1)}." if n < len(tiers) else " (the last hint)"
    return Hint(f"HINT {n} of {len(tiers)} for {exercise}: {tiers[n - 1]}{more}")


def with_pointer(message: str, exercise: str) -> str:
    """A NOT YET message ending with how to ask for a hint, when the exercise has hints."""
    if exercise not in exercises():
        return message
    end = "" if message.rstrip().endswith((".", "!", "?")) else "."
    return f"{message.rstrip()}{end} Stuck? from hpclab.check import hint; {_call(exercise, 1)}"


def wrong_type(fn: Callable[..., Any], args: tuple, kwargs: dict) -> str | None:
    """What the check ``fn`` expected, when an answer argument has the wrong type; else None."""
    ex = exercises().get(fn.__name__)
    if ex is None:
        return None
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs).arguments
    except TypeError:
        return None
    names = list(inspect.signature(fn).parameters)
    for name, (kind, what) in zip(names, ex.answers, strict=False):
        if name not in bound:
            continue
        value = bound[name]
        ok, words = KINDS[kind]
        if not ok(value):
            shape = getattr(value, "shape", None)
            shown = repr(value).splitlines()[0] if repr(value) else ""
            if shape:  # an array, a tensor or a pandas object: its shape says more
                shown = f"shape {tuple(shape)}"
            elif len(shown) > 40:
                shown = shown[:37] + "..."
            got = f"got {type(value).__name__}: {shown}"
            if kind in ("function", "class"):  # the usual slip: its result, or an instance
                return f"pass your {kind} itself: {fn.__name__} expects {what}, {got}"
            return f"{fn.__name__} expects {what}: it should be {words}, {got}"
    return None


def expected(fn: Callable[..., Any]) -> str:
    """What a check expects, in words: for a message when it could not use an answer."""
    ex = exercises().get(fn.__name__)
    if ex is None:
        return "the answer the exercise asks for"
    return "; ".join(what for _, what in ex.answers)
