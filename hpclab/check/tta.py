"""Check for chapter 06's time-to-accuracy exercise: choose the rank count and learning-rate
rule that reach the target soonest in wall time within a budget of core-hours.

The student's ``plan(steps, step_s, cores_per_rank, budget_core_h)`` gets

- ``steps``: ``{(ranks, rule): steps to the target, or None where that run never reached it}``
  (the global batch grows with the ranks, so steps depend on both),
- ``step_s``: ``{ranks: seconds per step}`` (measured or modelled),

and returns ``(ranks, rule)``, or ``None`` when no run fits the budget. It is tried on several
tables, each built so that one shortcut picks wrongly: ignoring the budget, ranking by steps
instead of time, counting ranks instead of cores in the bill, or trusting a run that never
reached the target.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpclab.check import CheckResult, error_line, exercise_check, failed, passed

Table = dict[tuple[int, str], int | None]


def wall_s(steps: Table, step_s: dict[int, float], ranks: int, rule: str) -> float | None:
    n = steps.get((ranks, rule))
    return None if n is None else n * step_s[ranks]


def core_hours(ranks: int, cores_per_rank: int, seconds: float) -> float:
    return ranks * cores_per_rank * seconds / 3600


def best_plan(
    steps: Table, step_s: dict[int, float], cores_per_rank: int, budget_core_h: float
) -> tuple[int, str] | None:
    """The reference: the soonest run (wall time = steps x step time) among those that reached
    the target and whose core-hours (ranks x cores per rank x wall time) fit the budget."""
    fits = [
        (t, ranks, rule)
        for (ranks, rule) in steps
        if (t := wall_s(steps, step_s, ranks, rule)) is not None
        and core_hours(ranks, cores_per_rank, t) <= budget_core_h
    ]
    return min(fits)[1:] if fits else None


def _by(key: Callable[[int, int, float], float], budget: bool = True) -> Callable[..., Any]:
    """A plausible mistake: the run that minimises ``key(steps, ranks, wall)``."""

    def plan(steps: Table, step_s: dict, cpr: int, b: float) -> tuple[int, str] | None:
        ok = [
            (key(steps[r, u], r, t), r, u)
            for (r, u) in steps
            if (t := wall_s(steps, step_s, r, u)) is not None
            and (not budget or core_hours(r, cpr, t) <= b)
        ]
        return min(ok)[1:] if ok else None

    return plan


def _ranks_billed(steps: Table, step_s: dict, cpr: int, b: float) -> tuple[int, str] | None:
    return best_plan(steps, step_s, 1, b)


def _unreached_as_zero(steps: Table, step_s: dict, cpr: int, b: float) -> tuple[int, str] | None:
    return best_plan({k: v or 0 for k, v in steps.items()}, step_s, cpr, b)


MISTAKES = (
    (_by(lambda n, r, t: t, budget=False), "you picked the soonest run but it costs more "
     "core-hours than the budget: core-hours = ranks x cores per rank x wall time / 3600"),
    (_by(lambda n, r, t: n), "you ranked runs by steps; rank them by wall time "
     "= steps x the step time at that rank count (more ranks: fewer steps, slower steps)"),
    (_ranks_billed, "the bill counts cores, not ranks: multiply by cores_per_rank"),
    (_unreached_as_zero, "a run with None never reached the target: leave it out, it is not "
     "free"),
    (_by(lambda n, r, t: core_hours(r, 1, t)), "you picked the cheapest run; the question is the "
     "soonest one that fits the budget"),
)  # fmt: skip


def _cases() -> list[tuple[Table, dict[int, float], int, float]]:
    """Tables where each shortcut above goes wrong at least once (steps to a target for
    ranks x 256 samples a step; a step gets slower as ranks wait for each other)."""
    step_s = {1: 0.10, 2: 0.12, 4: 0.15, 8: 0.22}
    steps: Table = {
        (1, "none"): 4000, (1, "linear"): 4000,
        (2, "none"): 2900, (2, "linear"): 2050,
        (4, "none"): 2600, (4, "linear"): 1100,
        (8, "none"): 2500, (8, "linear"): None,  # the linear rule diverged at 8 ranks
    }  # fmt: skip
    sqrt = {(r, "sqrt"): n for (r, u), n in steps.items() if u == "none" and r < 8}
    steps_sqrt = steps | {k: int(v * 0.8) for k, v in sqrt.items()} | {(8, "sqrt"): 900}
    return [
        (steps, step_s, 4, 1.0),  # 4 ranks, linear: 165 s, 0.73 core-hours
        (steps, step_s, 4, 0.5),  # 1 rank: 2 ranks (0.55 core-hours) no longer fit
        (steps, step_s, 16, 2.0),  # 16 cores a rank: 1 rank (1.78 core-hours)
        (steps_sqrt, step_s, 2, 1.0),  # 4 ranks, linear; 8 with sqrt has fewer steps, slower
        (steps, step_s, 4, 0.01),  # nothing fits: None
    ]


def _answer(got: Any) -> tuple[int, str] | None | CheckResult:
    if got is None:
        return None
    try:
        ranks, rule = got
        return int(ranks), str(rule)
    except (TypeError, ValueError):
        return failed(f"plan returned {got!r}; expected (ranks, rule), or None if nothing fits")


def _as_good(got: tuple[int, str] | None, want: tuple[int, str] | None, case: tuple) -> bool:
    """``got`` is a best plan too: a run that reached the target, fits, and is as soon (ties
    between rules that share a step count, say at one rank, are all right)."""
    steps, step_s, cpr, budget = case
    if want is None or got is None:
        return got == want
    t = wall_s(steps, step_s, *got) if got in steps else None
    return (
        t is not None
        and core_hours(got[0], cpr, t) <= budget
        and abs(t - wall_s(steps, step_s, *want)) < 1e-9
    )


@exercise_check
def check_time_to_target_plan(fn: Any) -> CheckResult:
    """``fn(steps, step_s, cores_per_rank, budget_core_h) -> (ranks, rule) | None``, tried on
    several tables; a wrong choice is met with the shortcut it reproduces."""
    cases = _cases()
    got = []
    for case in cases:
        try:
            answer = _answer(fn(*case))
        except Exception as err:  # noqa: BLE001 - a student's bug becomes feedback
            return failed(f"plan raised {error_line(err)} on a table of {len(case[0])} runs")
        if isinstance(answer, CheckResult):
            return answer
        got.append(answer)
    want = [best_plan(*c) for c in cases]
    if all(_as_good(g, w, c) for g, w, c in zip(got, want, cases, strict=True)):
        return passed(
            "the soonest run within the budget: wall time = steps x step time, core-hours = "
            "ranks x cores per rank x wall time, runs that never reached the target left out "
            f"(checked on {len(cases)} tables)."
        )
    for wrong, advice in MISTAKES:
        if got == [wrong(*c) for c in cases] and got != want:
            return failed(advice + ".")
    k = next(i for i, (g, w, c) in enumerate(zip(got, want, cases, strict=True))
             if not _as_good(g, w, c))  # fmt: skip
    steps, step_s, cpr, budget = cases[k]
    return failed(
        f"with {cpr} cores per rank and {budget:g} core-hours you chose {got[k]}; the soonest "
        f"run that fits is {want[k]}"
        + (
            f" ({wall_s(steps, step_s, *want[k]):.0f} s, "
            f"{core_hours(want[k][0], cpr, wall_s(steps, step_s, *want[k])):.3g} core-hours)"
            if want[k]
            else ""
        )
    )
