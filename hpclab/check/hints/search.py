"""Hints for chapter 08's exercises (checks in ``hpclab/check/search.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "array_plan",
        (
            (
                "function",
                "plan_array(n_trials, trial_s, start_s, slots) returning (throttle, per_task)",
            ),
        ),
        (
            "Packing several trials into one task trades start-up cost against parallelism.",
            "Wall time = waves x (start-up + per_task x trial time): the trials fill "
            "ceil(n / per_task) tasks, at most `slots` of them (and never more than there are) "
            "run at once, and the tasks run in ceil(tasks / throttle) waves.",
            "Try every per_task from 1 to n_trials, compute each one's wall time with that "
            "model, keep the shortest, and return its (throttle, per_task).",
        ),
    ),
    Exercise(
        "prune_rule",
        (("function", "keep(candidate, machine) returning True or False"),),
        (
            "Hard constraints: a configuration that breaks one cannot run well on this machine, "
            "whatever its score would be.",
            "Three rules: ranks x threads fit in the machine's cores; the batch divides evenly "
            "among the ranks; bf16 needs a machine with native bf16.",
            "Three booleans from the candidate's and the machine's keys, combined with `and`.",
        ),
    ),
    Exercise(
        "faster_strategy",
        (("text", "first, a strategy name such as 'random'"),),
        (
            "Compare search strategies by the number of trials each needs to reach the target.",
            "Follow each strategy's median line from the left: the first trial where it drops "
            "below the target is its cost. trials_to_reach(records, strategy, target) computes "
            "it from the records you plotted.",
            "A dict from each strategy name to its trials needed, then the key with the "
            "smallest value.",
        ),
    ),
    Exercise(
        "sha_budget",
        (("function", "sha_epochs(n, min_epochs, max_epochs, eta) returning a number"),),
        (
            "Successive halving trains everyone a little, then only the best a little more.",
            "The rungs are at min_epochs, min_epochs x eta, min_epochs x eta^2, ... below "
            "max_epochs, then max_epochs; after each rung max(1, alive // eta) trials go on, and "
            "a promoted trial resumes from its checkpoint.",
            "Loop over the rungs: add alive x (this rung's epochs - the previous rung's), then "
            "alive = max(1, alive // eta).",
        ),
    ),
)
