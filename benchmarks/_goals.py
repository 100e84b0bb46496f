"""What a benchmark's ``main`` does with its goals (imported by them; not a benchmark itself).

Each goal is a function returning its result line(s) ``NAME: metric=VALUE goal>=TARGET PASS``;
:func:`report` runs them in order and prints every line at the end, or, when one raises, one
``NAME: could not measure`` line and exit code 1 (DESIGN.md's contract for benchmarks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

Goal = Callable[[], list[str]]


def goal_line(bench: str, metric: str, value: float, op: str, target: float) -> str:
    """One result line; ``op`` is ``>=`` or ``<=``."""
    ok = value >= target if op == ">=" else value <= target
    return f"{bench}: {metric}={value:.3f} goal{op}{target} {'PASS' if ok else 'FAIL'}"


def report(bench: str, goals: Iterable[Goal]) -> int:
    """Run ``goals`` in order and print their lines together; the script's exit code."""
    lines: list[str] = []
    for goal in goals:
        try:
            lines += goal()
        except Exception as exc:  # noqa: BLE001 - the benchmark reports, it does not crash
            name = getattr(goal, "__name__", None) or getattr(goal, "func", goal).__name__
            print(f"{bench}: could not measure {name}: {type(exc).__name__}: {exc}")
            return 1
    print("\n".join(lines))
    return 0
