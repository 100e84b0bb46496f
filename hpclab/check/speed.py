"""Checks for the single-device speed exercises: model FLOPs utilisation (chapter 01), a
function tried on several runs (plausible mistakes are named)."""

from __future__ import annotations

from typing import Any

from hpclab.check import CheckResult, exercise_check, failed, formula_check


def _mfu(flops_per_sample: float, samples_per_s: float, peak_gflops: float) -> float:
    from hpclab.compute.mfu import mfu

    return mfu(flops_per_sample, samples_per_s, peak_gflops)


_MFU_MISTAKES = (
    (lambda f, s, p: f * s / p, "the peak is in GFLOP/s: multiply it by 1e9 (FLOP/s)"),
    (lambda f, s, p: 100 * _mfu(f, s, p), "give a fraction (0.12), not a percentage (12)"),
    (lambda f, s, p: 1 / _mfu(f, s, p), "that is peak / achieved; MFU is achieved / peak"),
    (
        lambda f, s, p: f / s / (p * 1e9),
        "samples per second multiply the FLOPs per sample (you divided)",
    ),
    (
        lambda f, s, p: _mfu(f, s, p) / 3,
        "the FLOPs per sample already hold the forward and the backward pass: do not divide by 3",
    ),
    (
        lambda f, s, p: 3 * _mfu(f, s, p),
        "the FLOPs per sample already hold the backward pass: do not multiply by 3",
    ),
)


@exercise_check
def mfu(fn: Any, flops_per_sample: float, samples_per_s: float, peak_gflops: float) -> CheckResult:
    """``fn(flops_per_sample, samples_per_s, peak_gflops)``: the model FLOPs utilisation as a
    fraction, tried on the live run and on a CPU and a GPU node's figures."""
    if not callable(fn):
        return failed(
            "pass your function my_mfu itself (not a number): it is tried on other runs too"
        )
    cases = [
        (flops_per_sample, samples_per_s, peak_gflops),
        (9.6e6, 4700.0, 198.0),  # an MLP on one CPU core
        (6 * 100.8e6 * 512, 16 / 0.0198, 989.4e3),  # a 100 M transformer step on an H100 (bf16)
    ]

    def differs(case: tuple, got: float, want: float) -> str:
        f, s, p = case
        return (
            f"for {f:.4g} FLOPs/sample at {s:.4g} samples/s on a {p:.4g} GFLOP/s peak you return "
            f"{got:.4g}; expected {f:.4g} x {s:.4g} / ({p:.4g} x 1e9) = {want:.4g}"
        )

    return formula_check(
        fn, cases, "my_mfu", _mfu, _MFU_MISTAKES,
        "MFU = model FLOPs per sample x samples/s / peak FLOP/s (checked on a CPU core and a GPU).",
        differs,
    )  # fmt: skip
