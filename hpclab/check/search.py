"""Checks for chapter 08's exercises: planning a job array, pruning a configuration space,
reading a search comparison."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from hpclab.check import CheckResult, exercise_check, failed, passed

# (n_trials, trial_s, start_s, slots): start-up dominates; long trials; many tiny trials; few slots.
ARRAY_CASES = [
    (100, 2.0, 30.0, 8),
    (16, 600.0, 1.0, 16),
    (1000, 0.5, 5.0, 4),
    (40, 60.0, 20.0, 64),
    (7, 10.0, 2.0, 3),
    (1, 30.0, 5.0, 4),  # one trial
    (
        12,
        5.0,
        60.0,
        1,
    ),  # one slot: one task with every trial (a search that stops at n-1 misses it)
]


def array_makespan(
    n_trials: int, trial_s: float, start_s: float, throttle: int, per_task: int
) -> float:
    """Wall time of a job array: ceil(n/per_task) tasks, ``throttle`` at a time, each paying the
    start-up once and running ``per_task`` trials (the model of the chapter; no queue wait)."""
    tasks = math.ceil(n_trials / per_task)
    waves = math.ceil(tasks / throttle)
    return waves * (start_s + per_task * trial_s)


def best_makespan(n_trials: int, trial_s: float, start_s: float, slots: int) -> float:
    return min(
        array_makespan(n_trials, trial_s, start_s, min(slots, math.ceil(n_trials / m)), m)
        for m in range(1, n_trials + 1)
    )


@exercise_check
def array_plan(plan: Callable[[int, float, float, int], tuple[int, int]]) -> CheckResult:
    """``plan(n_trials, trial_s, start_s, slots) -> (throttle, per_task)`` within 10% of the best
    wall time on every case, never asking for more concurrent tasks than there are slots."""
    if not callable(plan):
        return failed(f"plan_array should be a function, got {type(plan).__name__}")
    for n, t, s, slots in ARRAY_CASES:
        case = f"n_trials={n}, trial_s={t}, start_s={s}, slots={slots}"
        try:
            out = plan(n, t, s, slots)
        except Exception as err:  # noqa: BLE001 - feedback, not a traceback
            return failed(f"plan_array({case}) raised {type(err).__name__}: {err}")
        try:
            throttle, per_task = (int(v) for v in out)
        except (TypeError, ValueError):
            return failed(
                f"plan_array({case}) should return two whole numbers (throttle, per_task), "
                f"got {out!r}"
            )
        if throttle < 1 or per_task < 1:
            return failed(f"plan_array({case}) gave ({throttle}, {per_task}): both must be >= 1")
        if throttle > slots:
            return failed(
                f"for {case} you throttle at %{throttle}, more tasks at once than the {slots} slots "
                "you have: the extra tasks only wait in the queue (and count against your fair share)"
            )
        got = array_makespan(n, t, s, throttle, per_task)
        best = best_makespan(n, t, s, slots)
        if got > 1.10 * best:
            tasks = math.ceil(n / per_task)
            if per_task == 1 and s > t:
                why = f"each task pays {s:g} s of start-up for {t:g} s of work: put several trials in one task"
            elif tasks < min(slots, n) and throttle >= tasks:
                why = f"only {tasks} tasks for {slots} slots: fewer trials per task would use every slot"
            elif throttle < min(slots, tasks):
                why = f"a throttle of %{throttle} leaves slots idle while tasks wait"
            elif tasks % throttle == 0:
                why = (
                    f"your {tasks} tasks run in {tasks // throttle} full waves, each paying the "
                    f"{s:g} s start-up again: more trials per task need fewer waves"
                )
            else:
                why = "the last wave of tasks runs mostly empty: balance trials per task over the slots"
            return failed(
                f"for {case} your plan takes {got:.0f} s, the best takes {best:.0f} s: {why}"
            )
    return passed(f"your plan is within 10% of the best wall time on all {len(ARRAY_CASES)} cases.")


MACHINES = [
    {"cores": 8, "bf16": False},
    {"cores": 2, "bf16": True},
]
CANDIDATES = [
    {"ranks": r, "threads": t, "batch": b, "dtype": d}
    for r in (1, 2, 3, 4)
    for t in (1, 2, 4)
    for b in (32, 48, 64)
    for d in ("fp32", "bf16")
]


def _rule(c: dict[str, Any], m: dict[str, Any]) -> str:
    """The first hard constraint ``c`` breaks on ``m`` ("" if none)."""
    if c["ranks"] * c["threads"] > m["cores"]:
        return "ranks x threads > cores"
    if c["batch"] % c["ranks"]:
        return "batch not divisible by ranks"
    if c["dtype"] == "bf16" and not m["bf16"]:
        return "bf16 without native bf16"
    return ""


@exercise_check
def prune_rule(keep: Callable[[dict[str, Any], dict[str, Any]], bool]) -> CheckResult:
    """``keep(candidate, machine)`` must agree with the three hard rules on every candidate of
    two machines (8 cores without bf16, 2 cores with)."""
    if not callable(keep):
        return failed(f"keep should be a function, got {type(keep).__name__}")
    wrong: dict[str, tuple[dict, dict, bool]] = {}
    for m in MACHINES:
        for c in CANDIDATES:
            try:
                got = bool(keep(dict(c), dict(m)))
            except Exception as exc:  # noqa: BLE001 - the student's function, reported in one line
                return failed(f"keep({c}, {m}) raised {type(exc).__name__}: {exc}")
            rule = _rule(c, m)
            if got != (rule == ""):
                wrong.setdefault(rule or "kept by every rule", (c, m, got))
    if not wrong:
        return passed(
            f"keep agrees with the hard constraints on all {len(CANDIDATES) * len(MACHINES)} candidates."
        )
    rule, (c, m, got) = next(iter(wrong.items()))
    verdict = "kept" if got else "removed"
    if rule == "kept by every rule":
        advice = "it breaks none of the three rules, so it must stay"
    else:
        advice = f"it breaks the rule '{rule}'"
    more = f" (and {len(wrong) - 1} other kind(s) of mistake)" if len(wrong) > 1 else ""
    return failed(f"you {verdict} {c} on a machine {m}, but {advice}{more}.")


@exercise_check
def faster_strategy(answer: Any, records: list[dict[str, Any]], target: float) -> CheckResult:
    """``answer``: the strategy whose median search reached ``target`` in the fewest trials
    (computed from the very records the student plotted)."""
    from hpclab.search.compare import trials_to_reach

    strategies = list(dict.fromkeys(r["strategy"] for r in records))
    need = {s: trials_to_reach(records, s, target) for s in strategies}
    best = min(need.values())
    if not isinstance(answer, str) or answer not in need:
        return failed(f"answer with one of {', '.join(repr(s) for s in strategies)}")
    table = ", ".join(
        f"{s}: {'never' if math.isinf(n) else f'{n:g} trials'}" for s, n in need.items()
    )
    if math.isinf(best):
        return failed(f"no strategy reached {target} in this run ({table}): choose a higher target")
    if need[answer] == best:
        return passed(f"{answer} reached {target} first in the median search ({table}).")
    spent = (
        "did not reach it within the budget"
        if math.isinf(need[answer])
        else f"needed {need[answer]:g} trials"
    )
    return failed(
        f"the median {answer} search {spent}, and another strategy needed fewer: read, for each "
        f"median line, the first trial where it drops below {target}."
    )


def sha_epochs(n: int, min_epochs: int, max_epochs: int, eta: int) -> float:
    """Epochs synchronous successive halving trains in all: every rung keeps the best
    ``max(1, alive // eta)``, and a promoted trial resumes from its checkpoint, so it trains
    only the epochs between two rungs (:mod:`hpclab.search.early_stopping`)."""
    from hpclab.search.early_stopping import rungs

    total, before, alive = 0, 0, n
    for epoch in rungs(min_epochs, max_epochs, eta):
        total += alive * (epoch - before)
        before, alive = epoch, max(1, alive // eta)
    return total


def _retrained(n: int, r: int, big_r: int, eta: int) -> float:
    from hpclab.search.early_stopping import rungs

    total, alive = 0, n
    for epoch in rungs(r, big_r, eta):
        total, alive = total + alive * epoch, max(1, alive // eta)
    return total


def _kept_ceil(n: int, r: int, big_r: int, eta: int) -> float:
    from hpclab.search.early_stopping import rungs

    total, before, alive = 0, 0, n
    for epoch in rungs(r, big_r, eta):
        total, before, alive = total + alive * (epoch - before), epoch, math.ceil(alive / eta)
    return total


_SHA_MISTAKES = (
    (_retrained, "a promoted trial resumes from its checkpoint: at a rung it trains only the "
     "epochs since the previous rung, not the rung's epochs all over again"),
    (lambda n, r, big_r, eta: n * big_r, "that is the search without early stopping: every "
     "configuration trained to the end"),
    (_kept_ceil, "a rung keeps max(1, alive // eta) trials (rounded down), not ceil(alive / eta)"),
)  # fmt: skip
# (configurations, first rung's epochs, most epochs, eta): the chapter's 27; Li et al.'s 81 over
# 27 epochs; halving (eta 2); a last rung that is not a power of eta; too few to halve twice.
SHA_CASES = [(27, 1, 9, 3), (81, 1, 27, 3), (16, 1, 16, 2), (10, 2, 20, 3), (5, 1, 9, 3)]


@exercise_check
def sha_budget(fn: Callable[[int, int, int, int], float]) -> CheckResult:
    """``fn(n, min_epochs, max_epochs, eta)``: the epochs synchronous successive halving trains
    (:func:`sha_epochs`), on several cases; a plausible mistake gets its advice."""
    from hpclab.check import formula_check

    if not callable(fn):
        return failed("pass your function sha_epochs itself (not a number): it is tried on "
                      "several searches")  # fmt: skip

    def differs(case: tuple, got: float, want: float) -> str:
        n, r, big_r, eta = case
        return (f"for n={n}, min_epochs={r}, max_epochs={big_r}, eta={eta} you return {got:g} "
                f"epochs; expected {want:g} (rungs at {rungs_text(r, big_r, eta)})")  # fmt: skip

    return formula_check(
        fn, SHA_CASES, "sha_epochs", sha_epochs, _SHA_MISTAKES,
        "successive halving's budget: each rung trains the trials still alive up to its epochs "
        "(resumed, not retrained) and keeps 1 in eta; 27 configurations cost 63 epochs instead "
        "of 243.",
        differs,
    )  # fmt: skip


def rungs_text(min_epochs: int, max_epochs: int, eta: int) -> str:
    from hpclab.search.early_stopping import rungs

    return ", ".join(str(e) for e in rungs(min_epochs, max_epochs, eta)) + " epochs"
