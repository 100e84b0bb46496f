"""Hints for the single-device speed exercises (checks in ``hpclab/check/speed.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "mfu",
        (
            (
                "function",
                "my_mfu(flops_per_sample, samples_per_s, peak_gflops) returning a fraction",
            ),
        ),
        (
            "MFU is a fraction of peak, like the GEMM's in exercise (b): achieved over possible.",
            "Achieved: the FLOPs one sample costs (forward and backward, already counted) times "
            "the samples per second. Possible: the peak, given in GFLOP/s.",
            "One line: FLOPs per sample x samples/s, divided by the peak converted to FLOP/s.",
        ),
    ),
    Exercise(
        "break_even",
        (("function", "my_break_even(compile_s, eager_s, compiled_s) returning steps"),),
        (
            "Compiling costs once; every later step gives some of it back.",
            "Each compiled step saves eager_s - compiled_s seconds; the compile time is paid back "
            "after compile_s / that saving steps. If nothing is saved it never is: float('inf').",
            "Two lines: the saving per step, then the division (or inf when the saving is <= 0).",
        ),
    ),
    Exercise(
        "prefetch_memory",
        (("function", "my_prefetch_mib(workers, prefetch_factor, batch_size, sample_bytes)"),),
        (
            "Count the batches that wait in the queue, then their bytes.",
            "Each of the workers keeps prefetch_factor batches ready; a batch is batch_size "
            "samples of sample_bytes each. MiB = 2**20 bytes.",
            "One line: the product of the four arguments, divided by 2**20.",
        ),
    ),
)
