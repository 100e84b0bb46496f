"""Check for chapter 07's exercise (e): time to train from a measured rate, and the bill.

Two functions, each tried on several cases against :mod:`hpclab.cluster.costs`; a plausible
mistake that reproduces the answer on every case is named. Re-exported by
:mod:`hpclab.check.cluster` (the chapter's checks)."""

from __future__ import annotations

from typing import Any

from hpclab.check import CheckResult, exercise_check, failed, formula_check, passed
from hpclab.cluster.costs import MAO2015, run_cost_usd, train_hours

_HOURS_MISTAKES = (
    (lambda n, e, i, s: 3600 * train_hours(n, e, i, s), "that is seconds; divide by 3600"),
    (lambda n, e, i, s: 60 * train_hours(n, e, i, s), "that is minutes; divide by 60 again"),
    (lambda n, e, i, s: train_hours(n, 1, i, s), "that is one epoch; multiply by the epochs"),
    (
        lambda n, e, i, s: n * e * (i / s) / 3600,
        "you multiplied by the rate: time = images / (images per second), and the rate is "
        "sample_images / sample_seconds",
    ),
    (
        lambda n, e, i, s: train_hours(n, e, i / 256, s),
        "5120 images is 20 iterations of batch 256: count images, not iterations",
    ),
)

_COST_MISTAKES = (
    (
        lambda h, g, e, p: h / e * g * p,
        "you billed the one-GPU time on every GPU: on g GPUs the run takes hours / (g x "
        "efficiency) of wall time, and each GPU is billed for that",
    ),
    (
        lambda h, g, e, p: h / (g * e) * p,
        "that bills one GPU for the wall time: each of the g GPUs is billed",
    ),
    (lambda h, g, e, p: h * e * p, "divide by the efficiency: a run below 1 takes longer"),
    (lambda h, g, e, p: h * p, "the lost efficiency is paid too: divide by it"),
)

# (dataset images, epochs, sample images, sample seconds): Mao 2015's AlexNet, his GoogLeNet
# (5120 images in 67.5 s, 250 epochs), a small run
HOURS_CASES = (
    tuple(MAO2015[k] for k in ("dataset_images", "epochs", "sample_images", "sample_seconds")),
    (1.2e6, 250, 5120, 67.5),
    (50000, 30, 1024, 2.0),
)
# (hours on one GPU, GPUs, efficiency, USD per GPU-hour)
COST_CASES = ((155.3, 8, 0.9, 2.5), (100.0, 4, 0.75, 3.0), (10.0, 64, 0.5, 4.0))


@exercise_check
def check_run_cost(hours_fn: Any, cost_fn: Any) -> CheckResult:
    """``hours_fn(dataset_images, epochs, sample_images, sample_seconds)`` -> hours and
    ``cost_fn(hours_one_gpu, gpus, efficiency, usd_per_gpu_hour)`` -> USD."""
    if not callable(hours_fn) or not callable(cost_fn):
        return failed("pass your two functions themselves (not numbers): each is tried on cases")

    def hours_differ(case: tuple, got: float, want: float) -> str:
        n, e, i, s = case
        return (
            f"train_hours{case} = {got:.4g}; expected {n:g} x {e:g} / ({i:g} / {s:g}) / 3600 "
            f"= {want:.4g} hours"
        )

    hours = formula_check(
        hours_fn, HOURS_CASES, "train_hours", train_hours, _HOURS_MISTAKES,
        "", hours_differ,
    )  # fmt: skip
    if not hours:
        return hours

    def cost_differs(case: tuple, got: float, want: float) -> str:
        h, g, e, p = case
        return (
            f"run_cost{case} = {got:.4g}; expected {h:g} / ({g} x {e:g}) wall hours x {g} GPUs "
            f"x {p:g} USD = {want:.4g} USD"
        )

    cost = formula_check(
        cost_fn, COST_CASES, "run_cost", run_cost_usd, _COST_MISTAKES, "", cost_differs
    )
    if not cost:
        return cost
    return passed(
        "hours = images x epochs / rate / 3600 (Mao 2015's AlexNet: ~155 h on one K40), and the "
        "bill = GPU-hours x price = hours on one GPU / efficiency x price, whatever the GPU count"
    )
