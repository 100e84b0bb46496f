"""Plot pieces shared by chapter 05's Hogwild and parameter-server figures."""

from __future__ import annotations

from typing import Any


def add_loss_curves(fig: Any, points: list[dict[str, Any]], name: str) -> None:
    """Smoothed loss against wall time (column 1) and against updates (column 2), row 1."""
    for col, key in ((1, "time_s"), (2, "update")):
        fig.add_scatter(
            x=[p[key] for p in points],
            y=[p["loss_smoothed"] for p in points],
            mode="lines",
            name=name,
            legendgroup=name,
            showlegend=col == 1,
            row=1,
            col=col,
        )
