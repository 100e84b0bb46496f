"""Check for chapter 05's exercise (c): the stale-synchronous (bounded staleness) rule, tried on
every clock vector of 2-4 trainers (plausible wrong rules are recognised and named)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpclab.check import CheckResult, exercise_check, failed, passed

# --- (c) the bounded-staleness (SSP) rule -------------------------------------------------


def _grid() -> list[tuple[list[int], int, int]]:
    """Every clock vector of 2-4 trainers with clocks 0..3, every trainer, bounds 0..2: the
    slowest trainer anywhere (next to the one asking or not, or the one asking), ties, leads
    of exactly the bound and one more."""
    import itertools

    cases = []
    for n in (2, 3, 4):
        for clocks in itertools.product(range(4), repeat=n):
            for trainer in range(n):
                for bound in range(3):
                    cases.append((list(clocks), trainer, bound))
    return cases


# Plausible wrong rules, recognised by their answers on every case, with the advice for each.
_MISTAKES: tuple[tuple[Callable[[list[int], int, int], bool], str], ...] = (
    (
        lambda c, t, b: c[t] - min(c) < b,
        "a trainer exactly `bound` pushes ahead must still be allowed (use <=, not <); with "
        "bound=0 your rule would block everyone forever",
    ),
    (
        lambda c, t, b: c[t] <= b,
        "compare the trainer's lead over the slowest trainer with the bound, not its own clock",
    ),
    (
        lambda c, t, b: True,
        "your rule never blocks anyone (plain asynchronous, not SSP): a trainer too far ahead "
        "must wait",
    ),
    (
        lambda c, t, b: max(c) - c[t] <= b,
        "that measures how far the trainer is *behind* the fastest; SSP bounds how far it is "
        "ahead of the slowest",
    ),
    (
        lambda c, t, b: c[t] - c[t - 1] <= b,
        "you compared with the trainer's neighbour; the slowest trainer can be any of them",
    ),
    (
        lambda c, t, b: c[t] - c[(t + 1) % len(c)] <= b,
        "you compared with the trainer's neighbour; the slowest trainer can be any of them",
    ),
    (
        lambda c, t, b: c[t] - sum(c) / len(c) <= b,
        "you compared with the mean clock; SSP bounds the lead over the slowest trainer",
    ),
)


@exercise_check
def ssp_rule(allows: Callable[[list[int], int, int], Any]) -> CheckResult:
    """``allows(clocks, trainer, bound)`` on every small case (2-4 trainers, clocks 0-3, bounds
    0-2) and on a scripted schedule."""
    from hpclab.sgd.staleness import simulate_ssp, ssp_allows

    if not callable(allows):
        return failed(f"pass your function itself, got {type(allows).__name__}")
    cases = _grid()
    answers = []
    for clocks, trainer, bound in cases:
        try:
            answers.append(bool(allows(list(clocks), trainer, bound)))
        except Exception as exc:  # noqa: BLE001
            return failed(
                f"allows({clocks}, {trainer}, {bound}) raised {type(exc).__name__}: {exc}"
            )
    wanted = [ssp_allows(c, t, b) for c, t, b in cases]
    if answers != wanted:
        for rule, advice in _MISTAKES:
            if answers == [rule(list(c), t, b) for c, t, b in cases]:
                return failed(advice)
        k = next(i for i, (a, w) in enumerate(zip(answers, wanted, strict=True)) if a != w)
        clocks, trainer, bound = cases[k]
        wrong = sum(a != w for a, w in zip(answers, wanted, strict=True))
        return failed(
            f"{wrong} of {len(cases)} cases differ, for example clocks={clocks}, "
            f"trainer={trainer}, bound={bound}: you return {answers[k]}, expected {wanted[k]} "
            f"(trainer {trainer} has pushed {clocks[trainer]}, the slowest {min(clocks)})"
        )
    attempts = [0, 0, 0, 0, 1, 2, 1, 2, 1, 2]
    order, waiting = simulate_ssp(attempts, 3, 1, lambda c, t, b: bool(allows(c, t, b)))
    want_order, want_waiting = simulate_ssp(attempts, 3, 1, ssp_allows)
    if (order, waiting) != (want_order, want_waiting):
        return failed(f"on the scripted schedule your rule pushes {order}, expected {want_order}")
    return passed(
        f"all {len(cases)} cases (2-4 trainers, bounds 0-2) and the scripted schedule agree "
        f"(bound=1 order {order})."
    )
