"""Hints for chapter 01's exercises (checks in ``hpclab/check/compute.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "gemm_flops",
        (("number", "mm_flops, the FLOPs of C[m,n] = A[m,k] @ B[k,n]"),),
        (
            "Every element of C is a dot product: count the outputs and the work inside each.",
            "C has m x n elements; each is a dot product of length k, i.e. k multiply-adds, and "
            "a multiply-add is 2 FLOPs.",
            "A product of four factors: the FLOPs per multiply-add and this exercise's m, n, k.",
        ),
    ),
    Exercise(
        "conv_flops",
        (("function", "my_conv_flops(batch, c_in, h, w, c_out, kernel, stride, padding, groups)"),),
        (
            "A convolution is many small dot products, one per element of its output.",
            "The output has batch x c_out x h_out x w_out elements; each is a dot product over "
            "(c_in / groups) x kernel x kernel inputs, 2 FLOPs per term. h_out follows from the "
            "padded input size, the kernel size and the stride.",
            "Two lines for h_out and w_out (integer division by the stride, plus one), then return "
            "2 x the number of output elements x the length of one dot product.",
        ),
    ),
    Exercise(
        "peak_fraction",
        (("function", "fraction_of_peak(gflops, info) returning a fraction of the fp32 peak"),),
        (
            "As in chapter 00: measured divided by possible.",
            "The peak is usable cores x measured clock x fp32 FLOPs per cycle, all found in "
            "`info` (not the node's cores, not the label's clock: the check tries allocations "
            "where they differ); the measurement is `gflops`.",
            "Two lines: the peak from three entries of info, then one division.",
        ),
    ),
    Exercise(
        "add_intensity",
        (("number", "add_intensity, FLOPs per byte of c = a + b in fp32"),),
        (
            "Arithmetic intensity = FLOPs done / bytes moved to and from memory.",
            "Per element: one addition; a and b are read and c is written, 4 bytes each in fp32.",
            "One fraction: FLOPs per element over bytes per element.",
        ),
    ),
    Exercise(
        "roof",
        (("text", "add_bound, the string 'memory' or 'compute'"),),
        (
            "The roofline: a kernel is memory-bound left of the ridge point and compute-bound "
            "right of it.",
            "The ridge point is the peak (GFLOP/s) divided by the bandwidth (GB/s), in FLOP/byte; "
            "compare the kernel's intensity with it.",
            "A conditional expression giving 'memory' when the intensity is below the ridge "
            "point, else 'compute'.",
        ),
    ),
)
