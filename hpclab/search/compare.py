"""Experiment ``search-strategies``: grid vs random vs model-based at equal budget (chapter 08).

One search is one draw: a lucky random search beats a model on a given day. Each strategy runs
``seeds`` times at the same budget, and the plot shows the median and the range of the best loss
found after each trial; :func:`trials_to_reach` says how many trials the median search needed to
reach a target loss (what the chapter's exercise asks the student to read off the plot).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, param
from hpclab.display import figure
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.search.search_experiment import SearchConfig, run_search
from hpclab.search.strategies import STRATEGIES


@dataclass(frozen=True)
class StrategiesConfig(Config):
    strategies: tuple = param(
        ("grid", "random", "tpe"), choices=STRATEGIES, help="strategies to compare"
    )
    trials: int = param(16, min=2, max=500, quick=6, help="budget of each search")
    seeds: int = param(3, min=1, max=20, quick=2, help="searches per strategy (different seeds)")
    epochs: int = param(3, min=1, max=100, quick=1, help="epochs per trial")
    samples: int = param(
        0, min=0, max=100_000, quick=300, help="training samples per trial (0 = all)"
    )


def run_strategies(cfg: StrategiesConfig, progress: Progress) -> Result:
    """Each strategy ``seeds`` times at the same budget, one after another; one record per trial
    with the best loss found so far (a search is only as good as its median over seeds)."""
    records = []
    runs = [(s, seed) for s in cfg.strategies for seed in range(cfg.seeds)]
    for k, (strategy, seed) in enumerate(runs):
        progress.update(k, len(runs), f"{strategy}, seed {seed}")
        one = SearchConfig.create(
            backend="sequential", strategy=strategy, trials=cfg.trials, epochs=cfg.epochs,
            seed=seed, samples=cfg.samples,
        )  # fmt: skip
        for r in run_search(one, Progress()).records:
            records.append({**r, "seed": seed})
    progress.update(1, 1, "")
    return make_result("search-strategies", cfg, records)


def trials_to_reach(records: list[dict], strategy: str, target: float) -> float:
    """Median over seeds of the trials a strategy needed to reach ``target`` (inf: never)."""
    import statistics

    needed = []
    for seed in sorted({r["seed"] for r in records if r["strategy"] == strategy}):
        rs = sorted((r for r in records if r["strategy"] == strategy and r["seed"] == seed),
                    key=lambda r: r["trial"])  # fmt: skip
        hit = next((r["trial"] + 1 for r in rs if r["best_so_far"] <= target), math.inf)
        needed.append(hit)
    return statistics.median(needed) if needed else math.inf


@figure
def plot_strategies(result: Result) -> Any:
    """Median (line) and range over seeds (band) of the best loss so far, per strategy."""
    import statistics

    import plotly.graph_objects as go

    colours = {"grid": "#7f7f7f", "random": "#1f77b4", "tpe": "#d62728"}
    fig = go.Figure()
    for strategy in dict.fromkeys(r["strategy"] for r in result.records):
        rs = [r for r in result.records if r["strategy"] == strategy]
        xs = sorted({r["trial"] for r in rs})
        per = [[r["best_so_far"] for r in rs if r["trial"] == x] for x in xs]
        c = colours.get(strategy, "#2ca02c")
        fig.add_trace(go.Scatter(x=[x + 1 for x in xs] + [x + 1 for x in reversed(xs)],
                                 y=[max(v) for v in per] + [min(v) for v in reversed(per)],
                                 fill="toself", fillcolor=c, opacity=0.15, line={"width": 0},
                                 showlegend=False, hoverinfo="skip"))  # fmt: skip
        fig.add_trace(go.Scatter(x=[x + 1 for x in xs], y=[statistics.median(v) for v in per],
                                 mode="lines+markers", name=strategy, line={"color": c}))  # fmt: skip
    seeds = len({r["seed"] for r in result.records})
    fig.update_layout(
        title=f"best validation loss vs trials spent (median and range over {seeds} seeds)",
        height=400, legend={"orientation": "h", "y": -0.2},
    )  # fmt: skip
    fig.update_xaxes(title_text="trials spent")
    fig.update_yaxes(title_text="best validation loss so far", type="log")
    return fig


def suggested_target(records: list[dict]) -> float:
    """A target loss some strategy's median search reaches within the budget: the median of the
    strategies' final median losses, rounded up to 2 decimals (for the chapter's exercise)."""
    import statistics

    finals = []
    for strategy in dict.fromkeys(r["strategy"] for r in records):
        last = max(r["trial"] for r in records if r["strategy"] == strategy)
        finals.append(statistics.median(
            r["best_so_far"] for r in records if r["strategy"] == strategy and r["trial"] == last
        ))  # fmt: skip
    return math.ceil(statistics.median(finals) * 100) / 100
