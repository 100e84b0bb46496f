"""The autotuner's plot (chapter 08): every screened candidate's samples/s, the default, the
finalists re-measured alone, and which won."""

from __future__ import annotations

from typing import Any

from hpclab.display import figure
from hpclab.results import Result
from hpclab.search.screen import KNOBS


def label(r: dict[str, Any]) -> str:
    """One line per configuration, for plots and tables."""
    ranks = f"{r['ranks']} rank{'s' if r['ranks'] > 1 else ''}"
    bucket = f", {r['bucket_cap_mb']:g} MB buckets" if r["ranks"] > 1 else ""
    return (
        f"{ranks} x {r['threads']} thr, batch {r['batch']}, {r['loader_workers']} loader w.{bucket}, "
        f"{r['dtype']}, {r['memory_format'].replace('_', '-')}"
    )


@figure
def plot_autotune(result: Result) -> Any:
    """Every screened candidate's samples/s (bars, error bars min..max; grey: the default, green:
    the best, hatched: disturbed) and, as diamonds, the finalists and the default measured alone."""
    import plotly.graph_objects as go

    rows = sorted(
        (r for r in result.records if r["status"] in ("measured", "default")),
        key=lambda r: r["samples_per_s"],
    )
    labels = [label(r) + (" (default)" if r["status"] == "default" else "") for r in rows]
    summary = next((r for r in result.records if r["status"] == "summary"), None)
    best = summary["best"] if summary else None
    final = [r for r in result.records if r["status"] == "final"]
    # The default's own configuration can win the alone rounds: then its row is the green one.
    default_won = bool(best and final and all(final[0][k] == best[k] for k in KNOBS))
    colours = [
        ("#2ca02c" if default_won else "#7f7f7f") if r["status"] == "default"
        else "#2ca02c" if best and not default_won and all(r[k] == best[k] for k in KNOBS)
        else "#1f77b4"
        for r in rows
    ]  # fmt: skip
    fig = go.Figure(
        go.Bar(
            x=[r["samples_per_s"] for r in rows], y=labels, orientation="h", marker_color=colours,
            marker_pattern_shape=["/" if r.get("disturbed") else "" for r in rows],
            name="screened (in parallel)",
            error_x={
                "type": "data", "symmetric": False,
                "array": [r["samples_per_s_max"] - r["samples_per_s"] for r in rows],
                "arrayminus": [r["samples_per_s"] - r["samples_per_s_min"] for r in rows],
            },
        )
    )  # fmt: skip
    where = {label(r): lab for r, lab in zip(rows, labels, strict=True) if r["status"] != "default"}
    where[label(final[0]) if final else ""] = next(
        (lab for r, lab in zip(rows, labels, strict=True) if r["status"] == "default"), ""
    )
    fig.add_scatter(
        x=[r["samples_per_s"] for r in final], y=[where.get(label(r), label(r)) for r in final],
        mode="markers", marker={"symbol": "diamond", "size": 11, "color": "#d62728"},
        name="re-measured alone (final)",
    )  # fmt: skip
    title = "training samples/s per candidate (green: best, grey: default, hatched: disturbed)"
    if summary:
        title += (
            f"<br><sup>{summary['candidates']} candidates, {summary['pruned']} pruned, "
            f"{summary['measured']} measured; "
            + (
                "the default won, measured alone"
                if default_won
                else f"best = {summary['best_vs_default']:.2f}x default (alone)"
            )
            + f"; screening {summary['screen_s']:.1f} s in parallel vs "
            f"{summary['screen_serial_s']:.1f} s of runs</sup>"
        )
        if summary.get("disturbed") or summary.get("disturbed_final_rounds"):
            title += (
                f"<br><sup>disturbed by other processes: {summary['disturbed']} screening runs, "
                f"{summary['disturbed_final_rounds']} final rounds (run again when it is quiet)"
                "</sup>"
            )
    fig.update_layout(
        title=title, height=max(320, 26 * len(rows) + 180), margin={"l": 380, "t": 110},
        legend={"orientation": "h", "y": -0.12},
    )  # fmt: skip
    fig.update_xaxes(title_text="samples/s")
    return fig
