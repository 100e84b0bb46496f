"""Experiment ``search-asha``: random search with and without early stopping, side by side
(chapter 08).

The same sampled configurations (random's, at each seed) trained to the end by ``random`` and
stopped at rungs by ``asha`` (and ``hyperband`` when asked): what early stopping saves (total
training epochs, wall time) and what it costs (the best validation loss found), over several
seeds, since one search is one draw. Li et al. report the trade-off on real benchmarks
(Hyperband, JMLR 2018: 5x to 30x faster than random search to a comparable loss; ASHA, MLSys
2020); :func:`asha_table` gives it here, :func:`plot_asha` shows the trials of one search as
lines ending where they stopped. Trials run one after another in this process, so their wall
times compare; the backends (``hpclab run search --strategy asha --backend celery|array``) run
the same strategy in parallel.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, ConfigError, param
from hpclab.display import figure
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.search.search_experiment import SearchConfig, run_search

COMPARED = ("random", "asha", "hyperband")


@dataclass(frozen=True)
class AshaConfig(Config):
    strategies: tuple = param(("random", "asha"), choices=COMPARED, help="strategies to compare")
    trials: int = param(27, min=3, max=500, quick=9, help="configurations sampled per search")
    seeds: int = param(3, min=1, max=20, quick=2, help="searches per strategy (different seeds)")
    epochs: int = param(9, min=2, max=100, quick=3, help="epochs of a trial trained to the end")
    eta: int = param(3, min=2, max=8, help="1 in eta trials goes on at each rung")
    samples: int = param(
        0, min=0, max=100_000, quick=300, help="training samples per trial (0 = all)"
    )

    def check(self) -> None:
        if self.epochs < self.eta:
            raise ConfigError(
                f"epochs={self.epochs} leaves one rung at eta={self.eta} (rungs at 1, eta, "
                f"eta^2 ... epochs); allowed: epochs >= eta = {self.eta}"
            )


def run_asha(cfg: AshaConfig, progress: Progress) -> Result:
    """Each strategy ``seeds`` times on the same configurations; one record per trial (its
    ``curve``, ``epochs`` and ``fate``) with the search's ``seed`` and ``search_s``."""
    records = []
    runs = [(seed, s) for seed in range(cfg.seeds) for s in cfg.strategies]
    for k, (seed, strategy) in enumerate(runs):
        progress.update(k, len(runs), f"{strategy}, seed {seed}")
        one = SearchConfig.create(
            backend="sequential", strategy=strategy, trials=cfg.trials, epochs=cfg.epochs,
            seed=seed, samples=cfg.samples, eta=cfg.eta,
        )  # fmt: skip
        res = run_search(one, Progress(cancel=progress.cancel_event))
        records += [{**r, "seed": seed, "search_s": r["wall_s"]} for r in res.records]
    progress.update(1, 1, "")
    return make_result("search-asha", cfg, records)


def per_search(records: list[dict]) -> list[dict[str, Any]]:
    """One row per (strategy, seed): best validation loss, total epochs, wall time."""
    rows = []
    for strategy in dict.fromkeys(r["strategy"] for r in records):
        for seed in sorted({r["seed"] for r in records if r["strategy"] == strategy}):
            rs = [r for r in records if r["strategy"] == strategy and r["seed"] == seed]
            rows.append({
                "strategy": strategy, "seed": seed,
                "best_val_loss": min(r["val_loss"] for r in rs),
                "epochs": sum(r["epochs"] for r in rs),
                "wall_s": rs[0]["search_s"],
                "stopped": sum(r["fate"] == "stopped" for r in rs),
            })  # fmt: skip
    return rows


def asha_table(result: Result) -> Any:
    """Median over seeds per strategy, and each one's ratio to random's (same seeds)."""
    import pandas as pd

    rows = per_search(result.records)
    out = []
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        mine = [r for r in rows if r["strategy"] == strategy]
        line = {"strategy": strategy, "searches": len(mine)}
        for key in ("best_val_loss", "epochs", "wall_s", "stopped"):
            line[key] = statistics.median(r[key] for r in mine)
        out.append(line)
    table = pd.DataFrame(out).set_index("strategy")
    if "random" in table.index:
        for key in ("best_val_loss", "epochs", "wall_s"):
            table[f"{key} / random"] = (table[key] / table.loc["random", key]).round(3)
    return table.round(4)


@figure
def plot_asha(result: Result) -> Any:
    """Left: one early-stopping search (the first seed), each trial a line of validation loss
    per epoch ending where it stopped. Right: every search, total epochs vs best loss."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    recs = result.records
    stopping = [s for s in dict.fromkeys(r["strategy"] for r in recs) if s != "random"]
    shown = stopping[0] if stopping else recs[0]["strategy"]
    seed = min(r["seed"] for r in recs)
    trials = [r for r in recs if r["strategy"] == shown and r["seed"] == seed]
    fig = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.12,
        subplot_titles=(f"{shown}, seed {seed}: each trial until it stopped",
                        "every search: epochs spent vs best loss found"),
    )  # fmt: skip
    for r in trials:
        ys = [v if math.isfinite(v) else None for v in r["curve"]]
        stopped = r["fate"] == "stopped"
        fig.add_trace(
            go.Scatter(
                x=list(range(1, len(ys) + 1)), y=ys, mode="lines+markers", showlegend=False,
                line={"color": "#999999" if stopped else "#d62728", "width": 1 if stopped else 2},
                # where a trial ends is the point: a stopped trial may be one epoch, one marker
                marker={"size": [5] * (len(ys) - 1) + [10],
                        "symbol": ["circle"] * (len(ys) - 1) + ["x" if stopped else "star"]},
                hovertext=f"trial {r['trial'] + 1}: {'stopped' if stopped else 'finished'} "
                          f"at epoch {r['epochs']}, loss {r['val_loss']:.3f}",
            ),
            row=1, col=1,
        )  # fmt: skip
    colours = {"random": "#1f77b4", "asha": "#d62728", "hyperband": "#2ca02c"}
    for strategy in dict.fromkeys(r["strategy"] for r in recs):
        rows = [r for r in per_search(recs) if r["strategy"] == strategy]
        fig.add_trace(
            go.Scatter(
                x=[r["epochs"] for r in rows], y=[r["best_val_loss"] for r in rows],
                mode="markers", name=strategy,
                marker={"size": 10, "color": colours.get(strategy, "#7f7f7f")},
                hovertext=[f"{strategy}, seed {r['seed']}: {r['wall_s']:.1f} s" for r in rows],
            ),
            row=1, col=2,
        )  # fmt: skip
    fig.update_xaxes(title_text="epoch", dtick=1, row=1, col=1)
    fig.update_yaxes(title_text="validation loss", type="log", row=1, col=1)
    fig.update_xaxes(title_text="training epochs, all trials of a search", row=1, col=2)
    fig.update_yaxes(title_text="best validation loss", row=1, col=2)
    n = result.config.get("trials", len(trials)) if result.config else len(trials)
    fig.update_layout(
        title=f"early stopping: {n} configurations per search (grey: stopped, red: finished)",
        height=420, legend={"orientation": "h", "y": -0.25},
    )  # fmt: skip
    return fig
