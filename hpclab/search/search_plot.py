"""The search's views (chapter 08): the backends side by side (:func:`backends_table`) and one
search's best loss and timeline (:func:`plot_search`); trials that did not finish are shown by
their fate (:mod:`hpclab.search.fates`)."""

from __future__ import annotations

import math
from typing import Any

from hpclab.display import figure
from hpclab.results import Result
from hpclab.search.fates import fate_counts, summary
from hpclab.trial_record import fate_line


def _label(res: Result) -> str:
    r = res.records[0]
    where = " in one job" if r.get("where") == "slurm" else ""
    return f"{r['backend']}{where}"


def backends_table(results: list[Result]) -> Any:
    """One row per search: wall time, median trial, the median overhead per trial split into
    queue wait (scheduler or broker) and start-up (a fresh process's imports and data), the
    trials that could run at once, utilisation (the fraction of their time spent computing) and
    the best loss. The chapter's three-way comparison: sequential vs job array vs submitit vs
    Celery workers (here or inside one allocation) on the same trials."""
    import statistics

    import pandas as pd

    from hpclab.search.search_config import SearchConfig

    rows = []
    for res in results:
        recs = res.records
        ran = [r for r in recs if r.get("fate", "finished") in ("finished", "stopped")] or recs

        def med(key: str, recs: list[dict] = ran) -> float:
            return statistics.median(r.get(key, 0.0) for r in recs)

        rows.append({
            "backend": _label(res),
            "at once": SearchConfig.create(**res.config).slots if res.config else 1,
            "trials": len(recs),
            **fate_counts(recs),
            "wall (s)": round(recs[0]["wall_s"], 2),
            "median trial (s)": round(med("seconds"), 3),
            "median overhead (s)": round(med("overhead_s"), 3),
            "of which queue (s)": round(med("queue_s"), 3),
            "of which start-up (s)": round(med("startup_s"), 3),
            "utilisation": f"{recs[0]['utilisation']:.0%}",
            "best loss": round(min(r["val_loss"] for r in ran), 3),
        })  # fmt: skip
    return pd.DataFrame(rows).set_index("backend")


def _lanes(recs: list[dict]) -> dict[int, str]:
    """A lane per worker; for jobs (a fresh process per task) a lane per slot: each process
    takes the first lane free when it starts, so the lanes show how many ran at once."""
    recs = [r for r in recs if r["worker"] is not None]
    if not any(r["startup_s"] for r in recs):  # warm workers: a lane each
        workers = sorted({r["worker"] for r in recs}, key=str)
        return {r["trial"]: f"worker {workers.index(r['worker']) + 1}" for r in recs}
    free_at: list[float] = []
    lane_of: dict[str, int] = {}
    out = {}
    for r in sorted(recs, key=lambda r: r["began_s"]):
        if r["worker"] not in lane_of:
            begin = r["began_s"] - r["startup_s"]  # the process started
            free = [i for i, t in enumerate(free_at) if t <= begin + 1e-3]
            lane_of[r["worker"]] = free[0] if free else len(free_at)
            if not free:
                free_at.append(0.0)
        lane = lane_of[r["worker"]]
        free_at[lane] = max(free_at[lane], r["began_s"] + r["seconds"])
        out[r["trial"]] = f"slot {lane + 1}"
    return out


