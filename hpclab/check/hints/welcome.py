"""Hints for chapter 00's exercises (checks in ``hpclab/check/welcome.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "peak",
        (("function", "peak_gflops(info) returning the allocation's fp32 peak in GFLOP/s"),),
        (
            "A peak is how many units work in parallel times how fast each one goes: cores x "
            "cycles per second x FLOPs per cycle.",
            "Count the physical cores your allocation may use (not the node's, and not SMT's "
            "logical CPUs, which share a core's FMA units), and the measured clock, not the "
            "label's: the check tries allocations where they differ. flops_per_cycle already "
            "counts each fused multiply-add (FMA) as 2 FLOPs.",
            "A product of three entries of info: the usable physical cores, the measured clock in "
            "GHz (which makes the result GFLOP/s) and the fp32 FLOPs per cycle.",
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
