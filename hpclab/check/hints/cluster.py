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
    Exercise(
        "check_run_cost",
        (
            ("function", "train_hours(dataset_images, epochs, sample_images, sample_seconds)"),
            ("function", "run_cost(hours_one_gpu, gpus, efficiency, usd_per_gpu_hour)"),
        ),
        (
            "Time is work divided by rate; a bill is GPU-hours times the price of one.",
            "The rate is sample_images / sample_seconds images per second; the work is every "
            "image once per epoch. On g GPUs at efficiency e the run takes hours / (g x e) of "
            "wall time, and all g GPUs are billed for it.",
            "train_hours: dataset_images x epochs / rate / 3600. run_cost: the wall hours, times "
            "gpus, times the price.",
        ),
    ),
)