@figure
def plot_search(result: Result) -> Any:
    """Left: best validation loss vs trials spent. Right: when each trial ran, per worker."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    recs = result.records
    fig = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.12,
        subplot_titles=(f"best validation loss so far<br><sup>{summary(recs)}</sup>",
                        "trials per worker (grey: waiting, orange: start-up, blue: computing)"),
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=[r["trial"] + 1 for r in recs], y=[r["best_so_far"] for r in recs],
            mode="lines+markers", name=f"{recs[0]['strategy']} on {recs[0]['backend']}" if recs else "",
        ),
        row=1, col=1,
    )  # fmt: skip
    _mark_fates(fig, recs)
    lanes = _lanes(recs)
    bars = []
    for r in recs:
        if r["worker"] is None:
            continue
        # Grey: waiting (queue, throttle or broker); orange: a fresh process starting (imports,
        # data, a first step); blue: the trial computing; light grey: until the notebook had
        # the result. A later trial of a task runs in its warm process: no queue, no start-up.
        # One clock for every backend (:mod:`hpclab.trial_record`): the same segments.
        began = r["began_s"]
        segments = [(began, r["seconds"], "#1f77b4", "computing"),
                    (began + r["seconds"], r["end_s"] - began - r["seconds"], "#e5e5e5",
                     "result back")]  # fmt: skip
        if r["startup_s"]:
            segments += [(r["start_s"], r["queue_s"], "#c7c7c7", "queue"),
                         (began - r["startup_s"], r["startup_s"], "#ff7f0e", "start-up")]  # fmt: skip
        else:
            segments.append((r["start_s"], began - r["start_s"], "#c7c7c7", "queue + dispatch"))
        bars += [(r, *seg) for seg in segments if seg[1] > 0]
    # Waiting first, so that a task queued behind a running one does not hide its compute.
    for r, base, width, colour, what in sorted(bars, key=lambda b: b[3] != "#c7c7c7"):
        fig.add_trace(
            go.Bar(
                x=[width], y=[lanes[r["trial"]]], base=[base], orientation="h",
                showlegend=False, marker_color=colour, marker_line_width=0.5,
                hovertext=f"trial {r['trial'] + 1}, {what} {width:.2f} s: loss {r['val_loss']:.3f}",
            ),
            row=1, col=2,
        )  # fmt: skip
    fig.update_xaxes(title_text="trials", row=1, col=1)
    fig.update_yaxes(title_text="validation loss", type="log", row=1, col=1)
    fig.update_xaxes(title_text="seconds since the search started", row=1, col=2)
    fig.update_layout(
        title=what_ran(result),
        height=400,
        barmode="overlay",
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


def _mark_fates(fig: Any, recs: list[dict]) -> None:
    """Trials that did not finish, on the best-loss panel: where the curve has no point of
    theirs, a marker at the bottom of the panel says which and why."""
    import plotly.graph_objects as go

    style = {"failed": ("x", "#b42318"), "stopped": ("triangle-down", "#ff7f0e"),
             "never run": ("circle-open", "#7f7f7f")}  # fmt: skip
    finite = [r["val_loss"] for r in recs if math.isfinite(r["val_loss"])]
    floor = min(finite) * 0.9 if finite else 1.0
    for fate, (symbol, colour) in style.items():
        these = [r for r in recs if r.get("fate") == fate]
        if not these:
            continue
        fig.add_trace(
            go.Scatter(
                x=[r["trial"] + 1 for r in these],
                y=[r["val_loss"] if math.isfinite(r["val_loss"]) else floor for r in these],
                mode="markers", marker={"symbol": symbol, "color": colour, "size": 9},
                name=f"{fate} ({len(these)})",
                hovertext=[f"trial {r['trial'] + 1}: {fate_line(r)} {r.get('error') or ''}"
                           for r in these],  # fmt: skip
            ),
            row=1, col=1,
        )  # fmt: skip


def what_ran(result: Result) -> str:
    """The figure's title: the trials, how long one computed and what a fresh process cost (the
    ratio the chapter's lesson is about)."""
    import statistics

    from hpclab.display import plural

    recs = [r for r in result.records if r.get("fate", "finished") in ("finished", "stopped")]
    if not recs:
        return ""
    cfg = result.config
    line = (
        f"{plural(len(recs), 'trial')} ({plural(cfg.get('epochs', 1), 'epoch')} on "
        f"{cfg.get('samples') or 'all'} samples) on {recs[0]['backend']}: each computed "
        f"{statistics.median(r['seconds'] for r in recs):.2f} s"
    )
    ups = [r["startup_s"] for r in recs if r.get("startup_s")]
    if ups:
        # a second, smaller line: one line overflows the figure's width and is cut off
        line += f"<br><sup>a fresh process took {statistics.median(ups):.2f} s to start</sup>"
    return line
