"""Hints for chapter 06's cost-model exercises (checks in ``hpclab/check/cost_model.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "busbw",
        (("function", "my_busbw_gbps(nbytes, seconds, ranks) returning GB/s"),),
        (
            "Bus bandwidth rescales an all-reduce's speed to what each link carries, so that "
            "runs on different rank counts compare.",
            "algbw = bytes / seconds; in a ring all-reduce each link carries 2(n-1)/n of the "
            "message (nccl-tests' busbw). GB means 1e9 bytes.",
            "Two lines: algbw in GB/s, then algbw times the factor for `ranks`.",
        ),
    ),
    Exercise(
        "efficiency_prediction",
        (
            (
                "function",
                "my_efficiency(compute_s, nbytes, ranks, alpha_s, bandwidth_bps) returning a "
                "fraction",
            ),
        ),
        (
            "Weak-scaling efficiency without overlap = compute time / (compute time + "
            "communication time).",
            "The alpha-beta model of a ring all-reduce: 2(n-1) messages, each paying the "
            "latency alpha, each carrying m/n bytes at B bytes per second.",
            "Communication = the number of messages x (alpha + one message's bytes / "
            "bandwidth); return compute over compute plus communication.",
        ),
    ),
)
