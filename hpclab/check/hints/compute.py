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
    Exercise(
        "timer",
        (("function", "my_timer(fn, device, warmup, repeat) returning seconds per call"),),
        (
            "An honest timer skips the slow first calls, waits for asynchronous work to finish, "
            "and reports a statistic that one slow sample does not move.",
            "Call fn `warmup` times untimed. Then for each of `repeat` samples: synchronize the "
            "device, read time.perf_counter(), call fn, synchronize again, read the clock.",
            "A warm-up loop, a loop that appends one duration per call to a list, and the "
            "median of that list (statistics.median), in seconds.",
        ),
    ),
    Exercise(
        "crossover",
        (
            (
                "function",
                "crossover_n(cpu_latency_s, cpu_rate, gpu_latency_s, gpu_rate) returning the "
                "matrix size where the GPU starts to win",
            ),
        ),
        (
            "Each device takes a fixed latency plus work / rate; the crossover is where the two "
            "times are equal.",
            "Setting t_cpu(w) = t_gpu(w) gives the work w = (latency_gpu - latency_cpu) / "
            "(1/rate_cpu - 1/rate_gpu); an n x n x n matmul is w = 2 n^3 FLOPs.",
            "Two lines: w from the four arguments, then n as the cube root of w / 2.",
        ),
    ),
)
