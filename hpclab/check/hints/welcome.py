"""Hints for chapter 00's exercises (checks in ``hpclab/check/welcome.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "peak",
        (("number", "my_peak_gflops, this allocation's fp32 peak in GFLOP/s"),),
        (
            "A peak is how many units work in parallel times how fast each one goes: cores x "
            "cycles per second x FLOPs per cycle.",
            "One fused multiply-add (FMA) is 2 FLOPs, and each core completes `fma_lanes` of them "
            "per cycle. Use the cores of your allocation and the measured clock, not the node's "
            "cores or the label's clock.",
            "A product of four numbers from the cell above: the cores, the clock in GHz (which "
            "makes the result GFLOP/s), the FMA lanes, and the FLOPs per FMA.",
        ),
    ),
    Exercise(
        "fraction_of_peak",
        (("number", "fraction, the measured GFLOP/s as a fraction of your peak"),),
        (
            "Efficiency is what you got divided by what is possible.",
            "What you got is probe.gflops, what is possible your peak from exercise 1; both are "
            "in GFLOP/s.",
            "One division, measured over peak: a number between 0 and 1, not a percentage.",
        ),
    ),
)
