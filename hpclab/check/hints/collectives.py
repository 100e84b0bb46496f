"""Hints for chapter 06's collectives exercises (checks in ``hpclab/check/collectives.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "doubling_cost",
        (("function", "my_doubling_s(nbytes, ranks, alpha_s, bandwidth_bps) returning seconds"),),
        (
            "The alpha-beta model: every sequential message pays the latency alpha, and its "
            "bytes at B bytes per second.",
            "Recursive doubling swaps the whole vector with one partner per step, log2 n steps "
            "when n is a power of two; otherwise the extra ranks hand over their vectors first "
            "and get the result back last.",
            "Count the steps (floor of log2 n, plus 2 when n is not a power of two), then "
            "return steps x (alpha + whole message / bandwidth).",
        ),
    ),
    Exercise(
        "nvls_wire",
        (("function", "my_wire_gbps(busbw_gbps, ranks) returning GB/s"),),
        (
            "nccl-tests prints busbw = algbw x 2(n-1)/n for every all-reduce, the bytes a ring "
            "moves per link; NVLS moves other bytes.",
            "Under NVLS each GPU sends its whole buffer up once for the switch to add, and its "
            "1/n of the sum up once more for the switch to copy to all: (n+1)/n per byte.",
            "First undo the printed factor (busbw / (2(n-1)/n) is algbw), then multiply algbw "
            "by the bytes per byte that cross one link.",
        ),
    ),
    Exercise(
        "hang_culprit",
        (("number", "my_culprit, a rank number"),),
        (
            "The rank whose error comes first is the one that noticed the problem, not always "
            "the one that caused it.",
            "TORCH_DISTRIBUTED_DEBUG=DETAIL prints the collective each rank called, with its "
            "TensorShape.",
            "Find the TensorShape that differs from the others' in the DETAIL message; the "
            "rank named beside it is the answer.",
        ),
    ),
)
