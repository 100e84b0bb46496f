"""Experiment ``profile-fix``: fix the patient one finding at a time and measure each gain
(chapter 03).

The run starts with every fault on and removes them in ``order``; each stage is timed in
interleaved rounds (stage A, B, C, A, B, C, ...) so machine noise hits all alike, and each
stage's final loss is recorded (the fixes must not change it). A second table answers the
question students ask next: would DataLoader workers have fixed the data path instead? Workers
run the slow decoder beside the training loop, but handing each batch between processes costs
too: they can help the slow decoder (given free cores) and slow down the vectorised one.
"""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from hpclab.config import Config, ConfigError, param
from hpclab.display import figure, readable
from hpclab.measure.timing import Timing
from hpclab.profiling.patient import FAULTS, train
from hpclab.progress import Progress
from hpclab.results import Result, make_result

ORDER = ("threads", "leak", "item-sync", "cpu-tensors", "slow-data")


@dataclass(frozen=True)
class FixConfig(Config):
    order: tuple = param(ORDER, choices=tuple(FAULTS), help="faults, in the order they are fixed")
    steps: int = param(300, min=10, max=20000, quick=60, help="training steps per run")
    repeat: int = param(3, min=1, max=30, quick=2, help="interleaved rounds")
    workers: bool = param(True, help="also time DataLoader workers 0 vs 2, slow and fixed decoder")

    def check(self) -> None:
        if len(set(self.order)) != len(self.order):
            raise ConfigError(f"order={self.order!r} names a fault twice")


def stages(order: tuple[str, ...]) -> list[tuple[str, tuple[str, ...]]]:
    """``[("all faults", all), ("fix threads", rest), ...]``: one fault fewer per stage."""
    out = [("all faults", tuple(order))]
    for k, fault in enumerate(order):
        out.append((f"fix {fault}", tuple(order[k + 1 :])))
    return out


def _timed(samples: list[float]) -> Timing:
    return Timing(tuple(samples), warmup=1, clock="perf_counter")


def run_fix(config: FixConfig, progress: Progress) -> Result:
    plan = stages(config.order)
    cases = [("stage", label, faults, 0) for label, faults in plan]
    if config.workers:
        for decoder, faults in (("python decoder", ("slow-data",)), ("numpy decoder", ())):
            for w in (0, 2):
                cases.append(("workers", decoder, faults, w))
    train((), steps=5)  # warm-up: imports, first allocations
    seconds: dict[int, list[float]] = {i: [] for i in range(len(cases))}
    losses: dict[int, float] = {}
    total = config.repeat * len(cases)
    for rep in range(config.repeat):
        for i, (_kind, label, faults, w) in enumerate(cases):
            progress.update(rep * len(cases) + i, total, label)
            run = train(faults, steps=config.steps, workers=w)
            seconds[i].append(run.seconds)
            losses[i] = run.final_loss
    progress.update(total, total, "")
    samples = config.steps * 64
    records = []
    faulty_s = prev_s = None
    for i, (kind, label, faults, w) in enumerate(cases):
        t = _timed(seconds[i])
        rec = {
            "kind": kind,
            "stage": label,
            "faults": ",".join(faults) or "none",
            "workers": w,
            **t.summary(),
            "samples_per_s": samples / t.median_s,
            "ms_per_step": t.median_s / config.steps * 1e3,
            "final_loss": losses[i],
        }
        if kind == "stage":
            faulty_s = faulty_s or t.median_s
            rec["gain"] = (prev_s / t.median_s) if prev_s else 1.0
            rec["speedup_vs_faulty"] = faulty_s / t.median_s
            prev_s = t.median_s
        records.append(rec)
    return make_result("profile-fix", config, records)


@figure
def plot_fix(result: Result) -> go.Figure:
    """Left: a waterfall of milliseconds per step as each fault is fixed. Right: workers."""
    st = [r for r in result.records if r["kind"] == "stage"]
    wk = [r for r in result.records if r["kind"] == "workers"]
    fig = make_subplots(
        rows=1,
        cols=2 if wk else 1,
        column_widths=[0.65, 0.35] if wk else None,
        subplot_titles=("ms per step, one fix at a time", "DataLoader workers")[: 2 if wk else 1],
    )
    y = [st[0]["ms_per_step"]] + [
        b["ms_per_step"] - a["ms_per_step"] for a, b in zip(st, st[1:], strict=False)
    ]
    fig.add_trace(
        go.Waterfall(
            x=[r["stage"] for r in st] + ["fixed"],
            y=y + [0],
            measure=["absolute"] + ["relative"] * (len(st) - 1) + ["total"],
            text=[f"{st[0]['ms_per_step']:.2f} ms"]
            + [f"{r['gain']:.2f}x" for r in st[1:]]
            + [f"{st[-1]['speedup_vs_faulty']:.1f}x faster"],
            textposition="outside",
            showlegend=False,
            increasing={"marker": {"color": "#e03131"}},  # a "fix" that cost time
            decreasing={"marker": {"color": "#2f9e44"}},
        ),
        row=1,
        col=1,
    )
    for decoder in dict.fromkeys(r["stage"] for r in wk):
        rows = [r for r in wk if r["stage"] == decoder]
        fig.add_trace(
            go.Bar(
                x=[f"{r['workers']} workers" for r in rows],
                y=[r["samples_per_s"] for r in rows],
                name=decoder,
            ),
            row=1,
            col=2,
        )
    fig.update_yaxes(title_text="ms per step", row=1, col=1)
    if wk:
        fig.update_yaxes(title_text="samples/s", row=1, col=2)
    fig.update_layout(height=430, title="Fixing the patient (median of interleaved rounds)")
    return fig


def gains_table(result: Result):
    """Stage, samples/s, gain of that fix, speed-up vs all faults, final loss (a DataFrame)."""
    import pandas as pd

    rows = [r for r in result.records if r["kind"] == "stage"]
    cols = ["stage", "samples_per_s", "ms_per_step", "gain", "speedup_vs_faulty", "final_loss"]
    df = pd.DataFrame(rows)
    df["spread"] = df["seconds_iqr"] / df["seconds"]
    return readable(df[[*cols, "spread"]])  # three significant digits, as every table
