"""Checks for chapter 03's exercises: read a profile, and read an operator table against the
roofline (fixing the leak and the data path: :mod:`hpclab.check.patient`)."""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Callable
from typing import Any

from hpclab.check import CheckResult, as_number, error_line, exercise_check, failed, passed
from hpclab.check.patient import fast_dataset, monitor_loss  # noqa: F401 - check.monitor_loss

# --- (a) the function with the most self time ------------------------------------------------


def _spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def _light(n: int) -> int:
    return sum(range(n))


def _heavy(n: int) -> int:
    """Its own loop, then a loop half as long in ``_spin``: the top self-time function is not a
    leaf, so its cumulative time (about 1.5x its self time) is not its self time."""
    total = 0
    for i in range(n):
        total += i * i
    return total + _spin(n // 2)


def _outer(heavy: int, light: int, reps: int) -> int:
    total = 0
    for _ in range(reps):
        total += _heavy(heavy) + _light(light)
    return total


def _case_profiles() -> list[tuple[str, pstats.Stats]]:
    """Profiles whose top self-time function differs (and differs from the top cumulative);
    in the first it calls another function, so its cumulative time is not its self time."""
    out = []
    for label, call in (
        ("a Python loop under two wrappers", lambda: _outer(200_000, 1000, 3)),
        ("a builtin sum that dominates", lambda: _outer(2_000, 2_000_000, 3)),
    ):
        prof = cProfile.Profile()
        prof.runcall(call)
        out.append((label, pstats.Stats(prof)))
    from hpclab.profiling.patient import train

    prof = cProfile.Profile()
    prof.runcall(lambda: train("slow-data", steps=8, samples=512))
    out.append(("the patient with slow-data", pstats.Stats(prof)))
    return out


def _truth(stats: pstats.Stats) -> tuple[str, float, str, float]:
    """(top self-time function, its self share, top cumulative function, its cumulative share)."""
    raw = stats.stats  # type: ignore[attr-defined]
    func = max(raw, key=lambda f: raw[f][2])
    by_cum = max((f for f in raw if raw[f][4]), key=lambda f: raw[f][3])
    total = stats.total_tt  # type: ignore[attr-defined]
    return func[2], raw[func][2] / total, by_cum[2], raw[func][3] / total


@exercise_check
def top_self(fn: Callable[[pstats.Stats], tuple[str, float]]) -> CheckResult:
    """``fn(stats) -> (function name, share of total time)`` for the top self-time function;
    checked on three profiles against pstats' own numbers."""
    for label, stats in _case_profiles():
        want_name, want_share, cum_name, cum_share = _truth(stats)
        try:
            got = fn(stats)
            name, share = got
        except Exception as err:  # noqa: BLE001 - feedback, not a traceback
            return failed(f"on {label}: your function raised {error_line(err)}")
        share = as_number(share, "the share")
        if isinstance(share, CheckResult):
            return share
        if str(name) != want_name and want_name not in str(name):
            if str(name) == cum_name or cum_name in str(name):
                return failed(
                    f"on {label}: {name!r} has the most *cumulative* time (it includes everything "
                    "it calls). Self time (pstats' tottime, index 2) counts only its own body."
                )
            return failed(f"on {label}: {name!r} is not the function with the most self time")
        if 1.5 < share <= 100 and abs(share / 100 - want_share) < 0.02:
            return failed(f"on {label}: give the share as a fraction of 1, not in percent")
        if abs(share - want_share) > 0.02 and abs(share - cum_share) <= 0.02:
            return failed(
                f"on {label}: share {share:.3f} is {name!r}'s *cumulative* time (pstats' "
                f"cumtime, index 3) over the total; its self time (tottime, index 2) gives "
                f"{want_share:.3f}. The two agree only for a function that calls nothing"
            )
        if abs(share - want_share) > 0.02:
            return failed(
                f"on {label}: share {share:.3f} is off; divide that function's self time by the "
                "profile's total time (stats.total_tt), not by its cumulative time"
            )
    return passed("you read the top self-time function and its share right on all three profiles.")


# --- (d) the operator table and the roofline ------------------------------------------------

BOUND_CASES = (
    (64, 784, 128, 12.0),  # the patient's first layer on a CPU like this one
    (1, 784, 128, 12.0),  # one sample: a matrix-vector product
    (2048, 2048, 2048, 12.0),
    (64, 784, 128, 25.0),  # the same layer on a machine with a higher ridge point (a GPU)
    (16, 512, 512, 7.0),
    (72, 72, 72, 12.0),  # exactly on the ridge (2 x 72^3 / (4 x 3 x 72^2) = 12): > vs >= differ
)


def _intensity(m: int, k: int, n: int) -> float:
    return 2 * m * k * n / (4 * (m * k + k * n + m * n))


# Operator tables in no particular order: a parent (aten::linear, aten::conv2d) with the most
# total time over the leaf that does the work, and a top operator other than aten::addmm.
OP_TABLES = (
    (
        ("aten::relu", 0.002, 0.002),
        ("aten::linear", 0.001, 0.08),
        ("aten::mm", 0.03, 0.03),
        ("aten::addmm", 0.05, 0.055),
        ("aten::copy_", 0.004, 0.004),
    ),
    (
        ("aten::max_pool2d", 0.01, 0.012),
        ("aten::conv2d", 0.0005, 0.09),
        ("aten::addmm", 0.008, 0.009),
        ("aten::mkldnn_convolution", 0.07, 0.075),
    ),
)


def _op_mistake(top_fn: Callable[[Any], str], table: Any) -> str | None:
    """None when ``top_fn(table)`` is the operator with the most self CPU time; else why not."""
    rows = list(table.to_dict("records") if hasattr(table, "to_dict") else table)
    want = max(rows, key=lambda r: r["self_cpu_seconds"])["operator"]
    by_total = max(rows, key=lambda r: r["cpu_total_seconds"])["operator"]
    try:
        got = top_fn(table.copy() if hasattr(table, "copy") else list(table))
    except Exception as err:  # noqa: BLE001
        return f"your operator function raised {error_line(err)}"
    if got == want:
        return None
    names = ", ".join(r["operator"] for r in rows)
    if got == by_total:
        return (
            f"in the table ({names}) {got!r} has the most *total* time (with the operators it "
            "calls); sort by self time"
        )
    if got == rows[0]["operator"]:
        return (
            f"{got!r} is the first row of a table ({names}) whose rows are not in order of self "
            "time: rank the rows by self_cpu_seconds"
        )
    return f"{got!r} is not the operator with the most self CPU time in the table ({names})"


@exercise_check
def matmul_bound(
    fn: Callable[[int, int, int, float], str], top_fn: Callable[[Any], str], table: Any
) -> CheckResult:
    """``fn(m, k, n, ridge)`` -> ``"compute"`` or ``"memory"`` for an fp32 ``[m,k] @ [k,n]``
    whose bytes are its three matrices; ``top_fn(table)`` -> the table's top operator by self
    time, tried on the student's table and on tables in another order."""
    import pandas as pd

    if not callable(top_fn):
        return failed(
            "pass your function itself, e.g. check.matmul_bound(my_bound, my_top_op, table)"
        )
    columns = ["operator", "self_cpu_seconds", "cpu_total_seconds"]
    for t in (table, *(pd.DataFrame(rows, columns=columns) for rows in OP_TABLES)):
        wrong = _op_mistake(top_fn, t)
        if wrong:
            return failed(wrong)
    for m, k, n, ridge in BOUND_CASES:
        want = "compute" if _intensity(m, k, n) >= ridge else "memory"
        try:
            got = fn(m, k, n, ridge)
        except Exception as err:  # noqa: BLE001
            return failed(f"your function raised {error_line(err)} for m,k,n={m},{k},{n}")
        if got not in ("compute", "memory"):
            return failed(f"answer 'compute' or 'memory', got {got!r}")
        if got != want and _intensity(m, k, n) == ridge:
            return failed(
                f"[{m},{k}] @ [{k},{n}] has an intensity of exactly {ridge:g} FLOP/byte, the "
                "ridge point itself: there both roofs meet and the kernel already reaches the "
                "compute peak, so it counts as compute-bound (use >=, not >)"
            )
        if got != want:
            return failed(
                f"[{m},{k}] @ [{k},{n}] with a ridge at {ridge} FLOP/byte: expected {want}. "
                "Intensity = FLOPs (2 per multiply-add) / bytes moved (4 per fp32 element of "
                "A, B and C); at or above the ridge point a kernel is compute-bound."
            )
    return passed(
        f"right operator (most self time) in your table and in {len(OP_TABLES)} others, and "
        f"{len(BOUND_CASES)} matmuls placed on the roofline right."
    )
