"""Chapter 06's time-to-accuracy check accepts the solution and rejects each shortcut with its
advice. Cost: well under a second (no training)."""

from __future__ import annotations

from hpclab.check import tta as check


def solution(steps, step_s, cores_per_rank, budget_core_h):
    best = None
    for (ranks, rule), n in steps.items():
        if n is None:
            continue
        wall = n * step_s[ranks]
        if ranks * cores_per_rank * wall / 3600 <= budget_core_h and (
            best is None or wall < best[0]
        ):
            best = (wall, ranks, rule)
    return None if best is None else best[1:]


def test_the_solution_passes():
    r = check.check_time_to_target_plan(solution)
    assert r.passed, r.message
    assert "checked on 5 tables" in r.message


def test_each_shortcut_is_named():
    advice = {
        "more core-hours than the budget": check.MISTAKES[0][0],
        "you ranked runs by steps": check.MISTAKES[1][0],
        "the bill counts cores, not ranks": check.MISTAKES[2][0],
        "never reached the target": check.MISTAKES[3][0],
        "you picked the cheapest run": check.MISTAKES[4][0],
    }
    for words, wrong in advice.items():
        r = check.check_time_to_target_plan(wrong)
        assert not r.passed and words in r.message, (words, r.message)


def test_other_wrong_answers_are_rejected_with_the_case_written_out():
    always_one = check.check_time_to_target_plan(lambda s, t, c, b: (1, "none"))
    assert not always_one.passed
    assert "the soonest run that fits is (4, 'linear') (165 s, 0.733 core-hours)" in (
        always_one.message
    )
    text = check.check_time_to_target_plan(lambda s, t, c, b: "4 ranks")
    assert not text.passed and "expected (ranks, rule)" in text.message
    raising = check.check_time_to_target_plan(lambda s, t, c, b: s[(3, "none")])
    assert not raising.passed and "plan raised KeyError" in raising.message
