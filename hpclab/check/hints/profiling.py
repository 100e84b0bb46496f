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
