"""Hints for chapter 06's time-to-accuracy exercise (check in ``hpclab/check/tta.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "check_time_to_target_plan",
        (
            (
                "function",
                "plan(steps, step_s, cores_per_rank, budget_core_h) returning (ranks, rule) or "
                "None",
            ),
        ),
        (
            "More ranks make a larger global batch: fewer steps to the target, but each step "
            "is slower (ranks wait for each other) and every rank's cores are billed.",
            "Wall time = steps to the target x seconds per step at that rank count; "
            "core-hours = ranks x cores per rank x wall time / 3600. A run with None never "
            "reached the target.",
            "Loop over the (ranks, rule) keys, skip None, keep the runs within the budget, "
            "return the one with the least wall time (None if none is left).",
        ),
    ),
)
