"""Figures of chapter 06's time to accuracy: steps to the target against the global batch (the
curve that bends), and the scaling explorer's runs by time to the target."""

from __future__ import annotations

import math
from typing import Any

from hpclab.display import figure
from hpclab.results import Result


@figure
def plot_large_batch(result: Result) -> Any:
    """Steps to the target vs global batch (log-log), a line per LR rule and warm-up; perfect
    scaling from the smallest batch (dotted), the fitted bend and the noise scale (vertical)."""
    import plotly.graph_objects as go

    sweep = [r for r in result.records if r.get("role") == "sweep"]
    fit = next((r for r in result.records if r.get("role") == "fit"), {})
    target = result.config.get("target_acc") if isinstance(result.config, dict) else None
    fig = go.Figure()
    for variant in dict.fromkeys(r["variant"] for r in sweep):
        rows = sorted(
            (r for r in sweep if r["variant"] == variant), key=lambda r: r["global_batch"]
        )
        fig.add_scatter(
            x=[r["global_batch"] for r in rows],
            y=[r["steps_to_target"] for r in rows],  # None: never reached, a gap in the line
            mode="lines+markers",
            name=f"live: {variant}",
            line={"dash": "dash" if "warm-up" in variant else "solid"},
            hovertext=[r.get("note") or f"lr {r['lr']:.3g}" for r in rows],
        )
    batches = sorted({r["global_batch"] for r in sweep})
    reached = (
        [r for r in sweep if r["global_batch"] == batches[0] and r["reached"]] if sweep else []
    )
    if reached:
        s0, b0 = min(r["steps_to_target"] for r in reached), batches[0]
        fig.add_scatter(
            x=batches, y=[s0 * b0 / b for b in batches], mode="lines", line={"dash": "dot"},
            name="perfect scaling (steps x batch = constant)",
        )  # fmt: skip
    if fit.get("b_crit"):
        s_min, b_crit = fit["s_min"], fit["b_crit"]
        fig.add_scatter(
            x=batches, y=[s_min * (1 + b_crit / b) for b in batches], mode="lines",
            line={"dash": "longdash", "color": "grey"},
            name=f"model: S_min (1 + B_crit/B), B_crit = {b_crit:.0f}",
        )  # fmt: skip
    lines = [(fit[key], label) for key, label in (("b_crit", "B_crit (fit)"), ("b_simple",
             "noise scale B_simple")) if fit.get(key) and fit[key] > 0]  # fmt: skip
    for value, label in lines:
        fig.add_vline(x=value, line_dash="dot")
        # On a log axis a shape takes the value but an annotation its log10 (plotly's rule: the
        # value itself put the label at 10^296 and squeezed the data into one corner). The
        # smaller value's label sits left of its line, the larger's right: they often are close.
        left = value < max(v for v, _ in lines)
        fig.add_annotation(
            x=math.log10(value), y=1, yref="paper", text=f"{label} {value:.0f}",
            showarrow=False, xanchor="right" if left else "left", yanchor="top",
            font={"size": 11},
        )  # fmt: skip
    fig.update_layout(
        title=f"Steps to {target or 'the target'} validation accuracy vs global batch",
        xaxis={"type": "log", "title": "global batch"},
        yaxis={"type": "log", "title": "steps to target"},
    )
    return fig


def time_to_target_figure(result: Result) -> Any:
    """``ddp`` runs to a target (what :func:`hpclab.ddp.plots.plot_ddp` draws for them): time to the target per rank
    count beside samples per second, a series per run's settings; a run that never reached the
    target is named in the title, not drawn."""
    from plotly.subplots import make_subplots

    from hpclab.display import run_label

    rows = sorted((r for r in result.records if "time_to_target_s" in r), key=lambda r: r["ranks"])
    fig = make_subplots(rows=1, cols=2, subplot_titles=("time to target (s)", "samples/s"))
    series: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        label = ", ".join(x for x in (r["tier"], run_label(r, ("ranks",))) if x)
        series.setdefault(label, []).append(r)
    for label, mine in series.items():
        x = [r["ranks"] for r in mine]
        fig.add_scatter(x=x, y=[r["time_to_target_s"] for r in mine], mode="markers+lines",
                        name=label, legendgroup=label, row=1, col=1)  # fmt: skip
        fig.add_scatter(x=x, y=[r["samples_per_s"] for r in mine], mode="markers+lines",
                        name=label, legendgroup=label, showlegend=False, row=1, col=2)  # fmt: skip
    missed = [r["note"] for r in rows if r.get("note") and r.get("reached") is False]
    fig.update_layout(title="<br>".join(missed) or "Time to the target vs samples per second")
    fig.update_xaxes(title_text="ranks", dtick=1)
    return fig
