"""Hints for chapter 03's exercises (checks in ``hpclab/check/profiling.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "top_self",
        (("function", "my_top_self(stats) returning (function name, share of the total time)"),),
        (
            "Self time is the time spent in a function's own body, without the functions it "
            "calls; cumulative time includes them.",
            "stats.stats maps (file, line, name) to (calls, primitive calls, tottime, cumtime, "
            "callers); tottime is the self time, stats.total_tt the whole profile's time.",
            "Find the key with the largest tottime (max with a key function), then return the "
            "third part of that key and its tottime divided by the total.",
        ),
    ),
    Exercise(
        "monitor_loss",
        (("function", "my_monitor_loss(model, loss_fn, x, y) returning a loss tensor"),),
        (
            "Autograd keeps each step's graph, and the activations it saved, alive for as long "
            "as a tensor refers to it.",
            "A running total of losses that still carry a grad_fn keeps every step's graph. "
            ".item() frees it but waits for the device every step; a loss computed with "
            "gradient tracking off has no graph at all.",
            "Compute the loss of model(x) against y inside a context manager that turns "
            "gradient tracking off, and return that tensor.",
        ),
    ),
    Exercise(
        "fast_dataset",
        (("class", "MyFastImages, a subclass of EncodedImages with __getitems__"),),
        (
            "Decoding sample by sample in Python is the bottleneck: decode the whole batch with "
            "one vectorised NumPy operation.",
            "A DataLoader calls __getitems__(indices) for a whole batch when the dataset has it. "
            "The encoded records are bytes in self.raw, the labels in self.labels; normalise as "
            "(b / 255 - MEAN) / STD, as __getitem__ does.",
            "Join the batch's records into one bytes object, view it as uint8, reshape it to "
            "(batch, pixels), normalise in one expression, cast to float32, and return it as a "
            "tensor with a tensor of the labels.",
        ),
    ),
    Exercise(
        "matmul_bound",
        (
            ("function", "my_bound(m, k, n, ridge) returning 'compute' or 'memory'"),
            ("function", "my_top_op(table) returning an operator name from the table"),
        ),
        (
            "Self time excludes the operators an operator calls; a matmul's place on the "
            "roofline is set by its arithmetic intensity.",
            "aten::linear calls another operator that does the work: rank by self_cpu_seconds "
            "(the check's other tables are in no particular order). "
            "An fp32 [m,k] @ [k,n] does 2 m k n FLOPs and moves 4 (m k + k n + m n) bytes.",
            "my_top_op: the operator of the row with the largest self time. my_bound: the "
            "intensity as FLOPs over bytes, 'compute' at or above the ridge, else 'memory'.",
        ),
    ),
)
