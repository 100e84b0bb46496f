"""Hints for chapter 01's timing exercises (checks in ``hpclab/check/timing.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
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
