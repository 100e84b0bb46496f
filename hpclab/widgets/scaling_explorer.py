"""The scaling explorer of chapter 06: the ``ddp`` panel, points accumulating, with the ranks
control capped at what this allocation offers (GPUs, else usable cores).

What the allocation offers comes from :func:`hpclab.dist.placement.gpu_count` and
:func:`hpclab.measure.sysinfo.usable_cores`; the view lives here.
"""

from __future__ import annotations

from typing import Any

from hpclab.widgets.panel import ExperimentPanel, panel


def scaling_explorer(**kwargs: Any) -> ExperimentPanel:
    from hpclab.dist.placement import gpu_count
    from hpclab.measure.sysinfo import usable_cores

    view = panel(
        "ddp",
        fields=("ranks", "batch_size", "model", "scaling", "device"),
        accumulate=True,
        **kwargs,
    )
    view.controls["ranks"].max = max(2, gpu_count(), usable_cores())
    view.controls["batch_size"].max = 2048  # a linear slider to 65536 is unusable
    return view
