"""Hints for chapter 07's exercises (checks in ``hpclab/check/cluster.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "check_jobspec",
        (("any", "my_spec, a JobSpec(...)"),),
        (
            "Slurm asks per node and per task, not per job: translate the need into those units.",
            "nodes counts nodes; gpus_per_node and ntasks_per_node count per node (one task, "
            "one training rank, per GPU); cpus_per_task counts the cores of one task; time is "
            "minutes or H:M:S; account is the allocation charged.",
            "One JobSpec(...) with six keyword arguments, each taken from the stated need.",
        ),
    ),
    Exercise(
        "check_atomic_save",
        (("function", "save(obj, path)"),),
        (
            "An atomic replace: the previous checkpoint stays whole until the new one is "
            "completely on disk.",
            "Write to a temporary file in the same directory, flush it and os.fsync it, then "
            "rename it over the final name with os.replace, which is atomic within one "
            "filesystem.",
            "A with-block around a named temporary file (kept after closing) in path's "
            "directory that saves, flushes and fsyncs; after it, one replace from the "
            "temporary name to path.",
        ),
    ),
    Exercise(
        "check_array_plan",
        (("function", "plan(n_trials, gpus) returning the --array value"),),
        (
            "A job array runs one task per index; a %throttle caps how many of them run at once.",
            "Slurm's range FIRST-LAST includes both ends, so N trials numbered from 0 end at "
            "N - 1; with one GPU per trial, the throttle is the number of GPUs.",
            "Return one formatted string: the index range, a percent sign, the throttle.",
        ),
    ),
)
