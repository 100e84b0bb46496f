"""Checks for chapter 09 part 1's exercises: the memory formula of a training step, and where to
checkpoint under a memory budget; each a function tried on several cases (mistakes are named)."""

from __future__ import annotations

import math
from typing import Any

from hpclab.check import CheckResult, call_all, exercise_check, failed, formula_check, passed
from hpclab.memory.model import bytes_per_param


def _step_bytes(params: float, optimizer: str, precision: str, batch: int, act: float) -> float:
    return bytes_per_param(optimizer, precision) * params + batch * act


_STATES = {"sgd": 0, "sgd-momentum": 1, "adam": 2, "adamw": 2}
_FORMULA_MISTAKES = (
    (
        lambda p, o, pr, b, a: (8 if pr == "fp32" else 4) * p + b * a,
        "the optimizer's state is missing: momentum keeps 1 fp32 value per parameter, Adam 2",
    ),
    (
        lambda p, o, pr, b, a: _step_bytes(p, o, "fp32", b, a) / (2 if pr == "mixed" else 1),
        "mixed precision does not halve everything: the optimizer keeps fp32 master weights "
        "and fp32 states (2 + 2 + 4 + 4 x states bytes per parameter)",
    ),
    (
        lambda p, o, pr, b, a: (8 if pr == "fp32" else 4) * p + 4 * _STATES[o] * p + b * a,
        "under mixed precision the fp32 master copy of the weights (4 bytes per parameter) is "
        "kept besides the half weights",
    ),
    (
        lambda p, o, pr, b, a: bytes_per_param(o, pr) * p + a,
        "activations grow with the batch: multiply the bytes per sample by the batch size",
    ),
    (
        lambda p, o, pr, b, a: bytes_per_param(o, pr) * p,
        "the activations (batch x bytes per sample) are missing",
    ),
    (
        lambda p, o, pr, b, a: (4 + 4 * (1 + _STATES[o])) * p + b * a,
        "each optimizer state is one fp32 value per parameter; the gradients count too "
        "(4 bytes each in fp32)",
    ),
)


@exercise_check
def step_memory(fn: Any) -> CheckResult:
    """``fn(params, optimizer, precision, batch, activation_bytes_per_sample)``: the bytes of a
    training step (weights, gradients, optimizer state, activations), tried on several models,
    optimizers (sgd, sgd-momentum, adam) and precisions (fp32, mixed)."""
    if not callable(fn):
        return failed("pass your function my_step_bytes itself (not a number): it is tried on "
                      "several optimizers and precisions")  # fmt: skip
    cases = [
        (1.0e9, "adam", "mixed", 8, 2.0e9),  # activations as large as the states
        (7.0e9, "adam", "fp32", 1, 5.0e10),
        (1.2e8, "sgd-momentum", "fp32", 64, 3.0e7),
        (3.0e8, "sgd", "mixed", 32, 5.0e7),
        (5.0e7, "sgd-momentum", "mixed", 128, 4.0e6),
    ]

    def differs(case: tuple, got: float, want: float) -> str:
        p, o, pr, b, a = case
        return (f"for {p:.3g} parameters, {o}, {pr}, batch {b} and {a:.3g} activation bytes per "
                f"sample you return {got:.4g} bytes; expected {bytes_per_param(o, pr)} x "
                f"{p:.3g} + {b} x {a:.3g} = {want:.4g}")  # fmt: skip

    return formula_check(
        fn, cases, "my_step_bytes", _step_bytes, _FORMULA_MISTAKES,
        "bytes per parameter (4+4+4 x states in fp32, 2+2+4+4 x states mixed: 16 for Adam) x "
        "parameters + batch x activations per sample, on every case.",
        differs,
    )  # fmt: skip


def _segment_bytes(depth: int, k: int, a_in: float, a_block: float) -> float:
    """Activations with checkpointing in segments of k: kept segment inputs + one segment
    recomputed in full."""
    return math.ceil(depth / k) * a_in + k * a_block


def _best_segment(depth: int, a_in: float, a_block: float, budget: float) -> int:
    if depth * a_block <= budget:
        return 0
    best = min(range(1, depth + 1), key=lambda k: (_segment_bytes(depth, k, a_in, a_block), k))
    return best if _segment_bytes(depth, best, a_in, a_block) <= budget else -1


_SEGMENT_MISTAKES = (
    (
        lambda d, i, b, m: max(1, round(math.sqrt(d))),
        "k = sqrt(L) is best only when a block's input is as large as all its activations; "
        "here minimise ceil(L/k) x input + k x block over k, and first ask whether no "
        "checkpointing fits",
    ),
    (
        lambda d, i, b, m: 1,
        "checkpointing every block keeps all L inputs; longer segments keep fewer",
    ),
    (
        lambda d, i, b, m: min(range(1, d + 1), key=lambda k: (_segment_bytes(d, k, i, b), k)),
        "first ask whether the plain run fits the budget (then 0: no recomputation at all), and "
        "say -1 when even the best segment length does not fit",
    ),
)


@exercise_check
def checkpoint_segments(fn: Any) -> CheckResult:
    """``fn(depth, input_bytes, block_bytes, budget_bytes)``: 0 when all activations fit
    (``depth x block_bytes``), else the segment length k with the least activation memory
    (``ceil(depth/k) x input_bytes + k x block_bytes``; the smaller k on a tie) if it fits, else
    -1. Tried on several depths, block sizes and budgets."""
    if not callable(fn):
        return failed("pass your function my_segments itself (not a number): it is tried on "
                      "several depths and budgets")  # fmt: skip
    cases = [(16, 1.0, 4.0, 100.0), (24, 2.0, 10.0, 100.0), (48, 1.0, 1.0, 20.0),
             (12, 1.0, 2.0, 30.0), (64, 3.0, 5.0, 50.0), (9, 1.0, 1.0, 6.0)]  # fmt: skip
    got = call_all(fn, cases, "my_segments")
    if isinstance(got, CheckResult):
        return got
    want = [_best_segment(*c) for c in cases]
    if got == want:
        return passed("0 when the plain run fits, else the segment length with the least memory "
                      "(or -1), on every case.")  # fmt: skip
    for model, advice in _SEGMENT_MISTAKES:
        if all(g == model(*c) for g, c in zip(got, cases, strict=True)):
            return failed(advice + ".")
    k = next(i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w)
    d, i, b, m = cases[k]
    return failed(f"for depth {d}, input {i:g}, block {b:g} and budget {m:g} you return "
                  f"{got[k]:g}; expected {want[k]} (no checkpointing needs {d * b:g})")  # fmt: skip
