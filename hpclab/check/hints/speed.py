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
)
