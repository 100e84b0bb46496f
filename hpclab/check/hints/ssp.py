"""Hints for chapter 05's bounded-staleness exercise (check in ``hpclab/check/ssp.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "ssp_rule",
        (("function", "my_ssp_allows(clocks, trainer, bound) returning True or False"),),
        (
            "Stale-synchronous parallel: a trainer may run ahead of the slowest trainer by at "
            "most `bound` clocks.",
            "The lead is this trainer's clock minus the smallest clock of all trainers (not a "
            "neighbour's, not the mean); a lead of exactly `bound` is still allowed.",
            "One comparison that returns a bool: the lead against the bound, inclusive.",
        ),
    ),
)
