"""The ``fsdp`` experiment's figures (chapter 09 part 2): bytes held, sent and step time by
strategy (:func:`plot_fsdp`), and the state per rank against the rank count
(:func:`plot_state_vs_ranks`)."""

from __future__ import annotations

from hpclab.axes import DOUBLING
from hpclab.display import figure
from hpclab.results import Result


@figure
def plot_fsdp(result: Result):
    """Bytes per rank (state between steps, peak within a step) and bytes sent per step."""
    from plotly.subplots import make_subplots

    rows = result.records
    names = [r["strategy"] for r in rows]
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=("MiB held per rank", "MiB sent per rank per step", "step (ms)"),
    )
    mib = 2**20
    fig.add_bar(x=names, y=[r["state_bytes_per_rank"] / mib for r in rows], name="state (live)",
                row=1, col=1)  # fmt: skip
    fig.add_bar(x=names, y=[r["peak_bytes_per_rank"] / mib for r in rows], name="peak (live)",
                row=1, col=1)  # fmt: skip
    fig.add_scatter(x=names, y=[r["model_state_bytes"] / mib for r in rows], mode="markers",
                    name="state (model)", marker={"symbol": "line-ew-open", "size": 30,
                    "color": "black"}, row=1, col=1)  # fmt: skip
    fig.add_bar(x=names, y=[r["comm_bytes_per_step"] / mib for r in rows], name="sent (live)",
                row=1, col=2)  # fmt: skip
    if any(r.get("nodes", 1) > 1 for r in rows):  # what crosses the slow links between nodes
        fig.add_bar(x=names, y=[r["comm_bytes_inter_node"] / mib for r in rows],
                    name="across nodes (live)", row=1, col=2)  # fmt: skip
    fig.add_scatter(x=names, y=[r["model_comm_bytes"] / mib for r in rows], mode="markers",
                    name="sent (model)", marker={"symbol": "line-ew-open", "size": 30,
                    "color": "gray"}, row=1, col=2)  # fmt: skip
    fig.add_bar(x=names, y=[r["step_s"] * 1e3 for r in rows], name="step", row=1, col=3)
    cfg = result.config
    p = rows[0]["params"] / 1e6 if rows else 0
    fig.update_layout(
        title=f"{p:.1f} M parameters, Adam, fp32, on {cfg['ranks']} CPU ranks (gloo)"
        + (f" as {cfg['nodes']} nodes" if cfg.get("nodes", 1) > 1 else ""),
        barmode="group",
        height=420,
    )
    return fig


@figure
def plot_state_vs_ranks(results: list[Result]):
    """State bytes per rank against the rank count, live (markers) and model (lines)."""
    import plotly.graph_objects as go

    rows = sorted((r for res in results for r in res.records), key=lambda r: r["ranks"])
    fig = go.Figure()
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        mine = [r for r in rows if r["strategy"] == strategy]
        x = [r["ranks"] for r in mine]
        fig.add_scatter(x=x, y=[r["state_bytes_per_rank"] / 2**20 for r in mine],
                        mode="markers", marker={"size": 11}, name=f"{strategy} (live)")  # fmt: skip
        fig.add_scatter(x=x, y=[r["model_state_bytes"] / 2**20 for r in mine], mode="lines",
                        line={"dash": "dot"}, name=f"{strategy} (model)")  # fmt: skip
    fig.update_xaxes(title="ranks", type="log", dtick=DOUBLING)
    fig.update_yaxes(title="state per rank (MiB)", type="log")
    fig.update_layout(
        title="Sharded state shrinks as 1/N; DDP's does not<br><sup>state: parameters, "
        "gradients and Adam's two moments held by one rank between steps</sup>",
        height=420,
    )
    return fig
