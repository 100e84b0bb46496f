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


def _break_even(compile_s: float, eager_s: float, compiled_s: float) -> float:
    saved = eager_s - compiled_s
    return compile_s / saved if saved > 0 else float("inf")


_BREAK_EVEN_MISTAKES = (
    (lambda c, e, k: c / k, "each step saves the difference eager - compiled, not a whole step"),
    (lambda c, e, k: c / e, "each step saves the difference eager - compiled, not a whole step"),
    (
        lambda c, e, k: c * (e / k),
        "the speed-up is a ratio; steps to break even need seconds saved",
    ),
    (lambda c, e, k: c / (k - e), "saved per step is eager - compiled (you subtracted backwards)"),
)


@exercise_check
def break_even(fn: Any, compile_s: float, eager_s: float, compiled_s: float) -> CheckResult:
    """``fn(compile_s, eager_s, compiled_s)``: the steps after which compiling has paid for
    itself (``inf`` when the compiled step is not faster), tried on the live run and others."""
    if not callable(fn):
        return failed("pass your function my_break_even itself: it is tried on other runs too")
    slower = (20.0, 0.010, 0.012)  # compiled slower: it never pays off
    try:
        never = fn(*slower)
    except Exception as err:  # noqa: BLE001 - a student's bug becomes feedback
        return failed(f"my_break_even{slower} raised {err!r}; a slower compiled step never pays")
    if never != float("inf"):
        return failed(
            f"my_break_even{slower} returned {never!r}: a compiled step slower than eager never "
            "pays for its compile time; return float('inf')"
        )
    cases = [
        (compile_s, eager_s, compiled_s) if eager_s > compiled_s else (5.0, 0.2, 0.1),
        (16.6, 0.0198, 0.0149),  # the H200 transformer of chapter 03's reference rows
        (40.0, 0.5, 0.25),
    ]

    def differs(case: tuple, got: float, want: float) -> str:
        c, e, k = case
        return (
            f"for compile_s={c:.4g}, eager {e:.4g} s and compiled {k:.4g} s per step you return "
            f"{got:.4g}; expected {c:.4g} / ({e:.4g} - {k:.4g}) = {want:.4g} steps"
        )

    return formula_check(
        fn, cases, "my_break_even", _break_even, _BREAK_EVEN_MISTAKES,
        "steps to break even = compile time / seconds saved per step (inf when none are saved).",
        differs,
    )  # fmt: skip


def _prefetch_mib(
    workers: int, prefetch_factor: int, batch_size: int, sample_bytes: float
) -> float:
    return workers * prefetch_factor * batch_size * sample_bytes / 2**20


_PREFETCH_MISTAKES = (
    (
        lambda w, p, b, s: p * b * s / 2**20,
        "every worker keeps its own batches in flight: x workers",
    ),
    (lambda w, p, b, s: w * b * s / 2**20, "each worker keeps prefetch_factor batches, not one"),
    (lambda w, p, b, s: w * p * s / 2**20, "a batch holds batch_size samples"),
    (lambda w, p, b, s: w * p * b * s / 1e6, "MiB is 2**20 bytes (1e6 is MB)"),
    (lambda w, p, b, s: w * p * b * s, "that is bytes; the answer is in MiB (2**20 bytes)"),
    (lambda w, p, b, s: w * (p + 1) * b * s / 2**20, "prefetch_factor already counts each batch"),
)


@exercise_check
def prefetch_memory(fn: Any) -> CheckResult:
    """``fn(workers, prefetch_factor, batch_size, sample_bytes)``: MiB of batches a DataLoader
    holds in flight (each worker keeps ``prefetch_factor`` batches ready)."""
    if not callable(fn):
        return failed("pass your function my_prefetch_mib itself: it is tried on several loaders")
    cases = [(2, 2, 64, 3 * 32 * 32), (8, 4, 256, 3 * 224 * 224 * 4), (3, 1, 10, 1000.0)]

    def differs(case: tuple, got: float, want: float) -> str:
        w, p, b, s = case
        return (
            f"for {w} workers, prefetch_factor {p}, batch {b} of {s:.0f} bytes you return "
            f"{got:.4g} MiB; expected {w} x {p} x {b} x {s:.0f} / 2**20 = {want:.4g}"
        )

    return formula_check(
        fn, cases, "my_prefetch_mib", _prefetch_mib, _PREFETCH_MISTAKES,
        "in flight = workers x prefetch_factor batches of batch_size samples.",
        differs,
    )  # fmt: skip
