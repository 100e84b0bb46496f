"""The scaling explorer of chapter 06: the ``ddp`` panel, points accumulating, with the ranks
control capped at what this allocation offers (GPUs, else usable cores).

The ``ddp`` topic exposes the data (``hpclab.ddp.ddp_experiment.available``); the view lives here.
"""

from __future__ import annotations

from typing import Any

from hpclab.widgets.panel import ExperimentPanel, panel


def scaling_explorer(**kwargs: Any) -> ExperimentPanel:
    from hpclab.ddp.ddp_experiment import available

    view = panel(
        "ddp",
        fields=("ranks", "batch_size", "model", "scaling", "device"),
        accumulate=True,
        **kwargs,
    )
    have = available()
    view.controls["ranks"].max = max(2, have["gpus"], have["cores"])
    view.controls["batch_size"].max = 2048  # a linear slider to 65536 is unusable
    return view
