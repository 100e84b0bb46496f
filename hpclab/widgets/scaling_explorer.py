"""Panels whose ranks control is capped at what this allocation offers (GPUs, else usable cores):
chapter 06's scaling explorer (the ``ddp`` panel, points accumulating), its time-to-accuracy view
(the same runs to a target validation accuracy) and part 2's data parallel by hand
(``dp-by-hand``).

What the allocation offers comes from :func:`hpclab.dist.placement.gpu_count` and
:func:`hpclab.measure.sysinfo.usable_cores`; the views live here.
"""

from __future__ import annotations

from typing import Any

from hpclab.widgets.controls import set_max
from hpclab.widgets.panel import ExperimentPanel, panel


def ranks_panel(
    experiment: str, fields: tuple[str, ...], batch_max: int, **kwargs: Any
) -> ExperimentPanel:
    """``panel(experiment)`` with the ranks slider capped at GPUs or usable cores (at least 2,
    at most what the config allows) and the batch slider at ``batch_max`` (a linear slider to
    65536 is unusable)."""
    from hpclab.dist.placement import gpu_count
    from hpclab.measure.sysinfo import usable_cores

    view = panel(experiment, fields=fields, **kwargs)
    (top,) = [f["max"] for f in view.experiment.config.describe() if f["name"] == "ranks"]
    # a 128-core node would otherwise offer ranks the config refuses
    view.controls["ranks"].max = min(top, max(2, gpu_count(), usable_cores()))
    set_max(view.controls["batch_size"], batch_max)
    return view


def scaling_explorer(**kwargs: Any) -> ExperimentPanel:
    """Chapter 06's ``ddp`` panel: runs accumulate so throughput and efficiency build a curve."""
    return ranks_panel(
        "ddp",
        ("ranks", "batch_size", "model", "scaling", "device"),
        2048,
        accumulate=True,
        **kwargs,
    )


def time_to_accuracy_panel(target_acc: float | None = None, **kwargs: Any) -> ExperimentPanel:
    """Chapter 06's time-to-accuracy view: the ``ddp`` panel with a target validation accuracy
    on the teacher task; runs accumulate, plotted as time to the target beside samples/s."""
    from hpclab.config import quick_mode

    run_now = kwargs.pop("run_now", True)
    view = ranks_panel(
        "ddp",
        ("ranks", "batch_size", "lr", "lr_rule", "warmup_epochs", "target_acc"),
        1024,
        accumulate=True,
        run_now=False,
        **kwargs,
    )
    view.controls["target_acc"].value = target_acc or (0.58 if quick_mode() else 0.64)
    view.controls["lr"].value = 0.2  # the teacher task's tuned rate at a batch of 64
    if run_now:
        view.start(wait=True)
    return view


def dp_by_hand_panel(**kwargs: Any) -> ExperimentPanel:
    """Chapter 06 part 2's ``dp-by-hand`` panel."""
    return ranks_panel(
        "dp-by-hand", ("ranks", "model", "batch_size", "bucket_cap_mb"), 512, **kwargs
    )
