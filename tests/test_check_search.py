"""Chapter 08's checks accept the solutions and reject plausible wrong answers, for the right reason."""

from __future__ import annotations

import math

from hpclab.check.search import ARRAY_CASES, array_plan, faster_strategy, prune_rule


def plan_solution(n, trial_s, start_s, slots):
    best = None
    for per_task in range(1, n + 1):
        throttle = min(slots, math.ceil(n / per_task))
        tasks = math.ceil(n / per_task)
        wall = math.ceil(tasks / throttle) * (start_s + per_task * trial_s)
        if best is None or wall < best[0]:
            best = (wall, throttle, per_task)
    return best[1], best[2]


def test_array_plan_accepts_the_solution():
    assert array_plan(plan_solution).passed


def test_array_plan_rejects_one_trial_per_task_when_start_up_dominates():
    r = array_plan(lambda n, t, s, slots: (slots, 1))
    assert not r.passed and "start-up" in r.message and "several trials in one task" in r.message


def test_array_plan_rejects_a_throttle_above_the_slots():
    r = array_plan(lambda n, t, s, slots: (2 * slots, plan_solution(n, t, s, slots)[1]))
    assert not r.passed and "more tasks at once than the" in r.message


def test_array_plan_rejects_everything_in_one_task():
    r = array_plan(lambda n, t, s, slots: (1, n))
    assert not r.passed and "fewer trials per task" in r.message


def test_array_plan_rejects_a_throttle_that_leaves_slots_idle():
    r = array_plan(lambda n, t, s, slots: (1, plan_solution(n, t, s, slots)[1]))
    assert not r.passed and "leaves slots idle" in r.message


def test_array_plan_is_not_fooled_by_one_case():
    """Right on the first case only (a constant answer) is not enough."""
    first = plan_solution(*ARRAY_CASES[0])
    assert not array_plan(lambda *a: first).passed


def _search(n, trial_s, start_s, slots, per_tasks):
    """The solution's search over the given trials-per-task counts."""
    best = None
    for per_task in per_tasks:
        tasks = math.ceil(n / per_task)
        throttle = min(slots, tasks)
        wall = math.ceil(tasks / throttle) * (start_s + per_task * trial_s)
        if best is None or wall < best[0]:
            best = (wall, throttle, per_task)
    return best[1], best[2]


def test_array_plan_tries_one_trial_and_one_slot():
    # a search that stops one short of n_trials: right whenever there are several slots
    stops_short = lambda n, t, s, slots: _search(n, t, s, slots, range(1, n))  # noqa: E731
    r = array_plan(stops_short)  # with one trial it finds nothing: said, not raised
    assert not r.passed and "n_trials=1," in r.message and "raised TypeError" in r.message
    # made safe for one trial, it still misses the one-slot case: every trial in one task
    r = array_plan(lambda n, t, s, slots: _search(n, t, s, slots, range(1, max(2, n))))
    assert not r.passed and "slots=1" in r.message, r.message
    assert "takes 180 s, the best takes 120 s" in r.message and "2 full waves" in r.message


def test_array_plan_says_what_a_plan_that_returns_nothing_gave():
    r = array_plan(lambda n, t, s, slots: None)
    assert not r.passed and "two whole numbers" in r.message and "None" in r.message


def keep_solution(c, m):
    return (
        c["ranks"] * c["threads"] <= m["cores"]
        and c["batch"] % c["ranks"] == 0
        and (c["dtype"] != "bf16" or m["bf16"])
    )


def test_prune_rule_accepts_the_solution():
    assert prune_rule(keep_solution).passed


def test_prune_rule_rejects_each_missing_rule_naming_it():
    no_div = prune_rule(
        lambda c, m: c["ranks"] * c["threads"] <= m["cores"] and (c["dtype"] != "bf16" or m["bf16"])
    )
    assert not no_div.passed and "batch not divisible by ranks" in no_div.message
    added = prune_rule(
        lambda c, m: (
            c["ranks"] + c["threads"] <= m["cores"]
            and c["batch"] % c["ranks"] == 0
            and (c["dtype"] != "bf16" or m["bf16"])
        )
    )
    assert not added.passed and "ranks x threads > cores" in added.message
    no_bf16 = prune_rule(
        lambda c, m: c["ranks"] * c["threads"] <= m["cores"] and c["batch"] % c["ranks"] == 0
    )
    assert not no_bf16.passed and "bf16 without native bf16" in no_bf16.message
    too_strict = prune_rule(lambda c, m: keep_solution(c, m) and c["dtype"] == "fp32")
    assert not too_strict.passed and "must stay" in too_strict.message


def _records(curves: dict[str, list[list[float]]]) -> list[dict]:
    out = []
    for strategy, seeds in curves.items():
        for seed, losses in enumerate(seeds):
            best = math.inf
            for trial, loss in enumerate(losses):
                best = min(best, loss)
                out.append(
                    {"strategy": strategy, "seed": seed, "trial": trial, "best_so_far": best}
                )
    return out


def test_faster_strategy_reads_the_median_not_one_lucky_seed():
    recs = _records(
        {
            "random": [[0.9, 0.4, 0.3], [0.9, 0.8, 0.45], [0.7, 0.6, 0.6]],  # lucky seed 0
            "tpe": [[0.9, 0.45, 0.3], [0.8, 0.45, 0.4], [0.9, 0.45, 0.3]],
        }
    )
    assert faster_strategy("tpe", recs, 0.5).passed
    wrong = faster_strategy("random", recs, 0.5)
    assert not wrong.passed and "needed 3 trials" in wrong.message
    assert "tpe" not in wrong.message  # the hint does not hand over the answer
    assert not faster_strategy("grid", recs, 0.5).passed  # not in the run
    assert "choose a higher target" in faster_strategy("tpe", recs, 0.1).message


def test_the_suggested_target_is_reached_by_some_median_search():
    from hpclab.search.compare import suggested_target, trials_to_reach

    recs = _records({"grid": [[2.0, 1.9], [2.0, 1.8]], "random": [[1.5, 0.9], [1.2, 1.1]]})
    target = suggested_target(recs)
    assert min(trials_to_reach(recs, s, target) for s in ("grid", "random")) < math.inf
    assert faster_strategy("random", recs, target).passed


def test_sha_budget_accepts_the_solution_and_rejects_plausible_mistakes():
    from hpclab.check.search import sha_budget

    def solution(n, r, big_r, eta):
        total, before, alive, e = 0, 0, n, r
        while True:
            e = min(e, big_r)
            total += alive * (e - before)
            if e == big_r:
                return total
            before, alive, e = e, max(1, alive // eta), e * eta

    assert sha_budget(solution).passed

    def retrained(n, r, big_r, eta):  # every rung trains from scratch
        total, alive, e = 0, n, r
        while True:
            e = min(e, big_r)
            total += alive * e
            if e == big_r:
                return total
            alive, e = max(1, alive // eta), e * eta

    got = sha_budget(retrained)
    assert not got.passed and "resumes from its checkpoint" in got.message
    got = sha_budget(lambda n, r, big_r, eta: n * big_r)
    assert not got.passed and "without early stopping" in got.message
    got = sha_budget(lambda n, r, big_r, eta: n * r)  # only the first rung
    assert not got.passed and "n=27, min_epochs=1, max_epochs=9, eta=3" in got.message
    assert "expected 63" in got.message and "rungs at 1, 3, 9 epochs" in got.message
    assert not sha_budget(63).passed
